"""Multi-head self-attention with BERT's padding rule, and the position encodings that enter it.
"""

from __future__ import annotations

import math

import keras
from keras import ops

from kbert.layers.common import _PACKAGE, clone_initializer
from kbert.layers.rotary import apply_rotary

# How a fourth input, the positions, enters the attention:
# "relative" (NEZHA): `[q_len, k_len, head_size]` vectors added to the keys and values;
# "rotary" (RoFormer): `[1, length, head_size]` sinusoids that rotate queries and keys;
# "t5_relative" (T5): `[q_len, k_len, heads]` biases added to the scores.
POSITION_ENCODINGS = ("relative", "rotary", "t5_relative")


# Backends where inference goes through `ops.dot_product_attention`: JAX's (fused on a GPU; on this
# project's CPU as fast as the einsums, docs/backends.md) and PyTorch's scaled_dot_product_attention
# (with the padding as a boolean mask, faster than the einsums on that CPU in float32 and bfloat16,
# docs/embeddings.md). TensorFlow's is the same einsums and softmax.
FUSED_BACKENDS = ("jax", "torch")


def _blocked_score(dtype):
    """The score of a hidden key: large and negative, within float16's range."""
    return ops.cast(-1e9 if keras.backend.standardize_dtype(dtype) != "float16" else -6e4, dtype)


def _without_empty_rows(context, hidden):
    """`context` `[b, q, h, d]` with zeros where a query's keys are all `hidden` (`[b or 1, 1 or h, q, k]`).

    Such a row's softmax spreads evenly over keys it must not see: for a T5 decoder started from its padding
    id (bert4keras's T5 hides that id), position 0 would read every later token. With a zero context its output
    is the same whatever follows, as in bert4keras.
    """
    if hidden is None:
        return context
    sees = ops.logical_not(ops.all(hidden, axis=-1))  # [b or 1, 1 or h, q]
    # `where`, not a product: a fused kernel may leave such a row NaN, and NaN * 0 is NaN.
    return ops.where(ops.expand_dims(ops.transpose(sees, (0, 2, 1)), -1), context, ops.zeros_like(context))


@keras.saving.register_keras_serializable(package=_PACKAGE)
class MultiHeadSelfAttention(keras.layers.Layer):
    """Multi-head scaled dot-product attention with BERT's padding rule.

    Called on `[query, key, value]` (the same hidden states for self-attention;
    the decoder's states and the encoder's output for T5's cross-attention),
    then, in this order, the `attention_mask` (`AttentionMask`: boolean
    `[batch or 1, 1, q_len, k_len]`, True where attending is allowed) when
    `use_attention_mask`, the previous layer's scores when it has them
    (`return_attention_scores`: RealFormer's residual scores, added to this
    layer's before the softmax), and the positions when `position_encoding` is set. Keys whose
    mask is False (padding) get no attention; padded query rows are still
    computed, attending to the real tokens, exactly as in Google's BERT and
    bert4keras.

    Args:
        num_heads: number of attention heads.
        head_size: width of one head; `num_heads * head_size` is the output width.
        dropout: dropout rate on the attention probabilities.
        kernel_initializer: initializer of the four projection kernels.
        position_encoding: None, or how the fourth input enters: `"relative"`
            (NEZHA: `RelativePositionEmbedding` vectors added to keys and
            values, per query) or `"rotary"` (RoFormer: queries and keys
            rotated by `SinusoidalPositionEmbedding`) or `"t5_relative"` (T5:
            `T5RelativePositionBias` scores added per head, after the
            scaling: MPNet scales, T5 does not).
        use_attention_mask: take an attention mask input (the `lm` and `unilm`
            applications).
        use_bias: biases in the four projections (False: RoFormer-v2, T5).
        scale: divide the scores by √head_size (False: T5, whose initialization
            absorbs it).
        output_dim: the output's width (default `num_heads * head_size`; T5's
            heads · head size may differ from H, as in mT5-small).
        return_attention_scores: also return the scores `[batch, heads, q_len,
            k_len]` (scaled, with the position bias, before the previous
            layer's scores, the mask and the softmax), for the next layer
            (bert4keras's `residual_attention_scores`).

    Call arguments beside the inputs, for generation (`kbert.generation`
    runs each step so; keras-hub's cached attention takes the same two):
        cache: `(keys, values)`, each `[batch, slots, heads, head_size]`. With
            `cache_slots`, a self-attention's cache: the new tokens' keys and
            values are written into it and the new tokens attend over it (the
            attention mask input, `[batch, 1, q, slots]`, hides the slots
            not written yet and those after each token). Without, keys and
            values computed earlier (`keys_and_values`; T5's cross-attention
            over the encoder's output), attended as they are. The call then
            returns `(output, cache)`, the cache updated. The positions are
            each example's own: `"rotary"` `[batch, q, head_size]`,
            `"relative"` `[batch, q, slots, head_size]`, `"t5_relative"`
            `[batch, q, slots, heads]`.
        cache_slots: `[batch, q]` int32, where each new token's key and value go.
    And for packed pre-training (`kbert.builder.build_masked_lm(packed=True)`),
    which runs an encoder's own layers on rows of several documents:
        attention_mask: an attention mask as for `use_attention_mask`, given
            to a layer built without that input (a keyword, so the encoder's
            wiring, bert4keras's, is unchanged).

    Example:
    >>> attention = MultiHeadSelfAttention(num_heads=2, head_size=4, use_attention_mask=True)
    >>> x = keras.random.normal((1, 3, 8), seed=1)
    >>> lm_mask = ops.tril(ops.ones((3, 3), "bool"))[None, None]  # AttentionMask("lm")'s
    >>> whole = attention([x, x, x, lm_mask])
    >>> tuple(whole.shape)
    (1, 3, 8)

    The same three tokens one at a time, each step over a cache of 3 slots:
    >>> cache = (ops.zeros((1, 3, 2, 4)), ops.zeros((1, 3, 2, 4)))
    >>> for position in range(3):
    ...     new = x[:, position:position + 1]
    ...     allowed = (ops.arange(3) <= position)[None, None, None, :]  # [batch, 1, q, slots]
    ...     step, cache = attention([new, new, new, allowed], cache=cache,
    ...                             cache_slots=ops.full((1, 1), position, "int32"))
    >>> float(ops.max(ops.abs(step - whole[:, 2:]))) < 1e-6
    True
    """

    def __init__(self, num_heads: int, head_size: int, dropout: float = 0.0,
                 kernel_initializer="glorot_uniform", position_encoding=None, use_attention_mask=False,
                 use_bias: bool = True, scale: bool = True, output_dim=None, return_attention_scores: bool = False,
                 **kwargs):
        super().__init__(**kwargs)
        if position_encoding not in (None, *POSITION_ENCODINGS):
            raise ValueError(f"position_encoding: expected None or one of {', '.join(POSITION_ENCODINGS)}, "
                             f"got {position_encoding!r}")
        self.position_encoding = position_encoding
        self.use_attention_mask = use_attention_mask
        self.num_heads = num_heads
        self.head_size = head_size
        self.dropout = dropout
        self.use_bias = use_bias
        self.scale = scale
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True
        self.output_dim = output_dim
        self.return_attention_scores = return_attention_scores
        width = num_heads * head_size
        self.query, self.key, self.value, self.output_dense = (
            self._dense(units, name) for units, name in ((width, "query"), (width, "key"), (width, "value"),
                                                         (output_dim or width, "output")))
        self.attention_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def _dense(self, units: int, name: str):
        return keras.layers.Dense(units, use_bias=self.use_bias, name=name, dtype=self.dtype_policy,
                                  kernel_initializer=clone_initializer(self.kernel_initializer))

    def build(self, input_shape):
        query_shape, key_shape, value_shape = input_shape[:3]
        self.query.build(query_shape)
        self.key.build(key_shape)
        self.value.build(value_shape)
        self.output_dense.build((*query_shape[:-1], self.num_heads * self.head_size))

    def call(self, inputs, mask=None, training=None, cache=None, cache_slots=None, attention_mask=None):
        query, key, value = inputs[:3]
        if self.use_attention_mask:
            attention_mask = inputs[3]
        positions = inputs[-1] if self.position_encoding else None
        # The previous layer's scores: an input beyond the mask and the positions (none in a first layer).
        fixed = 3 + int(self.use_attention_mask) + int(bool(self.position_encoding))
        previous_scores = inputs[fixed - int(bool(self.position_encoding))] if len(inputs) > fixed else None
        q = self._split_heads(self.query(query), query)
        if self.position_encoding == "rotary":
            q = apply_rotary(q, positions)
        key_mask = mask[1] if mask is not None else None
        if cache is not None and cache_slots is None:  # keys and values computed earlier, read as they are
            k, v = cache
        else:
            k, v = self._split_heads(self.key(key), key), self._split_heads(self.value(value), value)
            if self.position_encoding == "rotary":
                k = apply_rotary(k, positions)
            if cache is not None:
                if attention_mask is None and key_mask is None:
                    raise ValueError(f"{self.name}: a key/value cache needs an attention mask (use_attention_mask"
                                     "=True) that hides the slots not written yet")
                k, v = cache = self._written(cache, k, v, cache_slots)
        # expand_dims, not x[:, None]: LiteRT's converter takes no new-axis slices of booleans
        hidden = None if key_mask is None else ops.expand_dims(ops.logical_not(ops.cast(key_mask, "bool")), (1, 2))
        if attention_mask is not None:
            blocked = ops.logical_not(ops.cast(attention_mask, "bool"))
            hidden = blocked if hidden is None else ops.logical_or(hidden, blocked)
        # With an attention mask, a query may have every key hidden (a T5 decoder's first position when it starts
        # from its padding id): it attends to nothing, rather than evenly to keys it must not see.
        output, scores = self._attend(q, k, v, hidden, positions, training, previous_scores,
                                      empty_rows=attention_mask is not None)
        output = [output, scores] if self.return_attention_scores else output
        return output if cache is None else (output, cache)

    def call_step(self, inputs, step):
        """`call` in cached decoding (`kbert.layers.decoding.DecodingStep`), on the new tokens only.

        Self-attention (the same tensor as query and key) takes its call's
        cache from the step and puts the updated one back; T5's
        cross-attention reads the encoder output's keys and values, its
        source mask as the keys' mask.
        """
        if inputs[1] is not inputs[0]:
            output, _ = self.call(inputs, mask=[None, step.source, step.source], training=False,
                                  cache=step.next_cross_attention())
            return output
        call = step.next_self_attention()
        output, step.caches[call] = self.call(inputs, training=False, cache=step.caches[call],
                                              cache_slots=step.positions)
        return output

    def _written(self, cache, k, v, slots):
        """The cache `(keys, values)` with the new tokens' keys `k` and values `v` written at `slots` `[batch,
        q]`."""
        slots = ops.cast(slots, "int32")
        rows = ops.broadcast_to(ops.arange(ops.shape(slots)[0], dtype="int32")[:, None], ops.shape(slots))
        where = ops.reshape(ops.stack([rows, slots], axis=-1), (-1, 2))

        def written(table, new):
            new = ops.reshape(ops.cast(new, table.dtype), (-1, self.num_heads, self.head_size))
            return ops.scatter_update(table, where, new)

        return written(cache[0], k), written(cache[1], v)

    def keys_and_values(self, x):
        """The heads' keys and values of hidden states `x`, each `[batch, length, heads, head_size]`: a
        read-only `cache` for `call` (T5's cross-attention over the encoder's output, projected once)."""
        return self._split_heads(self.key(x), x), self._split_heads(self.value(x), x)

    def _attend(self, q, k, v, hidden, positions, training, previous_scores=None, empty_rows=False):
        """Scaled dot-product attention of heads `q` over `k`, `v`; `hidden` [b, 1 or h, q, k] blocks keys.

        With `empty_rows`, a query whose keys are all hidden gets a zero context (`_without_empty_rows`).
        Returns the output and the scores before `previous_scores`, the mask and the softmax.
        """
        # NEZHA's relative vectors: [q, k, d] for every example, or [b, q, k, d] (cached decoding).
        relative = None
        if self.position_encoding == "relative":
            relative = "qkd" if len(positions.shape) == 3 else "bqkd"
        if relative is None and previous_scores is None and not self.return_attention_scores and \
                (not training or not self.dropout) and keras.backend.backend() in FUSED_BACKENDS:
            return self._fused_attend(q, k, v, hidden, positions, empty_rows), None
        scores = ops.einsum("bqhd,bkhd->bhqk", q, k)
        if relative:
            scores = scores + ops.einsum(f"bqhd,{relative}->bhqk", q, positions)
        if self.scale:
            scores = scores / math.sqrt(self.head_size)
        if self.position_encoding == "t5_relative":  # after the scaling, as the fused kernel adds a bias (MPNet)
            scores = scores + ops.cast(self._t5_bias(positions), scores.dtype)
        own_scores = scores
        if previous_scores is not None:
            scores = scores + ops.cast(previous_scores, scores.dtype)
        if hidden is not None:
            # A large negative score gives a padded (or masked) key zero probability.
            scores = ops.where(hidden, _blocked_score(scores.dtype), scores)
        probs = ops.softmax(scores, axis=-1)
        probs = self.attention_dropout(probs, training=training)
        context = ops.einsum("bhqk,bkhd->bqhd", probs, v)
        if relative:
            context = context + ops.einsum(f"bhqk,{relative}->bqhd", probs, positions)
        if empty_rows:
            context = _without_empty_rows(context, hidden)
        return self._output(context), own_scores

    def _fused_attend(self, q, k, v, hidden, positions, empty_rows=False):
        """`_attend` through `ops.dot_product_attention` (the backend's own kernel), where no score is needed
        outside it: no relative vectors, no scores passed on, no attention dropout. The padding enters as a
        boolean mask; T5's position bias, with the padding folded in (a backend may refuse both), as a bias. A
        row with every key hidden is handled after, as in `_attend`."""
        allowed = None if hidden is None else ops.logical_not(hidden)
        bias = None
        if self.position_encoding == "t5_relative":
            bias = ops.cast(self._t5_bias(positions), q.dtype)
            if hidden is not None:
                bias, allowed = ops.where(hidden, _blocked_score(q.dtype), bias), None
        context = ops.dot_product_attention(q, k, v, bias=bias, mask=allowed,
                                            scale=1 / math.sqrt(self.head_size) if self.scale else 1.0)
        return self._output(_without_empty_rows(context, hidden) if empty_rows else context)

    @staticmethod
    def _t5_bias(positions):
        """T5's biases `[1 or b, heads, q, k]` from `[q, k, heads]` (every example) or `[b, q, k, heads]`
        (cached decoding)."""
        return ops.transpose(positions, (2, 0, 1))[None] if len(positions.shape) == 3 \
            else ops.transpose(positions, (0, 3, 1, 2))

    def _output(self, context):
        """The heads' context `[batch, length, heads, head_size]` joined and projected by the output dense."""
        batch, length = ops.shape(context)[0], ops.shape(context)[1]
        return self.output_dense(ops.reshape(context, (batch, length, self.num_heads * self.head_size)))

    def _split_heads(self, x, inputs):
        """A projection `x` of `inputs` (`[batch, length, ...]`) as `[batch, length, heads, head_size]`."""
        # The batch and length are read from the projection's input: tf2onnx merges a bias-free Dense's
        # reshape back to 3-D into this one, and a shape read from the Dense's output then comes from its 2-D
        # matmul (a T5 encoder's ONNX export failed so).
        batch, length = ops.shape(inputs)[0], ops.shape(inputs)[1]
        return ops.reshape(x, (batch, length, self.num_heads, self.head_size))

    def compute_mask(self, inputs, mask=None):
        output_mask = mask[0] if mask is not None else None
        return [output_mask, None] if self.return_attention_scores else output_mask

    def compute_output_shape(self, input_shape):
        output = (*input_shape[0][:-1], self.output_dim or self.num_heads * self.head_size)
        if not self.return_attention_scores:
            return output
        return [output, (input_shape[0][0], self.num_heads, input_shape[0][1], input_shape[1][1])]

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "head_size": self.head_size,
            "dropout": self.dropout,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "position_encoding": self.position_encoding,
            "use_attention_mask": self.use_attention_mask,
            "use_bias": self.use_bias,
            "scale": self.scale,
            "output_dim": self.output_dim,
            "return_attention_scores": self.return_attention_scores,
        }
