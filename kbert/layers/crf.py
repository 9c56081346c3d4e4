"""A linear-chain conditional random field and Viterbi decoding, with bert4keras's semantics.

`ConditionalRandomField` holds the transition matrix `trans` [T, T] and passes
its input (per-position label scores, the "emissions") through, marking
masked positions with -1e12 so that its losses and metrics know the padding
without a mask. `ViterbiDecoder.decode` finds the best path of one sequence in
NumPy, as bert4keras's does; `viterbi_decode` does the same for a padded batch
inside the model, on any backend (for `predict` and serving). The CRF's math runs in float32
under any mixed-precision policy.
"""

from __future__ import annotations

from typing import Optional, Sequence

import keras
import numpy as np
from keras import ops

from kbert.layers.common import _PACKAGE

MASKED = -1e12  # the score of a masked position (bert4keras's K.infinity())


def mark_padding(scores, mask):
    """Label scores `[batch, length, T]` with every masked position's scores set to `MASKED`, so that the
    losses after them know the padding without a Keras mask (the CRF's and the MEMM's `call`)."""
    if mask is None:
        return scores
    keep = ops.expand_dims(ops.cast(mask, "bool"), -1)
    return ops.where(keep, scores, ops.cast(MASKED, scores.dtype))


def real_positions(scores, keepdims: bool = False):
    """Where `mark_padding` left the scores, as a boolean `[batch, length]` (`[..., 1]` with `keepdims`)."""
    return ops.all(scores > MASKED / 1e6, axis=2, keepdims=keepdims)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class ConditionalRandomField(keras.layers.Layer):
    """CRF over label scores `[batch, length, T]`, trained with `sparse_loss` or `dense_loss`.

    Args:
        lr_multiplier: scales the transition matrix's learning rate: the
            weight is stored divided by it and used multiplied by it.
        **kwargs: as for `keras.layers.Layer`; the layer computes in float32
            unless another `dtype` is given.

    Example:
    >>> crf = ConditionalRandomField()
    >>> scores = crf(ops.ones((2, 5, 3)), mask=ops.convert_to_tensor([[1, 1, 1, 0, 0]] * 2, "bool"))
    >>> tuple(crf.trans.shape), float(scores[0, 2, 0]), bool(scores[0, 3, 0] == MASKED)  # masked: -1e12
    ((3, 3), 1.0, True)
    >>> model_loss = crf.sparse_loss  # model.compile(loss=crf.sparse_loss, metrics=[crf.sparse_accuracy])
    """

    def __init__(self, lr_multiplier: float = 1, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.lr_multiplier = lr_multiplier
        self.supports_masking = True

    def build(self, input_shape):
        labels = input_shape[-1]
        self._trans = self.add_weight(name="trans", shape=(labels, labels), initializer="glorot_uniform")
        if self.lr_multiplier != 1:
            self._trans.assign(self._trans / self.lr_multiplier)

    @property
    def trans(self):
        """The transition scores `trans[i, j]` of label i followed by label j."""
        return self.lr_multiplier * self._trans

    def call(self, inputs, mask=None):
        return mark_padding(inputs, mask)

    def compute_mask(self, inputs, mask=None):
        return None

    def sparse_loss(self, y_true, y_pred):
        """Negative log-likelihood per sequence for integer labels `[batch, length]`."""
        labels = ops.cast(ops.reshape(y_true, ops.shape(y_pred)[:-1]), "int32")
        return self.dense_loss(ops.one_hot(labels, ops.shape(self.trans)[0]), y_pred)

    def dense_loss(self, y_true, y_pred):
        """Negative log-likelihood per sequence for one-hot labels `[batch, length, T]`."""
        y_pred = ops.cast(y_pred, "float32")
        mask = ops.cast(real_positions(y_pred, keepdims=True), "float32")
        y_true, y_pred = ops.cast(y_true, "float32") * mask, y_pred * mask
        path_score = (ops.einsum("bni,bni->b", y_true, y_pred)
                      + ops.einsum("bni,ij,bnj->b", y_true[:, :-1], self.trans, y_true[:, 1:]))

        def forward(states, step):
            emissions, step_mask = step[:, :-1], step[:, -1:]
            scores = ops.logsumexp(states[:, :, None] + self.trans[None], axis=1) + emissions
            states = step_mask * scores + (1 - step_mask) * states
            return states, states  # (Keras's TensorFlow scan stacks outputs shaped as the carry)

        final, _ = ops.scan(forward, y_pred[:, 0], _time_major(y_pred, mask))
        return ops.logsumexp(final, axis=1) - path_score

    def sparse_accuracy(self, y_true, y_pred):
        """Share of unmasked positions whose highest-scoring label is the true one (bert4keras's metric)."""
        mask = ops.cast(real_positions(y_pred), "float32")
        labels = ops.cast(ops.reshape(y_true, ops.shape(y_pred)[:-1]), "int32")
        hits = ops.cast(ops.equal(labels, ops.cast(ops.argmax(y_pred, 2), "int32")), "float32")
        return ops.sum(hits * mask) / ops.sum(mask)

    def dense_accuracy(self, y_true, y_pred):
        """`sparse_accuracy` for one-hot labels."""
        return self.sparse_accuracy(ops.argmax(y_true, 2), y_pred)

    def get_config(self):
        return {**super().get_config(), "lr_multiplier": self.lr_multiplier}


class ViterbiDecoder:
    """The best label path of one sequence, as bert4keras's `ViterbiDecoder`.

    Args:
        trans: transition scores `[T, T]` (e.g. `crf.trans` as NumPy).
        starts: labels a path may start with (default: all).
        ends: labels a path may end with (default: all).

    Example:
    >>> decoder = ViterbiDecoder(np.array([[0.0, -5.0], [0.0, 0.0]]), starts=[0])
    >>> decoder.decode(np.array([[1.0, 2.0], [0.0, 3.0], [2.0, 0.0]])).tolist()
    [0, 0, 0]
    """

    def __init__(self, trans, starts: Optional[Sequence[int]] = None, ends: Optional[Sequence[int]] = None):
        self.trans = np.asarray(trans, dtype=np.float64)
        labels = range(len(self.trans))
        self.non_starts = [label for label in labels if starts is not None and label not in starts]
        self.non_ends = [label for label in labels if ends is not None and label not in ends]

    def decode(self, nodes) -> np.ndarray:
        """Best path for label scores `nodes` `[length, T]` of one (unpadded) sequence."""
        nodes = np.array(nodes, dtype=np.float64)
        nodes[0, self.non_starts] -= np.inf
        nodes[-1, self.non_ends] -= np.inf
        labels = np.arange(len(self.trans))[None]
        scores, paths = nodes[0][:, None], labels
        for position in range(1, len(nodes)):
            candidates = scores + self.trans + nodes[position][None]
            best = candidates.argmax(0)
            scores = candidates.max(0)[:, None]
            paths = np.concatenate([paths[:, best], labels], 0)
        return paths[:, scores[:, 0].argmax()]


def viterbi_decode(emissions, trans, mask=None, starts: Optional[Sequence[int]] = None,
                   ends: Optional[Sequence[int]] = None):
    """Best label paths of a padded batch, on any backend: `[batch, length]` int32, 0 at padding.

    The same paths as `ViterbiDecoder.decode` on each unpadded sequence. Runs
    inside compiled functions and SavedModels (`keras.ops.scan`, no Python per
    position).

    Args:
        emissions: label scores `[batch, length, T]` (a CRF layer's output).
        trans: transition scores `[T, T]`.
        mask: `[batch, length]`, true for real positions; by default the
            positions a CRF layer did not mark as masked.
        starts, ends: allowed first and last labels, as for `ViterbiDecoder`.
    """
    emissions = ops.cast(emissions, "float32")
    trans = ops.cast(trans, "float32")
    num_labels = trans.shape[0]
    if mask is None:
        mask = real_positions(emissions)
    mask = ops.cast(mask, "bool")
    emissions = ops.where(mask[:, :, None], emissions, 0.0)
    positions = ops.arange(ops.shape(emissions)[1])[None, :, None]
    if starts is not None:
        emissions += ops.where(positions == 0, _forbidden(starts, num_labels), 0.0)
    if ends is not None:
        last = ops.sum(ops.cast(mask, "int32"), axis=1) - 1
        emissions += ops.where(positions == last[:, None, None], _forbidden(ends, num_labels), 0.0)
    stay = ops.arange(num_labels, dtype="int32")[None]  # padding: keep the label

    def step(carry, inputs):
        scores = carry[0]
        step_emissions, step_mask = inputs[:, :-1], ops.cast(inputs[:, -1], "bool")
        candidates = scores[:, :, None] + trans[None]
        best = ops.cast(ops.argmax(candidates, axis=1), "int32")
        advanced = ops.max(candidates, axis=1) + step_emissions
        carry = (ops.where(step_mask[:, None], advanced, scores), ops.where(step_mask[:, None], best, stay))
        return carry, carry  # (Keras's TensorFlow scan stacks outputs shaped as the carry)

    if emissions.shape[1] == 1:  # no step to scan (Keras's torch scan needs one)
        return ops.where(mask, ops.cast(ops.argmax(emissions, axis=2), "int32"), 0)
    start = (emissions[:, 0], ops.zeros_like(emissions[:, 0], dtype="int32"))
    time_major = _time_major(emissions, ops.cast(mask, "float32")[:, :, None])
    (last_scores, _), (_, backpointers) = ops.scan(step, start, time_major)
    last_label = ops.cast(ops.argmax(last_scores, axis=1), "int32")

    def back(label, pointers):
        earlier = ops.take_along_axis(pointers, label[:, None], axis=1)[:, 0]
        return earlier, earlier

    _, earlier = ops.scan(back, last_label, backpointers, reverse=True)
    paths = ops.concatenate([ops.reshape(ops.transpose(earlier), (ops.shape(last_label)[0], -1)),
                             last_label[:, None]], axis=1)
    return ops.where(mask, paths, 0)


def _time_major(scores, mask):
    """Positions 1 on of `scores` `[batch, length, T]` and `mask` `[batch, length, 1]`, as one
    `[length - 1, batch, T + 1]` tensor to scan (Keras's TensorFlow scan fails on several inputs of
    unknown length)."""
    return ops.transpose(ops.concatenate([scores[:, 1:], mask[:, 1:]], axis=-1), (1, 0, 2))


def _forbidden(allowed: Sequence[int], num_labels: int) -> np.ndarray:
    """-1e12 for each label not in `allowed`, 0 for the others: `[T]`."""
    return np.where(np.isin(np.arange(num_labels), list(allowed)), 0.0, MASKED).astype("float32")
