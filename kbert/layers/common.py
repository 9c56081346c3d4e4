"""What every kbert layer shares: the serialization package, activations, initializer copies, the dtype policy
layers are built under.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

import keras
from keras import ops  # noqa: F401 (the docstring examples use it)

# Every kbert layer registers under this package, so `.keras` files load with safe_mode=True.
_PACKAGE = "kbert"


@keras.saving.register_keras_serializable(package=_PACKAGE)
def gelu_tanh(x):
    """GELU, tanh approximation (`gelu_new` in Google's and HF's configs)."""
    return keras.activations.gelu(x, approximate=True)


def get_activation(name: str):
    """The Keras activation for a canonical `BertConfig.activation` name."""
    return gelu_tanh if name == "gelu_tanh" else keras.activations.get(name)


def clone_initializer(initializer):
    """A new initializer of the same kind and settings, for one more weight.

    A Keras 3 initializer created without a seed picks one seed when it is
    created and returns the same values on every call, so weights that share
    one instance start out identical (Q = K = V, every block alike). Each
    weight therefore gets its own copy, which picks its own seed (from
    `keras.utils.set_random_seed` when that was called). An initializer given
    an explicit seed keeps it in the copy, as keras-hub's `clone_initializer`
    does.

    Example:
    >>> shared = keras.initializers.TruncatedNormal(stddev=0.02)
    >>> first, second = clone_initializer(shared), clone_initializer(shared)
    >>> bool(ops.all(first((3, 3)) == second((3, 3))))
    False
    """
    initializer = keras.initializers.get(initializer)
    return initializer.__class__.from_config(initializer.get_config())


@keras.saving.register_keras_serializable(package=_PACKAGE)
class DepthScaledTruncatedNormal(keras.initializers.TruncatedNormal):
    """RoFormer-v2's initializer (bert4keras's): truncated normal with a std from the weight's shape and depth.

    std = 1.13684723 / √fan · L^(−1/2), where fan is a kernel's input width, or
    for an embedding table (more than 10,000 rows, or fewer than 10) its
    width; 1.13684723 makes the truncated normal's variance 1/fan.

    Args:
        num_layers: the model's blocks L.
        seed: as Keras's initializers.

    Example:
    >>> values = DepthScaledTruncatedNormal(num_layers=4, seed=0)((256, 64))
    >>> round(float(ops.std(values)), 2)  # 1 / √256 / √4
    0.03
    """

    def __init__(self, num_layers: int = 1, seed=None):
        super().__init__(mean=0.0, stddev=1.0, seed=seed)
        self.num_layers = num_layers

    def __call__(self, shape, dtype=None):
        fan = shape[1] if shape[0] > 10000 or shape[0] < 10 else shape[0]
        stddev = 1.13684723 / fan ** 0.5 / self.num_layers ** 0.5
        return super().__call__(shape, dtype) * stddev

    def get_config(self):
        return {"num_layers": self.num_layers, "seed": self.seed}


@contextlib.contextmanager
def global_dtype_policy(policy: Optional[str]) -> Iterator[None]:
    """Keras's global dtype policy for the layers built inside (None: left as it is), restored afterwards.

    Example:
    >>> with global_dtype_policy("bfloat16"):
    ...     layer = keras.layers.Dense(2)
    >>> layer.variable_dtype, keras.config.dtype_policy().name
    ('bfloat16', 'float32')
    """
    previous = keras.config.dtype_policy()
    if policy:
        keras.config.set_dtype_policy(policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)
