"""Losses of bert4keras's recipes that Keras lacks."""

from __future__ import annotations

import keras
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


@keras.saving.register_keras_serializable(package="kbert")
class ListwiseSoftmaxLoss(keras.losses.Loss):
    """Listwise ranking loss: softmax cross-entropy over each query's group of passages.

    The batch holds whole groups of `group_size` consecutive pairs (one
    query's passages); `y_pred` is each pair's relevance logit, `y_true` its
    label (0 to 1). Within a group the labels, scaled to sum to 1, are the
    target distribution of the softmax of the logits (ListNet's top-one
    loss; with one relevant passage, its cross-entropy against the rest).
    One loss value a group.

    Args:
        group_size: pairs a group.

    Example:
    >>> loss = ListwiseSoftmaxLoss(group_size=2)
    >>> round(float(loss(ops.convert_to_tensor([[1.], [0.]]), ops.convert_to_tensor([[2.], [0.]]))), 4)
    0.1269
    """

    def __init__(self, group_size: int, name: str = "listwise_softmax", **kwargs):
        super().__init__(name=name, **kwargs)
        self.group_size = group_size

    def call(self, y_true, y_pred):
        logits = ops.reshape(ops.cast(y_pred, "float32"), (-1, self.group_size))
        labels = ops.reshape(ops.cast(y_true, "float32"), (-1, self.group_size))
        target = labels / ops.maximum(ops.sum(labels, axis=-1, keepdims=True), 1e-12)
        return -ops.sum(target * ops.log_softmax(logits, axis=-1), axis=-1)

    def get_config(self):
        return {**super().get_config(), "group_size": self.group_size}
