"""Root-mean-square normalization (T5's layer norm, and RoFormer-v2's parameter-free norm), and
the conditional layer normalization of bert4keras's `layer_norm_cond`.
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
        unit_offset: multiply by `1 + scale`, the scale starting at 0 (Gemma's norms, stored so).

    Example:
    >>> norm = RMSNormalization(epsilon=0.0, scale=False)
    >>> [round(float(v), 4) for v in norm(ops.convert_to_tensor([[3.0, 4.0]]))[0]]
    [0.8485, 1.1314]
    >>> norm = RMSNormalization(name="norm")
    >>> _ = norm(ops.ones((1, 2, 8)))
    >>> [weight.path for weight in norm.weights]
    ['norm/scale']
    >>> gemma = RMSNormalization(epsilon=0.0, unit_offset=True)
    >>> [round(float(v), 4) for v in gemma(ops.convert_to_tensor([[3.0, 4.0]]))[0]]  # scale 0: times 1
    [0.8485, 1.1314]
    """

    def __init__(self, epsilon: float = 1e-6, scale: bool = True, unit_offset: bool = False, **kwargs):
        super().__init__(**kwargs)
        if unit_offset and not scale:
            raise ValueError("unit_offset offsets the learned scale: it needs scale=True")
        self.epsilon = epsilon
        self.scale = scale
        self.unit_offset = unit_offset
        self.supports_masking = True

    def build(self, input_shape):
        if self.scale:
            self.gamma = self.add_weight(name="scale", shape=(input_shape[-1],),
                                         initializer="zeros" if self.unit_offset else "ones")

    def call(self, inputs):
        x = ops.cast(inputs, "float32")
        x = x * ops.rsqrt(ops.mean(ops.square(x), axis=-1, keepdims=True) + self.epsilon)
        if self.scale:
            x = x * (ops.cast(self.gamma, "float32") + (1.0 if self.unit_offset else 0.0))
        return ops.cast(x, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon, "scale": self.scale,
                **({"unit_offset": True} if self.unit_offset else {})}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class ConditionalLayerNormalization(keras.layers.Layer):
    """Layer normalization whose scale and offset also depend on a condition (bert4keras's `layer_norm_cond`).

    Called on `[x, condition]`, with `condition` `[batch, C]` (or `[batch, 1,
    C]`): `x` is normalized over its last axis as `keras.layers.LayerNormalization`
    does, then scaled by `gamma + condition · W_γ` and shifted by `beta +
    condition · W_β`. `W_γ` and `W_β` start at zero, so the layer starts as the
    plain layer norm whose `gamma` and `beta` it holds (and loads from a
    checkpoint under the same names); with `hidden_units`, the condition
    first goes through a bias-free Dense of that width. Used in conditional
    language models and image captioning (the condition: a class embedding,
    an image's features). The mask is `x`'s.

    Args:
        epsilon: added to the variance.
        hidden_units: width of the condition's projection (None: none).
        hidden_activation: that projection's activation.
        hidden_initializer: its initializer.

    Example:
    >>> norm = ConditionalLayerNormalization(epsilon=1e-12, name="norm")
    >>> x, condition = ops.convert_to_tensor([[[1.0, 3.0]]]), ops.ones((1, 4))
    >>> [round(float(v), 4) for v in norm([x, condition])[0, 0]]  # W_γ, W_β start at 0: a plain layer norm
    [-1.0, 1.0]
    >>> [weight.path for weight in norm.weights]
    ['norm/gamma', 'norm/beta', 'norm/gamma_dense/kernel', 'norm/beta_dense/kernel']
    """

    def __init__(self, epsilon: float = 1e-3, hidden_units=None, hidden_activation="linear",
                 hidden_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon
        self.hidden_units = hidden_units
        self.hidden_activation = keras.activations.get(hidden_activation)
        self.hidden_initializer = keras.initializers.get(hidden_initializer)
        self.supports_masking = True

    def build(self, input_shape):
        x_shape, condition_shape = input_shape
        width = x_shape[-1]
        self.gamma = self.add_weight(name="gamma", shape=(width,), initializer="ones")
        self.beta = self.add_weight(name="beta", shape=(width,), initializer="zeros")
        condition_width = condition_shape[-1]
        self.hidden_dense = None
        if self.hidden_units is not None:
            self.hidden_dense = keras.layers.Dense(self.hidden_units, activation=self.hidden_activation,
                                                   use_bias=False, kernel_initializer=self.hidden_initializer,
                                                   name="hidden_dense", dtype=self.dtype_policy)
            self.hidden_dense.build(condition_shape)
            condition_width = self.hidden_units
        self.gamma_dense, self.beta_dense = (
            keras.layers.Dense(width, use_bias=False, kernel_initializer="zeros", name=name, dtype=self.dtype_policy)
            for name in ("gamma_dense", "beta_dense"))
        for dense in (self.gamma_dense, self.beta_dense):
            dense.build((*condition_shape[:-1], condition_width))

    def call(self, inputs):
        x, condition = inputs
        if self.hidden_dense is not None:
            condition = self.hidden_dense(condition)
        if len(condition.shape) == 2:  # one condition per example: the same for every position
            condition = ops.expand_dims(condition, 1)
        values = ops.cast(x, "float32")
        mean = ops.mean(values, axis=-1, keepdims=True)
        variance = ops.mean(ops.square(values - mean), axis=-1, keepdims=True)
        normalized = ops.cast((values - mean) * ops.rsqrt(variance + self.epsilon), self.compute_dtype)
        return normalized * (self.gamma + self.gamma_dense(condition)) + (self.beta + self.beta_dense(condition))

    def compute_mask(self, inputs, mask=None):
        return None if mask is None else mask[0]

    def compute_output_shape(self, input_shape):
        return input_shape[0]

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon, "hidden_units": self.hidden_units,
                "hidden_activation": keras.activations.serialize(self.hidden_activation),
                "hidden_initializer": keras.initializers.serialize(self.hidden_initializer)}
