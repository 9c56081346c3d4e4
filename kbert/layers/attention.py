"""Multi-head self-attention with BERT's padding rule.
"""

from __future__ import annotations

import math

import keras
from keras import ops

from kbert.layers.common import _PACKAGE, clone_initializer


@keras.saving.register_keras_serializable(package=_PACKAGE)
class MultiHeadSelfAttention(keras.layers.Layer):
    """Multi-head scaled dot-product attention with BERT's padding rule.

    Called on `[query, key, value]` (the same hidden states for self-attention).
    Keys whose mask is False (padding) get no attention; padded query rows are
    still computed, attending to the real tokens, exactly as in Google's BERT
    and bert4keras.

    Args:
        num_heads: number of attention heads.
        head_size: width of one head; `num_heads * head_size` is the output width.
        dropout: dropout rate on the attention probabilities.
        kernel_initializer: initializer of the four projection kernels.

    Example:
    >>> attention = MultiHeadSelfAttention(num_heads=2, head_size=4)
    >>> x = ops.ones((1, 3, 8))
    >>> attention([x, x, x]).shape
    TensorShape([1, 3, 8])
    """

    def __init__(self, num_heads: int, head_size: int, dropout: float = 0.0,
                 kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.head_size = head_size
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True
        width = num_heads * head_size
        self.query, self.key, self.value, self.output_dense = (
            keras.layers.Dense(width, kernel_initializer=clone_initializer(self.kernel_initializer),
                               name=name, dtype=self.dtype_policy)
            for name in ("query", "key", "value", "output")
        )
        self.attention_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, input_shape):
        query_shape = input_shape[0]
        for dense in (self.query, self.key, self.value):
            dense.build(query_shape)
        self.output_dense.build((*query_shape[:-1], self.num_heads * self.head_size))

    def call(self, inputs, mask=None, training=None):
        query, key, value = inputs
        q = self._split_heads(self.query(query))
        k = self._split_heads(self.key(key))
        v = self._split_heads(self.value(value))
        scores = ops.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.head_size)
        key_mask = mask[1] if mask is not None else None
        if key_mask is not None:
            # A large negative score gives a padded key zero probability.
            hidden = ops.logical_not(ops.cast(key_mask, "bool"))[:, None, None, :]
            scores = ops.where(hidden, ops.cast(-1e9 if scores.dtype != "float16" else -6e4,
                                                scores.dtype), scores)
        probs = ops.softmax(scores, axis=-1)
        probs = self.attention_dropout(probs, training=training)
        context = ops.einsum("bhqk,bkhd->bqhd", probs, v)
        batch, length = ops.shape(context)[0], ops.shape(context)[1]
        context = ops.reshape(context, (batch, length, self.num_heads * self.head_size))
        return self.output_dense(context)

    def _split_heads(self, x):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        return ops.reshape(x, (batch, length, self.num_heads, self.head_size))

    def compute_mask(self, inputs, mask=None):
        return mask[0] if mask is not None else None

    def compute_output_shape(self, input_shape):
        return (*input_shape[0][:-1], self.num_heads * self.head_size)

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "head_size": self.head_size,
            "dropout": self.dropout,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }
