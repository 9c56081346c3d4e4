"""DeBERTa's disentangled attention: content-to-content scores plus content-to-position and position-to-content
scores over a table of relative positions (DeBERTa-v2 and v3).

Relative distances i − j are bucketed on a log scale beyond half the table (`log_buckets`), the table is
projected by the attention's own query and key projections (`share_att_key`), and each (query, key) pair reads
its distance's row: c2p is the query against the key's distance row, p2c the key against the query's, all
divided by √(3d). The rows are gathered from `[length, 2 · span]` products, never a `[length, length, d]` tensor,
by one flat index of `length²` entries that every batch row and head shares.
"""

from __future__ import annotations

import functools
import math

import keras
from keras import ops

from kbert.layers.attention import _blocked_score
from kbert.layers.common import _PACKAGE, clone_initializer


@functools.lru_cache(maxsize=None)
def _bucket_table(buckets: int, max_position: int) -> tuple:
    """The bucket of each distance 0, 1, … up to the first whose bucket reaches ±`buckets` (past which the table
    of 2 · `buckets` rows is clipped), in float64 as Python computes it (transformers' float32 torch gives the same;
    float32 elsewhere can put max_position − 1, whose ratio is 1, one bucket further). The buckets past the middle
    rise where the reach passes it, fall (transformers' formula, as it is) where it does not, and stay at the
    middle with 2 or 3 buckets: the table ends where they stop changing or pass ±`buckets`."""
    middle, table, distance = buckets // 2, [], 0
    if middle < 1 or max_position < 2 or max_position - 1 == middle:
        raise ValueError(f"log buckets of {buckets} reaching {max_position}: the formula has no value "
                         "(DeBERTaV2Config.check_buckets refuses such a config)")
    while not table or (abs(table[-1]) < buckets and (distance <= middle + 1 or middle > 1)):
        if distance <= middle:
            table.append(distance)
        else:
            ratio = math.log(distance / middle) / math.log((max_position - 1) / middle)
            table.append(math.ceil(ratio * (middle - 1)) + middle)
        distance += 1
    return tuple(table)


def log_buckets(distances, buckets: int, max_position: int):
    """DeBERTa's `make_log_bucket_position`: distances within ±buckets/2 as they are, longer ones on a log scale
    up to `max_position`, as int32; a distance whose bucket passes ±`buckets` gets the first such bucket (a table
    of 2 · `buckets` rows is clipped there anyway).

    Example:
    >>> [int(b) for b in log_buckets(ops.convert_to_tensor([-300, -5, 0, 5, 100, 255, 511]), 256, 512)]
    [-207, -5, 0, 5, 100, 192, 255]
    """
    table = _bucket_table(buckets, max_position)
    distances = ops.cast(distances, "int32")
    size = ops.minimum(ops.abs(distances), len(table) - 1)
    return ops.sign(distances) * ops.take(ops.convert_to_tensor(table, "int32"), size)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class RelativePositionTable(keras.layers.Layer):
    """DeBERTa's table of relative position vectors (`rel_embeddings`, `2 · span` rows), layer-normalised when
    `normalize` (`norm_rel_ebd: layer_norm`). Called on any tensor (for its dtype), it returns the table.

    Example:
    >>> table = RelativePositionTable(span=4, width=8, normalize=True)
    >>> tuple(table(ops.zeros((1, 3, 8))).shape)
    (8, 8)
    """

    def __init__(self, span: int, width: int, normalize: bool = True, epsilon: float = 1e-7,
                 embeddings_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.span = span
        self.width = width
        self.normalize = normalize
        self.epsilon = epsilon
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.norm = keras.layers.LayerNormalization(epsilon=epsilon, name="norm", dtype=self.dtype_policy) \
            if normalize else None

    def build(self, input_shape):
        self.embeddings = self.add_weight(name="embeddings", shape=(2 * self.span, self.width),
                                          initializer=self.embeddings_initializer)
        if self.norm is not None:
            self.norm.build((2 * self.span, self.width))

    def call(self, inputs):
        table = ops.cast(self.embeddings, self.compute_dtype)
        return self.norm(table) if self.norm is not None else table

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (2 * self.span, self.width)

    def get_config(self):
        return {**super().get_config(), "span": self.span, "width": self.width, "normalize": self.normalize,
                "epsilon": self.epsilon,
                "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer)}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class DisentangledSelfAttention(keras.layers.Layer):
    """DeBERTa-v2/v3's self-attention, called on `[hidden states, relative position table]`.

    Args:
        num_heads, head_size: the heads.
        span: half the table's rows: distances read rows `span + bucket(i − j)`, clipped to the table.
        buckets: DeBERTa's `position_buckets` (distances log-bucketed beyond buckets/2); 0: none.
        max_position: `max_relative_positions`, the distance the log scale reaches.
        c2p, p2c: the content-to-position and position-to-content terms (`pos_att_type`).
        dropout: on the attention probabilities (training only).
        kernel_initializer: of the four projections (`query`, `key`, `value`, `output`), the first two also
            projecting the table (`share_att_key`).

    Example:
    >>> x = keras.random.normal((2, 5, 8), seed=1)
    >>> table = RelativePositionTable(span=4, width=8)(x)
    >>> attention = DisentangledSelfAttention(num_heads=2, head_size=4, span=4, buckets=4, max_position=8)
    >>> tuple(attention([x, table]).shape)
    (2, 5, 8)
    """

    def __init__(self, num_heads: int, head_size: int, span: int, buckets: int = 0, max_position: int = 512,
                 c2p: bool = True, p2c: bool = True, dropout: float = 0.0, kernel_initializer="glorot_uniform",
                 **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.head_size = head_size
        self.span = span
        self.buckets = buckets
        self.max_position = max_position
        self.c2p = c2p
        self.p2c = p2c
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True
        width = num_heads * head_size
        self.query, self.key, self.value = (self._dense(width, name) for name in ("query", "key", "value"))
        self.output_dense = None  # made in build: its width is the input's
        self.attention_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def _dense(self, units: int, name: str):
        return keras.layers.Dense(units, name=name, dtype=self.dtype_policy,
                                  kernel_initializer=clone_initializer(self.kernel_initializer))

    def build(self, input_shape):
        hidden_shape = input_shape[0]
        for dense in (self.query, self.key, self.value):
            dense.build(hidden_shape)
        self.output_dense = self._dense(hidden_shape[-1], "output")
        self.output_dense.build((*hidden_shape[:-1], self.num_heads * self.head_size))

    def _heads(self, x):
        return ops.reshape(x, (*ops.shape(x)[:-1], self.num_heads, self.head_size))

    def relative_rows(self, length):
        """`[length, length]`: the table row each (query i, key j) reads, `span + bucket(i − j)`, clipped."""
        distances = ops.arange(length)[:, None] - ops.arange(length)[None, :]
        if self.buckets > 0:
            distances = log_buckets(distances, self.buckets, self.max_position)
        return ops.clip(ops.cast(distances, "int32") + self.span, 0, 2 * self.span - 1)

    def call(self, inputs, mask=None, training=None):
        x, table = inputs
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        q, k, v = self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x))
        scale = math.sqrt(self.head_size * (1 + int(self.c2p) + int(self.p2c)))
        scores = ops.einsum("bqhd,bkhd->bhqk", q, k)
        rows = self.relative_rows(length)
        width = 2 * self.span  # the table's rows: each position's products with all of them, in one row
        positions = ops.arange(length, dtype="int32")
        if self.c2p:  # query i against the key projection of row (i, j)
            by_row = ops.einsum("bqhd,rhd->bhqr", q, self._heads(self.key(table)))
            scores = scores + self._picked(by_row, positions[:, None] * width + rows, batch, length)
        if self.p2c:  # key j against the query projection of row (i, j)
            by_row = ops.einsum("bkhd,rhd->bhkr", k, self._heads(self.query(table)))
            scores = scores + self._picked(by_row, positions[None, :] * width + rows, batch, length)
        scores = scores / scale
        if mask is not None and mask[0] is not None:
            # transformers' DeBERTa masks query rows as well as key columns (its mask is the outer product): a
            # hidden position's row is blocked whole, so its softmax spreads evenly over every position
            real = ops.cast(mask[0], "bool")
            keep = ops.logical_and(real[:, None, None, :], real[:, None, :, None])
            scores = ops.where(keep, scores, _blocked_score(scores.dtype))
        probs = self.attention_dropout(ops.softmax(scores, axis=-1), training=training)
        context = ops.einsum("bhqk,bkhd->bqhd", probs, v)
        return self.output_dense(ops.reshape(context, (batch, length, self.num_heads * self.head_size)))

    def _picked(self, by_row, flat_index, batch, length):
        """`[batch, heads, length, length]`: entry (i, j) of `by_row` (`[batch, heads, length, rows]`, flattened
        per head) at `flat_index[i, j]`. One `[length · length]` index shared by every batch row and head, so
        the gather (and its gradient) reads no index tensor of the scores' size."""
        flat = ops.reshape(by_row, (batch, self.num_heads, -1))
        picked = ops.take(flat, ops.reshape(flat_index, (-1,)), axis=2)
        return ops.reshape(picked, (batch, self.num_heads, length, length))

    def compute_mask(self, inputs, mask=None):
        return None if mask is None else mask[0]

    def compute_output_shape(self, input_shape):
        return input_shape[0]

    def get_config(self):
        return {**super().get_config(), "num_heads": self.num_heads, "head_size": self.head_size,
                "span": self.span, "buckets": self.buckets, "max_position": self.max_position, "c2p": self.c2p,
                "p2c": self.p2c, "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer)}
