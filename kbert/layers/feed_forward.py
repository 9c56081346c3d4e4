"""BERT's position-wise feed-forward network.
"""

from __future__ import annotations

import keras
from keras import ops  # noqa: F401 (the docstring examples use it)

from kbert.layers.common import _PACKAGE, clone_initializer


@keras.saving.register_keras_serializable(package=_PACKAGE)
class FeedForward(keras.layers.Layer):
    """BERT's position-wise feed-forward network: Dense(I, act) then Dense(H).

    Args:
        intermediate_size: width of the inner layer I.
        activation: activation of the inner layer (a Keras identifier).
        kernel_initializer: initializer of both kernels.

    Example:
    >>> ffn = FeedForward(intermediate_size=16, activation="gelu")
    >>> ffn(ops.ones((1, 3, 4))).shape
    TensorShape([1, 3, 4])
    """

    def __init__(self, intermediate_size: int, activation="gelu",
                 kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.intermediate_size = intermediate_size
        self.activation = keras.activations.get(activation)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True
        self.intermediate = keras.layers.Dense(
            intermediate_size, activation=self.activation,
            kernel_initializer=clone_initializer(self.kernel_initializer), name="intermediate",
            dtype=self.dtype_policy)
        self.output_dense = None

    def build(self, input_shape):
        self.intermediate.build(input_shape)
        self.output_dense = keras.layers.Dense(
            input_shape[-1], kernel_initializer=clone_initializer(self.kernel_initializer),
            name="output", dtype=self.dtype_policy)
        self.output_dense.build((*input_shape[:-1], self.intermediate_size))

    def call(self, inputs):
        return self.output_dense(self.intermediate(inputs))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "intermediate_size": self.intermediate_size,
            "activation": keras.activations.serialize(self.activation),
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }
