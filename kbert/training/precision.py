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
import contextvars
import dataclasses
import functools
import logging
import os
import time
from typing import Callable, Iterator, List, Optional, Sequence

import keras
import numpy as np

from kbert.errors import KbertError
from kbert.layers.common import global_dtype_policy

logger = logging.getLogger("kbert")

PRECISIONS = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


WEIGHT_DTYPES = ("float32", "bfloat16")  # --dtype: what the weights are held in
DTYPES = ("auto", *WEIGHT_DTYPES)  # --dtype's choices: auto picks one of the others for the machine
DTYPE_VARIABLE = "KBERT_DTYPE"  # where --dtype is left at auto, this environment variable may name one
# auto's probe: one feed-forward product of BERT-base (256 tokens x 768 -> 3072), and how much faster bfloat16's
# must run than float32's for auto to pick it (a margin over the probe's noise: AMX runs it several times faster)
PROBE_SHAPE = (256, 768, 3072)
BF16_MIN_SPEEDUP = 1.2

# The `DtypeChoice` of an enclosing `precision_policy` (the CLI's): loaders asked for "auto" keep it
_ACTIVE_DTYPE: contextvars.ContextVar = contextvars.ContextVar("kbert_active_dtype", default=None)


@contextlib.contextmanager
def precision_policy(mixed_precision: Optional[str], dtype: "str | DtypeChoice | None" = None) -> Iterator[None]:
    """Keras's global dtype policy for what is built inside, restored afterwards.

    Args:
        mixed_precision: None (float32), `"bf16"` or `"fp16"`: the compute dtype.
        dtype: None or `"float32"`, or `"bfloat16"`: the weights held (and
            computed) in bfloat16, half the memory (`--dtype`); a loaded
            checkpoint's float32 tensors are rounded to it one at a time. A
            `DtypeChoice` (`choose_dtype`'s) is one with its reason, which
            loaders inside report (`model_dtype`).

    Example:

    >>> import keras
    >>> with precision_policy("bf16"):
    ...     layer = keras.layers.Dense(2)
    >>> layer.compute_dtype, layer.variable_dtype, keras.mixed_precision.global_policy().name
    ('bfloat16', 'float32', 'float32')
    """
    choice = dtype if isinstance(dtype, DtypeChoice) else None
    dtype = choice.dtype if choice else dtype
    if mixed_precision not in (None, *PRECISIONS):
        raise KbertError(f"unknown mixed precision {mixed_precision!r}; expected bf16 or fp16")
    if dtype not in (None, *WEIGHT_DTYPES):
        raise KbertError(f"unknown weight dtype {dtype!r}; expected {' or '.join(WEIGHT_DTYPES)}")
    if mixed_precision and dtype == "bfloat16":
        raise KbertError(f"--mixed-precision {mixed_precision} keeps the weights in float32, --dtype bfloat16 holds "
                         "them in bfloat16; pick one")
    policy = PRECISIONS[mixed_precision] if mixed_precision else dtype
    token = _ACTIVE_DTYPE.set(choice or DtypeChoice(policy or "float32", f"--mixed-precision {mixed_precision}"
                                                    if mixed_precision else "asked for"))
    try:
        with global_dtype_policy(policy):
            yield
    finally:
        _ACTIVE_DTYPE.reset(token)


@dataclasses.dataclass(frozen=True)
class DtypeChoice:
    """The weight dtype a model runs in (`float32` or `bfloat16`) and why: `--dtype` as asked, or what `auto`
    found on this machine."""

    dtype: str
    reason: str

    def __str__(self) -> str:
        return f"{self.dtype} ({self.reason})"


def choose_dtype(asked: str = "auto") -> DtypeChoice:
    """The weight dtype for `asked` (`--dtype`): float32 or bfloat16 as named; for `auto` (the default) the one
    `KBERT_DTYPE` names where it is set, else `auto_dtype`'s for this machine."""
    if asked not in DTYPES:
        raise KbertError(f"--dtype {asked}: expected one of {', '.join(DTYPES)}")
    if asked != "auto":
        return DtypeChoice(asked, "asked for")
    named = os.environ.get(DTYPE_VARIABLE)
    if not named:
        return auto_dtype()
    if named not in WEIGHT_DTYPES:
        raise KbertError(f"{DTYPE_VARIABLE}={named}: expected {' or '.join(WEIGHT_DTYPES)} (or leave it unset for "
                         "auto)")
    return DtypeChoice(named, f"{DTYPE_VARIABLE}={named}")


def auto_dtype(flags: Optional[Sequence[str]] = None,
               speedup: Optional[Callable[[], float]] = None) -> DtypeChoice:
    """`--dtype auto`'s rule: bfloat16 where the CPU has bfloat16 matrix units (`amx_bf16`) and a bfloat16 product
    measures at least `BF16_MIN_SPEEDUP` times float32's on the Keras backend; float32 elsewhere. Without AMX,
    bfloat16 gains little on a CPU (`avx512_bf16` alone: docs/performance.md) and changes every vector, so auto
    keeps float32.

    Args:
        flags: the CPU's feature flags (default: `/proc/cpuinfo`'s).
        speedup: gives float32's time over bfloat16's (default: `bf16_matmul_speedup` on the Keras backend,
            measured once a process).

    Example:

    >>> auto_dtype(flags=["avx512f", "avx512_bf16"]).dtype
    'float32'
    >>> print(auto_dtype(flags=["amx_bf16"], speedup=lambda: 3.0))
    bfloat16 (auto: amx_bf16, a bfloat16 product ran 3.0x float32's)
    """
    flags = cpu_flags() if flags is None else flags
    if "amx_bf16" not in flags:
        return DtypeChoice("float32", "auto: no bfloat16 matrix units (amx_bf16) on this CPU")
    ratio = (speedup or functools.partial(bf16_matmul_speedup, keras.backend.backend()))()
    if ratio >= BF16_MIN_SPEEDUP:
        return DtypeChoice("bfloat16", f"auto: amx_bf16, a bfloat16 product ran {ratio:.1f}x float32's")
    return DtypeChoice("float32", f"auto: amx_bf16, but a bfloat16 product ran {ratio:.2f}x float32's")


@functools.lru_cache(maxsize=None)
def bf16_matmul_speedup(backend: str, repeats: int = 5) -> float:
    """float32's time over bfloat16's for one `PROBE_SHAPE` product through `keras.ops` on `backend` (the one
    loaded: the argument keys the cache), the fastest of `repeats` each after a warm-up. It is what a backend's
    bfloat16 path gives on this machine: oneDNN's AMX kernels where TensorFlow and PyTorch use them, XLA's."""
    rows, inner, columns = PROBE_SHAPE
    rng = np.random.default_rng(0)
    left = rng.standard_normal((rows, inner), dtype=np.float32)
    right = rng.standard_normal((inner, columns), dtype=np.float32)

    def fastest(dtype: str) -> float:
        a, b = keras.ops.convert_to_tensor(left, dtype), keras.ops.convert_to_tensor(right, dtype)
        seconds = []
        for _ in range(repeats + 1):
            started = time.perf_counter()
            keras.ops.convert_to_numpy(keras.ops.matmul(a, b))  # to the host: JAX's calls return at once
            seconds.append(time.perf_counter() - started)
        return min(seconds[1:])

    return fastest("float32") / fastest("bfloat16")


@contextlib.contextmanager
def model_dtype(asked: str = "auto") -> Iterator[DtypeChoice]:
    """Builds what is made inside in the weight dtype `asked` resolves to (`choose_dtype`), logging the choice;
    inside a `precision_policy` (the CLI's, which chose already), `auto` keeps that one (and its reason)."""
    active = _ACTIVE_DTYPE.get()
    if asked == "auto" and active is not None:
        _announce(active)
        yield active
        return
    choice = choose_dtype(asked)
    _announce(choice)
    with precision_policy(None, choice):
        yield choice


_announced: List[DtypeChoice] = []  # the last choice logged: a command's, logged as its model loads


def _announce(choice: DtypeChoice) -> None:
    """Logs a model's weight dtype and why, once for a choice (a command's loads several parts under one)."""
    if not _announced or _announced[-1] is not choice:
        logger.info("weights in %s", choice)
        _announced[:] = [choice]


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> List[str]:
    """The CPU's feature flags as `/proc/cpuinfo` lists them; an empty list where the file cannot be read."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as handle:
            return next((line.split(":", 1)[1].split() for line in handle if line.startswith("flags")), [])
    except OSError:
        return []


def cpu_bf16_units(cpuinfo: str = "/proc/cpuinfo") -> List[str]:
    """The CPU's bfloat16 feature flags (`avx512_bf16`, `amx_bf16`); an empty list where there are none."""
    flags = cpu_flags(cpuinfo)
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
