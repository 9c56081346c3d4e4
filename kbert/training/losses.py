"""Losses of bert4keras's recipes that Keras lacks."""

from __future__ import annotations

from keras import ops

INFINITY = 1e12  # bert4keras's K.infinity()


def multilabel_categorical_crossentropy(y_true, y_pred):
    """Multi-label softmax cross-entropy over the last axis (Su Jianlin's, as in bert4keras).

    `y_true` is 0/1, `y_pred` the scores (no sigmoid): the loss is
    `log(1 + sum exp(negatives)) + log(1 + sum exp(-positives))`, which pushes
    every positive above 0 and every negative below it.

    Example:
    >>> round(float(multilabel_categorical_crossentropy(ops.convert_to_tensor([[0., 1.]]),
    ...                                                   ops.convert_to_tensor([[-2., 3.]]))[0]), 4)
    0.1755
    """
    y_true = ops.cast(y_true, y_pred.dtype)
    y_pred = (1 - 2 * y_true) * y_pred  # positives' scores negated
    negatives = y_pred - y_true * INFINITY
    positives = y_pred - (1 - y_true) * INFINITY
    zeros = ops.zeros_like(y_pred[..., :1])
    return (ops.logsumexp(ops.concatenate([negatives, zeros], axis=-1), axis=-1)
            + ops.logsumexp(ops.concatenate([positives, zeros], axis=-1), axis=-1))


def global_pointer_crossentropy(y_true, y_pred):
    """GlobalPointer's loss: the multilabel cross-entropy of each (example, head) over all m·n spans, averaged."""
    rows = ops.shape(y_pred)[0] * ops.shape(y_pred)[1]
    y_true = ops.reshape(y_true, (rows, -1))
    y_pred = ops.reshape(ops.cast(y_pred, "float32"), (rows, -1))
    return ops.mean(multilabel_categorical_crossentropy(y_true, y_pred))
