"""Root-mean-square normalization: T5's layer norm, and RoFormer-v2's parameter-free norm.
"""

from __future__ import annotations

import keras
from keras import ops

from kbert.layers.common import _PACKAGE


@keras.saving.register_keras_serializable(package=_PACKAGE)
class RMSNormalization(keras.layers.Layer):
    """`x / sqrt(mean(x²) + ε)` over the last axis, then times a learned `scale` vector (if `scale`).

    No mean is subtracted and no offset added: T5's layer norm (with `scale`)
    and RoFormer-v2's (without: no weights at all), as bert4keras builds them
    (its `LayerNormalization(zero_mean=False, offset=False)`). The statistics
    are computed in float32 under mixed precision.

    Args:
        epsilon: added to the mean square.
        scale: learn a per-feature scale (T5); False: none (RoFormer-v2).

    Example:
    >>> norm = RMSNormalization(epsilon=0.0, scale=False)
    >>> [round(float(v), 4) for v in norm(ops.convert_to_tensor([[3.0, 4.0]]))[0]]
    [0.8485, 1.1314]
    >>> norm = RMSNormalization(name="norm")
    >>> _ = norm(ops.ones((1, 2, 8)))
    >>> [weight.path for weight in norm.weights]
    ['norm/scale']
    """

    def __init__(self, epsilon: float = 1e-6, scale: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon
        self.scale = scale
        self.supports_masking = True

    def build(self, input_shape):
        if self.scale:
            self.gamma = self.add_weight(name="scale", shape=(input_shape[-1],), initializer="ones")

    def call(self, inputs):
        x = ops.cast(inputs, "float32")
        x = x * ops.rsqrt(ops.mean(ops.square(x), axis=-1, keepdims=True) + self.epsilon)
        if self.scale:
            x = x * ops.cast(self.gamma, "float32")
        return ops.cast(x, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon, "scale": self.scale}
