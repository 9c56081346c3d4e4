"""`bert4keras.layers` on Keras 3: the `Loss` layer, bert4keras's layer names, and Keras's own layers.

bert4keras's module re-exported `keras.layers`, so scripts import `Input`,
`Dense` or `Lambda` from it too; so does this one.

Example:
>>> import numpy as np
>>> import keras
>>> from kbert.compat.backend import K
>>> from kbert.compat.layers import Loss
>>> class MaskedSum(Loss):
...     def compute_loss(self, inputs, mask=None):
...         values, weights = inputs
...         return K.sum(values * weights)  # int weights arrive as floats, as in bert4keras
>>> values, weights = keras.Input((3,)), keras.Input((3,), dtype="int32")
>>> model = keras.Model([values, weights], MaskedSum(0)([values, weights]))
>>> _ = model([np.ones((1, 3)), np.array([[1, 0, 1]])])
>>> float(model.losses[0])
2.0
"""

from __future__ import annotations

import keras
from keras import ops
from keras.layers import *  # noqa: F401,F403 (bert4keras's layers module re-exports Keras's layers)

from kbert.layers import (ConditionalLayerNormalization, ConditionalRandomField, EfficientGlobalPointer, Embedding,
                          FeedForward, GlobalPointer, MaximumEntropyMarkovModel, PositionEmbedding,
                          SinusoidalPositionEmbedding)

__all__ = ["ConditionalRandomField", "EfficientGlobalPointer", "Embedding", "FeedForward", "GlobalPointer",
           "LayerNormalization", "Loss", "MaximumEntropyMarkovModel", "PositionEmbedding",
           "SinusoidalPositionEmbedding"]


@keras.saving.register_keras_serializable(package="kbert.compat")
class Loss(keras.layers.Layer):
    """A layer that computes a loss from its inputs and adds it to the model (bert4keras's `Loss`).

    Subclass it and write `compute_loss(self, inputs, mask=None)`; call the
    layer on the tensors the loss needs (labels included, as model inputs),
    and compile the model without a `loss`. The layer returns its inputs, or
    those of `output_axis`, so the model still predicts. Integer inputs
    (Keras 3 token and segment ids are int32, bert4keras's were floats) reach
    `compute_loss` cast to the float dtype, so `loss * segment_ids` works as
    written for bert4keras.

    Args:
        output_axis: which input(s) the layer returns: None (all), an index,
            or a list of indices.
    """

    def __init__(self, output_axis=None, **kwargs):
        super().__init__(**kwargs)
        self.output_axis = output_axis

    def call(self, inputs, mask=None):
        self.add_loss(self.compute_loss(_floats(inputs), mask))
        return self._pick(inputs)

    def compute_loss(self, inputs, mask=None):
        raise NotImplementedError(f"{type(self).__name__}: a Loss layer computes its loss in "
                                  "compute_loss(self, inputs, mask=None); define it in the subclass")

    def _pick(self, values):
        if self.output_axis is None or values is None:
            return values
        if isinstance(self.output_axis, (list, tuple)):
            return [values[axis] for axis in self.output_axis]
        return values[self.output_axis]

    def compute_output_shape(self, input_shape):
        return self._pick(input_shape)

    def compute_mask(self, inputs, mask=None):
        return self._pick(mask)

    def get_config(self):
        return {**super().get_config(), "output_axis": self.output_axis}


def _floats(inputs):
    """Integer and boolean tensors as floats; the rest as they are."""
    def to_float(tensor):
        dtype = keras.backend.standardize_dtype(tensor.dtype)
        return ops.cast(tensor, keras.config.floatx()) if "int" in dtype or dtype == "bool" else tensor
    return [to_float(tensor) for tensor in inputs] if isinstance(inputs, (list, tuple)) else to_float(inputs)


def LayerNormalization(center: bool = True, scale: bool = True, epsilon=None, conditional: bool = False,
                       hidden_units=None, hidden_activation="linear", hidden_initializer="glorot_uniform",
                       **kwargs) -> keras.layers.Layer:
    """bert4keras's `LayerNormalization`: Keras's, or with `conditional=True` kbert's `ConditionalLayerNormalization`.

    Called on `x`, or with `conditional=True` on `[x, condition]`. The default
    epsilon is bert4keras's 1e-12.
    """
    epsilon = 1e-12 if epsilon is None else epsilon
    if conditional:
        if not (center and scale):
            raise ValueError("LayerNormalization(conditional=True): kbert's conditional norm has both gamma "
                             "and beta; center=False or scale=False is not built")
        return ConditionalLayerNormalization(epsilon=epsilon, hidden_units=hidden_units,
                                             hidden_activation=hidden_activation,
                                             hidden_initializer=hidden_initializer, **kwargs)
    return keras.layers.LayerNormalization(epsilon=epsilon, center=center, scale=scale, **kwargs)
