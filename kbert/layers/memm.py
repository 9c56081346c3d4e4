"""A (bidirectional) maximum-entropy Markov model: bert4keras's faster, simpler alternative to the CRF.

Each position's label distribution is a softmax of the average of its own
label scores and the transition scores from the previous position's true
label (teacher forcing); the loss averages this over both reading
directions. Decoding is the CRF's: `ViterbiDecoder(layer.trans, ...)`.
"""

from __future__ import annotations

from typing import Optional

import keras
from keras import ops

from kbert.layers.common import _PACKAGE
from kbert.layers.crf import MASKED, mark_padding, real_positions  # noqa: F401 (MASKED: the example reads it)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class MaximumEntropyMarkovModel(keras.layers.Layer):
    """MEMM over label scores `[batch, length, T]`, trained with `sparse_loss` or `dense_loss` (bert4keras's).

    Args:
        lr_multiplier: scales the transitions' learning rate (stored divided
            by it, used multiplied by it), as the CRF's.
        hidden_dim: None for a full `[T, T]` transition matrix; a width for a
            low-rank one, `l_trans · r_transᵀ` of two `[T, hidden_dim]` factors.
        **kwargs: as for `keras.layers.Layer`; the layer computes in float32
            unless another `dtype` is given.

    Example:
    >>> memm = MaximumEntropyMarkovModel()
    >>> scores = memm(ops.zeros((1, 3, 4)), mask=ops.convert_to_tensor([[1, 1, 0]], "bool"))
    >>> tuple(memm.trans.shape), bool(scores[0, 2, 0] == MASKED)
    ((4, 4), True)
    >>> loss = memm.sparse_loss(ops.convert_to_tensor([[1, 2, 0]]), scores)  # the padded position counts not
    >>> tuple(loss.shape), bool(loss > 0)
    ((), True)
    """

    def __init__(self, lr_multiplier: float = 1, hidden_dim: Optional[int] = None, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.lr_multiplier = lr_multiplier
        self.hidden_dim = hidden_dim
        self.supports_masking = True

    def build(self, input_shape):
        labels = input_shape[-1]
        shapes = {"trans": (labels, labels)} if self.hidden_dim is None else \
            {"l_trans": (labels, self.hidden_dim), "r_trans": (labels, self.hidden_dim)}
        self._factors = {}
        for name, shape in shapes.items():
            weight = self.add_weight(name=name, shape=shape, initializer="glorot_uniform")
            if self.lr_multiplier != 1:
                weight.assign(weight / self.lr_multiplier)
            self._factors[name] = weight

    def _factor(self, name: str):
        return self.lr_multiplier * self._factors[name]

    @property
    def trans(self):
        """The transition scores `[T, T]` (with `hidden_dim`, the product of the two factors)."""
        if self.hidden_dim is None:
            return self._factor("trans")
        return ops.matmul(self._factor("l_trans"), ops.transpose(self._factor("r_trans")))

    def call(self, inputs, mask=None):
        return mark_padding(inputs, mask)

    def compute_mask(self, inputs, mask=None):
        return None

    def _scores(self, y_true, y_pred, backwards: bool):
        """(labels, each position's averaged scores, mask), read forwards or backwards."""
        y_pred = ops.cast(y_pred, "float32")
        mask = real_positions(y_pred)
        labels = ops.cast(ops.reshape(y_true, ops.shape(y_pred)[:-1]), "int32")
        trans = self.trans
        if backwards:
            lengths = ops.sum(ops.cast(mask, "int32"), axis=1)
            labels, y_pred = _reversed_rows(labels, lengths), _reversed_rows(y_pred, lengths)
            trans = ops.transpose(trans)
        history = ops.take(trans, labels, axis=0)  # scores following each position's true label
        history = ops.concatenate([y_pred[:, :1], history[:, :-1]], axis=1)
        averaged = ops.where(mask[..., None], (y_pred + history) / 2, 0.0)
        return labels, averaged, ops.cast(mask, "float32")

    def _direction_loss(self, y_true, y_pred, backwards: bool):
        labels, scores, mask = self._scores(y_true, y_pred, backwards)
        loss = ops.sparse_categorical_crossentropy(labels, scores, from_logits=True)
        return ops.sum(loss * mask) / ops.sum(mask)

    def sparse_loss(self, y_true, y_pred):
        """The mean cross-entropy of both directions, for integer labels `[batch, length]`."""
        return (self._direction_loss(y_true, y_pred, False) + self._direction_loss(y_true, y_pred, True)) / 2

    def dense_loss(self, y_true, y_pred):
        """`sparse_loss` for one-hot labels."""
        return self.sparse_loss(ops.argmax(y_true, 2), y_pred)

    def _direction_accuracy(self, y_true, y_pred, backwards: bool):
        labels, scores, mask = self._scores(y_true, y_pred, backwards)
        hits = ops.cast(ops.equal(labels, ops.cast(ops.argmax(scores, 2), "int32")), "float32")
        return ops.sum(hits * mask) / ops.sum(mask)

    def sparse_accuracy(self, y_true, y_pred):
        """Share of unmasked positions predicted right (teacher-forced), averaged over both directions."""
        return (self._direction_accuracy(y_true, y_pred, False) + self._direction_accuracy(y_true, y_pred, True)) / 2

    def dense_accuracy(self, y_true, y_pred):
        """`sparse_accuracy` for one-hot labels."""
        return self.sparse_accuracy(ops.argmax(y_true, 2), y_pred)

    def get_config(self):
        return {**super().get_config(), "lr_multiplier": self.lr_multiplier, "hidden_dim": self.hidden_dim}


def _reversed_rows(values, lengths):
    """`values` `[batch, length, ...]` with each row's first `lengths[row]` positions reversed, the rest kept."""
    positions = ops.arange(ops.shape(values)[1])[None]
    lengths = lengths[:, None]
    order = ops.where(positions < lengths, lengths - 1 - positions, positions)
    order = ops.reshape(order, (*ops.shape(order), *[1] * (len(values.shape) - 2)))
    return ops.take_along_axis(values, ops.cast(order, "int32"), axis=1)
