"""Pooling a sequence of hidden states into one vector: what a sentence embedding model puts on its encoder.

The modes are sentence-transformers' (`1_Pooling/config.json`): the `[CLS]`
state, the mean or maximum of the real tokens, the mean scaled by the square
root of the length, the mean weighted by position (SGPT's), or the last real
token (decoder embedding models); several modes joined by `+` concatenate their
vectors in that order, as sentence-transformers does for several modes. The
padding travels as the Keras mask, so padded positions never count.
"""

from __future__ import annotations

from typing import Tuple

import keras
from keras import ops

from kbert.layers.common import _PACKAGE

#: The pooling modes, by sentence-transformers' names (`pooling_mode_<name>` in its config), in the order its
#: flags concatenate them.
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len", "weightedmean", "lasttoken")


def pooling_modes(mode: str) -> Tuple[str, ...]:
    """The modes a pooling names: one of `POOLING_MODES`, or several joined by `+` (their vectors concatenated in
    that order); anything else is a `ValueError` naming the modes.

    >>> pooling_modes("cls+mean")
    ('cls', 'mean')
    """
    modes = tuple(str(mode).split("+"))
    if not all(part in POOLING_MODES for part in modes) or len(set(modes)) != len(modes):
        raise ValueError(f"Pooling: mode {mode!r}; expected one of {', '.join(POOLING_MODES)}, or several of them "
                         "joined by + (each once)")
    return modes


@keras.saving.register_keras_serializable(package=_PACKAGE)
class Pooling(keras.layers.Layer):
    """Pools `[batch, seq, H]` hidden states into `[batch, H]` vectors, padding excluded (the Keras mask; a mask
    given to the call instead says which tokens are pooled: a prompt's can be left out, as sentence-transformers'
    `include_prompt` false does).

    Args:
        mode: `cls` (the first token the mask keeps: position 0), `mean` (the real tokens' mean), `max` (their
            element-wise maximum), `mean_sqrt_len` (their sum over the square
            root of their count), `weightedmean` (their mean weighted by
            position, 1 for the first), `lasttoken` (the last real token), or
            several joined by `+` (`cls+mean`: `[batch, 2 * H]`, the vectors
            side by side in that order).

    Example:
    >>> states = ops.convert_to_tensor([[[1.0, 2.0], [3.0, 4.0], [9.0, 9.0]]])
    >>> mask = ops.convert_to_tensor([[True, True, False]])
    >>> [ops.convert_to_numpy(Pooling(mode)(states, mask=mask)).tolist() for mode in ("cls", "mean", "max")]
    [[[1.0, 2.0]], [[2.0, 3.0]], [[3.0, 4.0]]]
    >>> pooled = ops.convert_to_numpy(Pooling("weightedmean+cls")(states, mask=mask))  # (1·1 + 2·3) / 3, ...
    >>> [round(float(value), 4) for value in pooled[0]]
    [2.3333, 3.3333, 1.0, 2.0]
    """

    def __init__(self, mode: str = "mean", **kwargs):
        super().__init__(**kwargs)
        self.modes = pooling_modes(mode)
        self.mode = mode
        self.supports_masking = True

    def call(self, inputs, mask=None):
        real = ops.ones(ops.shape(inputs)[:2], dtype="bool") if mask is None else ops.cast(mask, "bool")
        vectors = [self._pooled(mode, inputs, real) for mode in self.modes]
        return vectors[0] if len(vectors) == 1 else ops.concatenate(vectors, axis=-1)

    @staticmethod
    def _pooled(mode: str, inputs, real):
        # A row that keeps no token (a left-out prompt filling it) pools as sentence-transformers pools it: `cls`
        # its first token, `lasttoken` zeros, `max` minus infinity.
        if mode == "cls":  # the first token the mask keeps: position 0, unless a prompt before it is left out
            places = ops.shape(inputs)[1] - ops.arange(ops.shape(inputs)[1])  # n, n-1, ..., 1: the first is largest
            first = ops.shape(inputs)[1] - ops.max(ops.where(real, places[None], 0), axis=1)
            first = ops.where(ops.any(real, axis=1), first, 0)
            return ops.take_along_axis(inputs, ops.reshape(first, (-1, 1, 1)), axis=1)[:, 0]
        if mode == "max":  # a padded position takes minus infinity, so it never wins
            return ops.max(ops.where(ops.expand_dims(real, -1), inputs, ops.cast(float("-inf"), inputs.dtype)), axis=1)
        if mode == "lasttoken":
            last = ops.max(ops.where(real, ops.arange(ops.shape(inputs)[1])[None], 0), axis=1)  # the last kept
            kept = ops.cast(ops.any(real, axis=1), inputs.dtype)[:, None]
            return ops.take_along_axis(inputs, ops.reshape(last, (-1, 1, 1)), axis=1)[:, 0] * kept
        weights = ops.expand_dims(ops.cast(real, inputs.dtype), -1)
        if mode == "weightedmean":  # position 1 for the first token (the padding is on the right)
            weights = weights * ops.cast(ops.arange(1, ops.shape(inputs)[1] + 1), inputs.dtype)[None, :, None]
        total = ops.sum(inputs * weights, axis=1)
        count = ops.maximum(ops.sum(weights, axis=1), 1e-9)  # sentence-transformers' floor: no division by 0
        return total / (ops.sqrt(count) if mode == "mean_sqrt_len" else count)

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        width = input_shape[-1]
        return (input_shape[0], None if width is None else width * len(self.modes))

    def get_config(self):
        return {**super().get_config(), "mode": self.mode}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class L2Normalize(keras.layers.Layer):
    """Scales each vector to unit length (sentence-transformers' `Normalize`): cosine becomes a dot product.

    Example:
    >>> ops.convert_to_numpy(L2Normalize()(ops.convert_to_tensor([[3.0, 4.0]]))).tolist()
    [[0.6000000238418579, 0.800000011920929]]
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True  # a multi-vector encoder's token vectors keep their padding mask

    def call(self, inputs):
        norm = ops.sqrt(ops.sum(ops.square(inputs), axis=-1, keepdims=True))
        return inputs / ops.maximum(norm, 1e-12)  # torch.nn.functional.normalize's floor

    def compute_output_shape(self, input_shape):
        return input_shape


#: SPLADE's poolings over tokens and the activations before them (sentence-transformers' `SpladePooling`).
SPLADE_STRATEGIES = ("max", "sum")
SPLADE_ACTIVATIONS = ("relu", "log1p_relu")


@keras.saving.register_keras_serializable(package=_PACKAGE)
class SpladePooling(keras.layers.Layer):
    """SPLADE: `[batch, seq, V]` masked-LM logits into `[batch, V]` sparse weights, padding excluded.

    Each token's logits become `log(1 + ReLU(x))` (`log1p_relu`: `log(1 + log(1 + ReLU(x)))`, OpenSearch's
    models), then the real tokens' weights are pooled per vocabulary entry. What remains non-zero are the
    terms the model expands a text to; a padded position counts as zero, which never raises a maximum of
    non-negative weights.

    Args:
        strategy: `max` (SPLADE v2 and later) or `sum` (the first SPLADE).
        activation: `relu` or `log1p_relu`.

    Example:
    >>> logits = ops.convert_to_tensor([[[1.0, -2.0], [3.0, 0.5], [9.0, 9.0]]])
    >>> mask = ops.convert_to_tensor([[True, True, False]])
    >>> weights = ops.convert_to_numpy(SpladePooling()(logits, mask=mask))
    >>> [round(float(weight), 4) for weight in weights[0]]  # log(1 + 3), log(1 + 0.5); the padded 9s left out
    [1.3863, 0.4055]
    """

    def __init__(self, strategy: str = "max", activation: str = "relu", **kwargs):
        super().__init__(**kwargs)
        if strategy not in SPLADE_STRATEGIES or activation not in SPLADE_ACTIVATIONS:
            raise ValueError(f"SpladePooling: strategy {strategy!r}, activation {activation!r}; expected one of "
                             f"{', '.join(SPLADE_STRATEGIES)} and one of {', '.join(SPLADE_ACTIVATIONS)}")
        self.strategy = strategy
        self.activation = activation
        self.supports_masking = True

    def call(self, inputs, mask=None):
        # log(1 + x), not log1p: ONNX has no Log1p, and for x >= 0 the two differ by under a float32 step
        weights = ops.log(ops.relu(inputs) + 1.0)
        if self.activation == "log1p_relu":
            weights = ops.log(weights + 1.0)
        if mask is not None:
            weights = weights * ops.cast(mask, weights.dtype)[..., None]
        return ops.max(weights, axis=1) if self.strategy == "max" else ops.sum(weights, axis=1)

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        return {**super().get_config(), "strategy": self.strategy, "activation": self.activation}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TermWeights(keras.layers.Layer):
    """A text's sparse vector from a weight per vocabulary entry: each entry among its token ids, once however
    often, gets the entry's weight, the others 0 (sentence-transformers' `SparseStaticEmbedding`, the query side of
    an inference-free sparse encoder: no model runs on a query).

    Args:
        vocab_size: the vocabulary's size, the vector's width.
        ignored_ids: ids that never count: the padding and the special tokens (the table reads a query without
            them); negative ids (hidden ones) never count either.

    Example:
    >>> import numpy as np
    >>> layer = TermWeights(6, ignored_ids=(0,))
    >>> layer.build((None, None))
    >>> layer.set_weights([np.arange(6, dtype="float32") / 2])
    >>> ops.convert_to_numpy(layer(np.array([[4, 3, 4, 0]]))).tolist()  # 4 once, 3 once; the padding none
    [[0.0, 0.0, 0.0, 1.5, 2.0, 0.0]]
    """

    def __init__(self, vocab_size: int, ignored_ids: Tuple[int, ...] = (), **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.ignored_ids = int(vocab_size), tuple(int(index) for index in ignored_ids)

    def build(self, input_shape):
        self.weight = self.add_weight(shape=(self.vocab_size,), initializer="ones", name="weight")

    def call(self, token_ids):
        ids = ops.cast(token_ids, "int32")
        counted = ids >= 0
        for index in self.ignored_ids:
            counted = ops.logical_and(counted, ids != index)
        rows = ops.broadcast_to(ops.arange(ops.shape(ids)[0], dtype="int32")[:, None], ops.shape(ids))
        places = ops.stack([ops.reshape(rows, (-1,)), ops.reshape(ops.maximum(ids, 0), (-1,))], axis=1)
        # a scatter sums the repeats of an id: at most 1 each, so a repeated term counts once
        present = ops.scatter(places, ops.reshape(ops.cast(counted, self.compute_dtype), (-1,)),
                              (ops.shape(ids)[0], self.vocab_size))
        return ops.minimum(present, 1.0) * ops.cast(self.weight, self.compute_dtype)[None]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.vocab_size)

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "ignored_ids": list(self.ignored_ids)}
