"""Position encodings computed from positions rather than looked up per absolute position.

- `SinusoidalPositionEmbedding`: the sin/cos table of a sequence's positions, for
  RoFormer's rotary attention (`Embedding-Rotary-Position`);
- `RelativePositionEmbedding`: NEZHA's table of relative distances, clipped,
  read for every (query, key) pair (`Embedding-Relative-Position`);
- `Sinusoidal`: the initializer of that table (sin/cos of each row index);
- `T5RelativePositionBias`: T5's learned bias per head for each bucket of
  relative distance (`Encoder-Embedding-Relative-Position`), and `t5_buckets`.

All follow bert4keras 0.11.5, so its models' outputs carry over.
"""

from __future__ import annotations

import math

import keras
from keras import ops

from kbert.layers.common import _PACKAGE
from kbert.layers.rotary import sinusoidal_positions, sinusoids


@keras.saving.register_keras_serializable(package=_PACKAGE)
class Sinusoidal(keras.initializers.Initializer):
    """Row p of a `[rows, depth]` table: sin then cos of `p / 10000^(2i/depth)`, interleaved.

    Row p encodes the number p (for NEZHA's relative table, p is a clipped
    distance shifted to start at 0). Deterministic: the same table every call.

    Example:
    >>> [round(float(x), 4) for x in Sinusoidal()((3, 4))[2]]
    [0.9093, -0.4161, 0.02, 0.9998]
    """

    def __call__(self, shape, dtype=None):
        rows, depth = shape
        return ops.cast(sinusoidal_positions(rows, depth, dtype="float64"), dtype or "float32")


@keras.saving.register_keras_serializable(package=_PACKAGE)
class SinusoidalPositionEmbedding(keras.layers.Layer):
    """The sinusoidal encodings `[1, length, output_dim]` of its input's positions (no weights).

    Called on hidden states `[batch, length, ...]`; only their length is read.
    RoFormer feeds this to every attention layer, which rotates queries and
    keys by it (`apply_rotary`).

    Args:
        output_dim: width of the encoding (RoFormer: the attention head size).

    Example:
    >>> tuple(SinusoidalPositionEmbedding(4)(ops.zeros((2, 3, 8))).shape)
    (1, 3, 4)
    """

    def __init__(self, output_dim: int, **kwargs):
        super().__init__(**kwargs)
        self.output_dim = output_dim

    def call(self, inputs):
        return sinusoidal_positions(ops.shape(inputs)[1], self.output_dim, self.compute_dtype)[None]

    def call_step(self, inputs, step):
        """`call` in cached decoding (`kbert.layers.decoding`): `[batch, q, output_dim]`, each new token's own
        position's encoding."""
        return sinusoids(step.positions, self.output_dim)

    def compute_mask(self, inputs, mask=None):
        return None  # positions are the same for every example: nothing to mask

    def compute_output_shape(self, input_shape):
        return (1, input_shape[1], self.output_dim)

    def get_config(self):
        return {**super().get_config(), "output_dim": self.output_dim}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class RelativePositionEmbedding(keras.layers.Layer):
    """NEZHA's relative positions: for each query i and key j, the row of the distance j − i.

    Distances are clipped to ±`(input_dim − 1) / 2` and looked up in a
    `[input_dim, output_dim]` table (sinusoidal and not trained, as in NEZHA
    and bert4keras). Called on `[queries, keys]` hidden states, it returns
    `[query_length, key_length, output_dim]`, which the attention adds to its
    keys (for the scores) and values (for the output).

    Args:
        input_dim: rows of the table, `2 · max_distance + 1`.
        output_dim: width of a row (the attention head size).
        embeddings_initializer: the table's initializer (`Sinusoidal`).

    Example:
    >>> layer = RelativePositionEmbedding(2 * 2 + 1, 4)
    >>> x = ops.zeros((1, 6, 8))
    >>> tuple(layer([x, x]).shape)
    (6, 6, 4)
    >>> [int(row) for row in layer.distance_rows(6, 6)[0]]  # query 0: distances 0..5, clipped at 2
    [2, 3, 4, 4, 4, 4]
    """

    def __init__(self, input_dim: int, output_dim: int, embeddings_initializer="kbert>Sinusoidal", **kwargs):
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    def build(self, input_shape):
        self.embeddings = self.add_weight(name="embeddings", shape=(self.input_dim, self.output_dim),
                                          initializer=self.embeddings_initializer,
                                          autocast=False)  # as `Embedding`'s: the rows used are cast

    def distance_rows(self, query_length, key_length):
        """`[query_length, key_length]` table rows: the clipped distance key − query, shifted to ≥ 0."""
        return self._rows(ops.arange(key_length)[None, :] - ops.arange(query_length)[:, None])

    def _rows(self, distances):
        """The table row of each distance (key − query): clipped to ±max distance, shifted to ≥ 0."""
        max_distance = (self.input_dim - 1) // 2
        return ops.clip(distances, -max_distance, max_distance) + max_distance

    def call(self, inputs):
        queries, keys = inputs
        rows = self.distance_rows(ops.shape(queries)[1], ops.shape(keys)[1])
        return ops.cast(ops.take(self.embeddings, rows, axis=0), self.compute_dtype)

    def call_step(self, inputs, step):
        """`call` in cached decoding (`kbert.layers.decoding`): `[batch, q, slots, output_dim]`, each new
        token's rows against every cache slot."""
        return ops.take(self.embeddings, self._rows(step.distances(step.slots)), axis=0)

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (input_shape[0][1], input_shape[1][1], self.output_dim)

    def get_config(self):
        return {
            **super().get_config(),
            "input_dim": self.input_dim,
            "output_dim": self.output_dim,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
        }



def t5_buckets(distances, num_buckets: int = 32, max_distance: int = 128, bidirectional: bool = True):
    """T5's bucket of each relative distance (key position − query position), as int32.

    Half the buckets (bidirectional: per direction) hold the distances 0, 1, …
    one each; the rest cover longer distances on a log scale up to
    `max_distance`, beyond which all share the last bucket. A unidirectional
    (decoder) table puts every key after the query in bucket 0. Translated
    from T5's `_relative_position_bucket`, as bert4keras does.

    Example:
    >>> [int(b) for b in t5_buckets(ops.convert_to_tensor([-3, -1, 0, 1, 3, 20, 200]))]
    [3, 1, 0, 17, 19, 26, 31]
    """
    n = -ops.cast(distances, "int32")
    bucket = ops.zeros_like(n)
    if bidirectional:
        num_buckets //= 2
        bucket = ops.cast(ops.less(n, 0), "int32") * num_buckets
        n = ops.abs(n)
    else:
        n = ops.maximum(n, 0)
    max_exact = num_buckets // 2
    far = max_exact + ops.cast(
        ops.log(ops.cast(n, "float32") / max_exact) / math.log(max_distance / max_exact)
        * (num_buckets - max_exact), "int32")
    far = ops.minimum(far, num_buckets - 1)
    return bucket + ops.where(ops.less(n, max_exact), n, far)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class T5RelativePositionBias(keras.layers.Layer):
    """T5's relative position bias: for each query i and key j, a learned score per head.

    The distance j − i is put in one of `num_buckets` buckets (`t5_buckets`)
    and looked up in a `[num_buckets, heads]` table. Called on `[queries,
    keys]` hidden states, it returns `[query_length, key_length, heads]`,
    which the attention adds to its scores (`position_encoding="t5_relative"`).
    Each stack (encoder, decoder) has one table, shared by all its blocks.

    Args:
        num_buckets: rows of the table (32 in every T5 release, and in bert4keras).
        num_heads: the attention heads (the table's width).
        max_distance: distances from here on share the last bucket.
        bidirectional: keys on both sides of the query (encoder); False: the
            decoder's causal buckets.
        embeddings_initializer: the table's initializer.

    Example:
    >>> layer = T5RelativePositionBias(32, num_heads=4, bidirectional=False)
    >>> tuple(layer([ops.zeros((1, 3, 8)), ops.zeros((1, 5, 8))]).shape)
    (3, 5, 4)
    """

    def __init__(self, num_buckets: int, num_heads: int, max_distance: int = 128, bidirectional: bool = True,
                 embeddings_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.num_buckets = num_buckets
        self.num_heads = num_heads
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    def build(self, input_shape):
        self.embeddings = self.add_weight(name="embeddings", shape=(self.num_buckets, self.num_heads),
                                          initializer=self.embeddings_initializer,
                                          autocast=False)  # as `Embedding`'s: the rows used are cast

    def bias(self, distances):
        """The `[..., heads]` bias of an array of distances (key position − query position)."""
        buckets = t5_buckets(distances, self.num_buckets, self.max_distance, self.bidirectional)
        return ops.cast(ops.take(self.embeddings, buckets, axis=0), self.compute_dtype)

    def call(self, inputs):
        queries, keys = inputs
        distances = ops.arange(ops.shape(keys)[1])[None, :] - ops.arange(ops.shape(queries)[1])[:, None]
        return self.bias(distances)

    def call_step(self, inputs, step):
        """`call` in cached decoding (`kbert.layers.decoding`): `[batch, q, keys, heads]`, each new token's
        biases against every cache slot (self-attention: `keys` are the queries) or every source token (T5's
        cross-attention: `keys` has the source's length)."""
        queries, keys = inputs
        return self.bias(step.distances(step.slots if keys is queries else ops.shape(keys)[1]))

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (input_shape[0][1], input_shape[1][1], self.num_heads)

    def get_config(self):
        return {
            **super().get_config(),
            "num_buckets": self.num_buckets,
            "num_heads": self.num_heads,
            "max_distance": self.max_distance,
            "bidirectional": self.bidirectional,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
        }
