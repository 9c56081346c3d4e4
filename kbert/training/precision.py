"""Mixed precision: `--mixed-precision bf16|fp16` for train, evaluate, predict and export.

A model built inside `precision_policy("bf16")` keeps its weights in float32
and computes in bfloat16 (Keras's `mixed_bfloat16`). Heads whose math must stay
exact (the classifier's softmax, the CRF, GlobalPointer, the losses) are built
float32 under any policy. bfloat16 pays on CPUs with bf16 units (the
`avx512_bf16` / `amx_bf16` flags; `cpu_bf16_units`) and on GPUs; elsewhere
it is emulated and slower than float32.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator, List, Optional

import keras

from kbert.errors import KbertError
from kbert.layers.common import global_dtype_policy

logger = logging.getLogger("kbert")

PRECISIONS = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


WEIGHT_DTYPES = ("float32", "bfloat16")  # --dtype: what the weights are held in


@contextlib.contextmanager
def precision_policy(mixed_precision: Optional[str], dtype: Optional[str] = None) -> Iterator[None]:
    """Keras's global dtype policy for what is built inside, restored afterwards.

    Args:
        mixed_precision: None (float32), `"bf16"` or `"fp16"`: the compute dtype.
        dtype: None or `"float32"`, or `"bfloat16"`: the weights held (and
            computed) in bfloat16, half the memory (`--dtype`); a loaded
            checkpoint's float32 tensors are rounded to it one at a time.

    Example:

    >>> import keras
    >>> with precision_policy("bf16"):
    ...     layer = keras.layers.Dense(2)
    >>> layer.compute_dtype, layer.variable_dtype, keras.mixed_precision.global_policy().name
    ('bfloat16', 'float32', 'float32')
    """
    if mixed_precision not in (None, *PRECISIONS):
        raise KbertError(f"unknown mixed precision {mixed_precision!r}; expected bf16 or fp16")
    if dtype not in (None, *WEIGHT_DTYPES):
        raise KbertError(f"unknown weight dtype {dtype!r}; expected {' or '.join(WEIGHT_DTYPES)}")
    if mixed_precision and dtype == "bfloat16":
        raise KbertError(f"--mixed-precision {mixed_precision} keeps the weights in float32, --dtype bfloat16 holds "
                         "them in bfloat16; pick one")
    with global_dtype_policy(PRECISIONS[mixed_precision] if mixed_precision else dtype):
        yield


def cpu_bf16_units(cpuinfo: str = "/proc/cpuinfo") -> List[str]:
    """The CPU's bfloat16 feature flags (`avx512_bf16`, `amx_bf16`) found in `/proc/cpuinfo`.

    An empty list where there are none, or where the file cannot be read.
    """
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as handle:
            flags = next((line.split(":", 1)[1].split() for line in handle if line.startswith("flags")), [])
    except OSError:
        return []
    return [flag for flag in BF16_CPU_FLAGS if flag in flags]


def warn_if_emulated(mixed_precision: Optional[str]) -> None:
    """Logs a warning when bf16 is asked for on a machine with neither bf16 CPU units nor a GPU."""
    if mixed_precision == "bf16" and not cpu_bf16_units() and not has_gpu():
        logger.warning("bf16: this CPU has no bf16 units (%s) and there is no GPU, so bfloat16 is "
                       "emulated and slower than float32", " / ".join(BF16_CPU_FLAGS))


def has_gpu() -> bool:
    """Whether the Keras backend sees a GPU."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return any(device.platform == "gpu" for device in jax.devices())
    if backend == "torch":
        import torch

        return torch.cuda.is_available()
    import tensorflow as tf

    return bool(tf.config.list_logical_devices("GPU"))
