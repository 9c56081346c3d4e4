"""What every kbert layer shares: the serialization package, activations, initializer copies.
"""

from __future__ import annotations

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
