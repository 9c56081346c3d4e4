"""Self-attention with rotary positions in the half-split layout, over the whole row or a sliding window.

The encoders of 2024 on rotate each head's first and second halves against each other (`rotate_half`,
Llama's and transformers' layout, not RoFormer's interleaved pairs). ModernBERT (and the mmBERT / Ettin
encoders built like it) projects queries, keys and values with one fused matrix and lets most layers see
only a window of ±w tokens; Jina-v3, GTE and NomicBERT keep four projections; EuroBERT shares each key
and value head among a group of query heads (grouped-query attention). A window is computed block by block:
the row is cut into blocks of w tokens, and each block's queries attend to its own block and its two
neighbours (3w keys), so the cost and the memory grow with the length, not with its square. A layer that
sees the whole row takes its queries a block at a time where the backend has no fused kernel (TensorFlow,
JAX), so that a long row never holds its `[heads, length, length]` scores at once.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Tuple

import keras
import numpy as np
from keras import ops

from kbert.layers.attention import _blocked_score
from kbert.layers.common import _PACKAGE, clone_initializer
from kbert.layers.norms import RMSNormalization
from kbert.layers.task_lora import check_task_lora, dense_with_tasks, project

#: Queries per block of a whole-row layer on TensorFlow and JAX, one head at a time: at 8,192 tokens a block's
#: scores are 512 × 8,192 (16 MiB in float32), not the row's 12 heads × 8,192 × 8,192 (3 GiB).
QUERY_BLOCK = 512


def rope_frequencies(head_size: int, theta: float, factor: float = 1.0,
                     scaling: Optional[Mapping[str, Any]] = None) -> Tuple[np.ndarray, float]:
    """The rotary inverse frequencies `θ^(−2i/d)` (float32 `[head_size / 2]`) and the factor on cos and sin, as
    transformers computes them for a `rope_type`.

    Args:
        head_size: d, a head's width.
        theta: the base θ.
        factor: the frequencies divided by it (`linear`); 1.0: none.
        scaling: `{"rope_type": "llama3" or "yarn", ...}` with that type's keys (`factor`,
            `original_max_position_embeddings`, llama3's `low_freq_factor` and `high_freq_factor`, yarn's
            optional `beta_fast`, `beta_slow`, `attention_factor`, `mscale`, `mscale_all_dim`, `truncate`);
            None: the frequencies as they are.

    Example: llama3 keeps the highest frequency, slows the lowest by `factor`, blends those between.
    >>> inverse, _ = rope_frequencies(8, 10000.0)
    >>> slowed, attention = rope_frequencies(8, 10000.0, scaling={"rope_type": "llama3", "factor": 8.0,
    ...     "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    >>> [round(float(x), 4) for x in inverse / slowed], attention
    ([1.0, 7.6674, 8.0, 8.0], 1.0)
    """
    inverse = 1.0 / theta ** (np.arange(0, head_size, 2, dtype=np.float64) / head_size) / factor
    kind = (scaling or {}).get("rope_type")
    attention = 1.0
    if kind == "llama3":
        inverse = _llama3_frequencies(inverse, scaling)
    elif kind == "yarn":
        inverse, attention = _yarn_frequencies(inverse, head_size, theta, scaling)
    elif kind is not None:
        raise ValueError(f"rope_type {kind!r}: kbert computes llama3 and yarn here")
    return inverse.astype("float32"), attention


def _llama3_frequencies(inverse: np.ndarray, scaling: Mapping[str, Any]) -> np.ndarray:
    """Llama 3.1's: wavelengths longer than `original / low_freq_factor` slowed by `factor`, shorter than
    `original / high_freq_factor` kept, the ones between blended."""
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    wavelength = 2 * math.pi / inverse
    slowed = np.where(wavelength > original / low, inverse / factor, inverse)
    smooth = (original / wavelength - low) / (high - low)
    blended = (1 - smooth) * slowed / factor + smooth * slowed
    between = (wavelength >= original / high) & (wavelength <= original / low)
    return np.where(between, blended, slowed)


def _yarn_frequencies(inverse: np.ndarray, head_size: int, theta: float,
                      scaling: Mapping[str, Any]) -> Tuple[np.ndarray, float]:
    """YaRN's: the frequencies that turn fewer than `beta_slow` times over the original length slowed by `factor`,
    those that turn more than `beta_fast` times kept, a linear ramp between; cos and sin scaled by
    `0.1 · ln(factor) + 1` (or the config's `attention_factor`, or the ratio of two `mscale`s)."""
    factor, original = scaling["factor"], scaling["original_max_position_embeddings"]

    def mscale(weight: float) -> float:
        return 1.0 if factor <= 1 else 0.1 * weight * math.log(factor) + 1.0

    attention = scaling.get("attention_factor")
    if attention is None:
        both = scaling.get("mscale") and scaling.get("mscale_all_dim")
        attention = mscale(scaling["mscale"]) / mscale(scaling["mscale_all_dim"]) if both else mscale(1.0)

    def dimension(rotations: float) -> float:  # the feature that turns `rotations` times over the original length
        return head_size * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = dimension(scaling.get("beta_fast") or 32), dimension(scaling.get("beta_slow") or 1)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_size - 1)
    ramp = np.clip((np.arange(head_size // 2) - low) / ((high - low) or 0.001), 0, 1)
    return inverse / factor * ramp + inverse * (1 - ramp), float(attention)


def rotary_cos_sin(length, head_size: int, theta: float, dtype="float32", factor: float = 1.0,
                   scaling: Optional[Mapping[str, Any]] = None):
    """`(cos, sin)`, each `[length, head_size]`: position p's angle `p · θ^(−2i/d) / factor` for feature i and
    i + d/2 (`factor`: transformers' `linear` rope_type, positions slowed down by it; `scaling`: llama3's or
    yarn's frequencies, `rope_frequencies`).

    Example:
    >>> cos, sin = rotary_cos_sin(3, 4, 10000.0)
    >>> [round(float(x), 4) for x in sin[2]]
    [0.9093, 0.02, 0.9093, 0.02]
    >>> [round(float(x), 4) for x in rotary_cos_sin(3, 4, 10000.0, factor=2.0)[1][2]]  # position 2 turns as 1
    [0.8415, 0.01, 0.8415, 0.01]
    """
    inverse, attention = rope_frequencies(head_size, theta, factor, scaling)
    angles = ops.arange(length, dtype="float32")[:, None] * ops.convert_to_tensor(inverse)[None, :]
    angles = ops.concatenate([angles, angles], axis=-1)
    return ops.cast(ops.cos(angles) * attention, dtype), ops.cast(ops.sin(angles) * attention, dtype)


def apply_rotary_half(x, cos, sin):
    """`x` `[batch, length, heads, head_size]` rotated: `x · cos + rotate_half(x) · sin`, rotate_half taking
    (a, b) halves to (−b, a)."""
    half = ops.shape(x)[-1] // 2
    rotated = ops.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[None, :, None, :] + rotated * sin[None, :, None, :]


def windowed_attention(q, k, v, keep, window: int):
    """Attention of each query over the keys within `window` positions of it (|i − j| ≤ window), block by block.

    Args:
        q, k, v: `[batch, length, heads, head_size]`, queries already scaled.
        keep: `[batch, length]` boolean, False for padding (a key no query sees).
        window: the half-width w.

    Returns `[batch, length, heads, head_size]`. Blocks of w queries see their block and its neighbours:
    `[batch · blocks, w, 3w]` scores, not `[batch, length, length]`. A query with no key to see (padding far
    from any real token) attends to itself, which keeps its row finite.
    """
    batch, length = ops.shape(q)[0], ops.shape(q)[1]
    heads, size = q.shape[2], q.shape[3]
    blocks = (length + window - 1) // window
    padded = blocks * window

    def pad(x, before, after):
        return ops.pad(x, [(0, 0), (before, after)] + [(0, 0)] * (len(x.shape) - 2))

    def neighbours(x):  # [batch, padded, ...] -> [batch · blocks, 3w, ...]: blocks i − 1, i, i + 1
        x = pad(x, window, padded - length + window)
        x = ops.reshape(x, (batch, blocks + 2, window, *x.shape[2:]))
        x = ops.concatenate([x[:, :-2], x[:, 1:-1], x[:, 2:]], axis=2)
        return ops.reshape(x, (batch * blocks, 3 * window, *x.shape[3:]))

    queries = ops.reshape(pad(q, 0, padded - length), (batch * blocks, window, heads, size))
    keys, values, seen = neighbours(k), neighbours(v), neighbours(keep)
    # Query t of a block against slot s of its 3w keys: the distance is s − w − t.
    distance = ops.arange(3 * window)[None, :] - window - ops.arange(window)[:, None]
    band = ops.less_equal(ops.abs(distance), window)
    allowed = ops.logical_and(band[None], seen[:, None, :])
    alone = ops.logical_not(ops.any(allowed, axis=-1, keepdims=True))
    allowed = ops.logical_or(allowed, ops.logical_and(alone, ops.equal(distance, 0)[None]))
    # the backend's own kernel: on PyTorch a fused one that never holds a block's scores, softmax and mask at once
    context = ops.dot_product_attention(queries, keys, values, mask=allowed[:, None], scale=1.0)
    return ops.reshape(context, (batch, padded, heads, size))[:, :length]


def query_blocked_attention(q, k, v, keep, block: int, scale: float):
    """Attention of every query over every key, one head's block of at most `block` queries at a time.

    Args:
        q, k, v: `[batch, length, heads, head_size]`.
        keep: `[batch, length]` boolean, False for padding (a key no query sees).
        block: the most queries in a block; the row is cut into equal blocks of at most this many (the last
            padded by fewer rows than there are blocks).
        scale: the scores' factor.

    Returns `[batch, length, heads, head_size]`, what `ops.dot_product_attention` over the whole row gives. The
    steps go through `ops.scan`, which runs them in turn on every backend (TensorFlow's `while_loop` with one
    iteration in flight, JAX's `lax.scan`; a `map` may run several at once and hold their scores together). One
    head a step keeps a step's scores in the CPU's cache: the memory traffic of a step over every head was most of
    the time (a global layer of a ModernBERT-base at 8,192 tokens on JAX: 1.7–1.8 s a head at a time, 3.4–3.6 s over
    all heads at once; docs/families-and-checkpoints.md). The heads take a scan each: Keras's scan on
    TensorFlow takes one sequence of a length not known when traced, not a second of head numbers.

    Example:
    >>> q, k, v = (keras.random.normal((2, 7, 2, 4), seed=s) for s in (1, 2, 3))
    >>> keep = ops.array([[True] * 7, [True] * 4 + [False] * 3])
    >>> whole = ops.dot_product_attention(q, k, v, mask=keep[:, None, None, :], scale=0.5)
    >>> float(ops.max(ops.abs(query_blocked_attention(q, k, v, keep, 3, 0.5) - whole))) < 1e-5
    True
    """
    batch, length = ops.shape(q)[0], ops.shape(q)[1]
    heads, size = q.shape[2], q.shape[3]
    blocks = (length + block - 1) // block
    rows = (length + blocks - 1) // blocks
    q = ops.pad(ops.multiply(q, scale), [(0, 0), (0, blocks * rows - length), (0, 0), (0, 0)])
    q = ops.transpose(ops.reshape(q, (batch, blocks, rows, heads, size)), (3, 1, 0, 2, 4))  # [heads, blocks, ...]
    seen = keep[:, None, :]

    def attend_head(keys, values):
        def attend(_, queries):  # TensorFlow's scan keeps each step's output in the carry's shape and type
            scores = ops.where(seen, ops.einsum("bqd,bkd->bqk", queries, keys), _blocked_score(queries.dtype))
            context = ops.einsum("bqk,bkd->bqd", ops.softmax(scores, axis=-1), values)
            return context, context

        return attend

    context = ops.stack([ops.scan(attend_head(k[:, :, head], v[:, :, head]), ops.zeros_like(q[head, 0]), q[head])[1]
                         for head in range(heads)])  # [heads, blocks, batch, rows, size]
    context = ops.transpose(context, (2, 1, 3, 0, 4))
    return ops.reshape(context, (batch, blocks * rows, heads, size))[:, :length]


def causal_allowed(keep, length, window: Optional[int] = None):
    """`[batch, 1, length, length]`: which keys each query sees in a decoder: the real ones (`keep`) at or before
    it, and within the `window` keys ending at it where given. Each query sees itself too, real or not, so that
    a padding query (a left-padded row's first positions) has a key and stays finite; a real query never sees
    padding.

    Example:
    >>> keep = ops.array([[False, True, True]])
    >>> ops.convert_to_numpy(causal_allowed(keep, 3))[0, 0].astype(int).tolist()
    [[1, 0, 0], [0, 1, 0], [0, 1, 1]]
    >>> ops.convert_to_numpy(causal_allowed(ops.array([[True] * 3]), 3, window=2))[0, 0].astype(int).tolist()
    [[1, 0, 0], [1, 1, 0], [0, 1, 1]]
    """
    distance = ops.arange(length)[:, None] - ops.arange(length)[None, :]  # query − key
    band = distance >= 0 if window is None else ops.logical_and(distance >= 0, distance < window)
    allowed = ops.logical_and(band[None], keep[:, None, :])
    return ops.logical_or(allowed, ops.equal(distance, 0)[None])[:, None]


def whole_query_blocks(model: keras.Model) -> None:
    """Sets every `RotarySelfAttention` of `model` to take all its queries at once: for an exported graph, whose
    runtime (onnxruntime, OpenVINO, LiteRT) fuses the attention itself and would get a loop instead."""
    for layer in model._flatten_layers():
        if isinstance(layer, RotarySelfAttention):
            layer.query_block = None


@keras.saving.register_keras_serializable(package=_PACKAGE)
class RotarySelfAttention(keras.layers.Layer):
    """Multi-head self-attention with rotary positions (half-split layout).

    Args:
        num_heads: attention heads (of the queries).
        head_size: width of one head.
        num_key_value_heads: key and value heads, each shared by `num_heads / num_key_value_heads` query
            heads (None: as many as the queries).
        fused_qkv: one `qkv` projection (ModernBERT's `Wqkv`) rather than `query`, `key` and `value`.
        rope_theta: the rotary base θ (ModernBERT: 160,000 on its global layers, 10,000 on its local ones).
        rope_factor: the rotary frequencies divided by it (transformers' `linear` rope_type; GTE v1.5's NTK
            scaling, `kbert.models.gte.family`); 1.0: none.
        window: None, every query sees every key; else w, each query sees the keys within w positions of
            it, computed block by block (`windowed_attention`; a row of at most w + 1 tokens, whose length is
            known when traced, as one: the window holds it whole).
        use_bias: biases in the two projections.
        dropout: dropout on the attention probabilities (training only; the window's blocks have none).
        kernel_initializer: initializer of the two projections.
        task_lora: `{"tasks": n, "rank": r, "scale": s}`: a low-rank update per task beside each projection
            (`kbert.layers.task_lora`: Jina-v3's adapters), applied when called with `task=t`; None: none.
        query_block: a whole-row layer's queries per block on TensorFlow and JAX (`query_blocked_attention`),
            for a row longer than it; None: all at once. PyTorch's fused kernel never holds the scores and
            takes them all at once.
        causal: each query sees only the keys at or before it (a decoder's attention: Llama's, Qwen's).
        causal_window: with `causal`, each query sees only the `causal_window` keys ending at it (Mistral's and
            Qwen's `sliding_window`); None: every earlier key.
        qk_norm_epsilon: an RMS norm over each head's features of the queries and of the keys, before the
            rotation (`query_norm`, `key_norm`: Qwen3's `q_norm` and `k_norm`), with this epsilon; None: none.
        qk_norm_unit_offset: those norms multiply by `1 + scale` (Gemma's, `RMSNormalization(unit_offset=True)`).
        attention_scale: the scores' factor (None: 1 / √head_size; Gemma's `query_pre_attn_scalar ** -0.5`).
        output_bias: a bias in the output projection (None: as `use_bias`; Qwen2 has biases on the queries,
            keys and values alone).
        rope_scaling: llama3's or yarn's rotary frequencies (`rope_frequencies`); None: unscaled (or `rope_factor`).

    Called on hidden states `[batch, length, H]` with their Keras mask (padding: False); padded keys get no
    attention. The projections are `qkv` (`[H, 3 · heads · head_size]`: queries, keys, values), or `query`,
    `key` and `value`, then `output`.

    Example: a window as wide as the row is the whole row.
    >>> x = keras.random.normal((1, 10, 8), seed=1)
    >>> whole = RotarySelfAttention(num_heads=2, head_size=4, rope_theta=10000.0)
    >>> local = RotarySelfAttention(num_heads=2, head_size=4, rope_theta=10000.0, window=10)
    >>> _ = local(x)
    >>> local.set_weights(whole.get_weights()) if whole(x) is not None else None
    >>> float(ops.max(ops.abs(local(x) - whole(x)))) < 1e-5
    True
    """

    def __init__(self, num_heads: int, head_size: int, rope_theta: float = 10000.0, window: Optional[int] = None,
                 use_bias: bool = False, dropout: float = 0.0, kernel_initializer="glorot_uniform",
                 num_key_value_heads: Optional[int] = None, fused_qkv: bool = True, rope_factor: float = 1.0,
                 task_lora: Optional[dict] = None, query_block: Optional[int] = QUERY_BLOCK, causal: bool = False,
                 causal_window: Optional[int] = None, qk_norm_epsilon: Optional[float] = None,
                 output_bias: Optional[bool] = None, rope_scaling: Optional[dict] = None,
                 qk_norm_unit_offset: bool = False, attention_scale: Optional[float] = None, **kwargs):
        super().__init__(**kwargs)
        if causal_window is not None and not causal:
            raise ValueError("causal_window needs causal=True (a bidirectional window is `window`)")
        if causal and window is not None:
            raise ValueError("a causal layer takes causal_window, not window")
        self.causal, self.causal_window = causal, causal_window
        self.qk_norm_epsilon, self.qk_norm_unit_offset = qk_norm_epsilon, qk_norm_unit_offset
        self.attention_scale = attention_scale
        self.scale = 1 / math.sqrt(head_size) if attention_scale is None else attention_scale
        self.output_bias = use_bias if output_bias is None else output_bias
        self.rope_scaling = None if rope_scaling is None else dict(rope_scaling)
        self.task_lora = check_task_lora(task_lora)
        self.num_heads = num_heads
        self.head_size = head_size
        self.num_key_value_heads = num_key_value_heads or num_heads
        if num_heads % self.num_key_value_heads:
            raise ValueError(f"num_heads={num_heads} is not a multiple of num_key_value_heads={num_key_value_heads}")
        if fused_qkv and self.num_key_value_heads != num_heads:
            raise ValueError("a fused qkv projection has as many key and value heads as query heads")
        self.fused_qkv = fused_qkv
        self.rope_theta = rope_theta
        self.rope_factor = rope_factor
        self.window = window
        self.query_block = query_block
        self.use_bias = use_bias
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True
        width, shared = num_heads * head_size, self.num_key_value_heads * head_size
        # Attributes named as the sublayers: a `.keras` file's weights are stored by attribute.
        if fused_qkv:
            self.qkv = self._dense(3 * width, "qkv")
        else:
            self.query, self.key, self.value = (self._dense(units, name) for units, name in
                                                ((width, "query"), (shared, "key"), (shared, "value")))
        self.output_dense = None  # made in build: its width is the input's
        if qk_norm_epsilon is not None:
            self.query_norm, self.key_norm = (RMSNormalization(qk_norm_epsilon, unit_offset=qk_norm_unit_offset,
                                                               name=name, dtype=self.dtype_policy)
                                              for name in ("query_norm", "key_norm"))
        self.attention_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def _dense(self, units: int, name: str, use_bias: Optional[bool] = None):
        use_bias = self.use_bias if use_bias is None else use_bias
        return dense_with_tasks(units, self.task_lora, use_bias=use_bias, name=name, dtype=self.dtype_policy,
                                kernel_initializer=clone_initializer(self.kernel_initializer))

    def build(self, input_shape):
        for projection in self._projections():
            projection.build(input_shape)
        self.output_dense = self._dense(input_shape[-1], "output", self.output_bias)
        self.output_dense.build((*input_shape[:-1], self.num_heads * self.head_size))
        if self.qk_norm_epsilon is not None:
            for norm in (self.query_norm, self.key_norm):
                norm.build((None, None, None, self.head_size))

    def call(self, x, mask=None, training=None, task=None):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        q, k, v = self._heads(x, batch, length, task)
        if self.qk_norm_epsilon is not None:
            q, k = self.query_norm(q), self.key_norm(k)
        cos, sin = rotary_cos_sin(length, self.head_size, self.rope_theta, q.dtype, self.rope_factor,
                                  self.rope_scaling)
        q, k = apply_rotary_half(q, cos, sin), apply_rotary_half(k, cos, sin)
        keep = ops.ones((batch, length), "bool") if mask is None else ops.cast(mask, "bool")
        if self.window is not None and not (isinstance(length, int) and length <= self.window + 1):
            context = windowed_attention(q * self.scale, k, v, keep, self.window)
        elif self.causal:
            allowed = causal_allowed(keep, length, self.causal_window)
            context = self._attend(q, k, v, allowed, training)
        elif training and self.dropout:
            context = self._attend(q, k, v, keep[:, None, None, :], training)
        else:
            context = self._attend_whole_row(q, k, v, keep, length)
        return project(self.output_dense, ops.reshape(context, (batch, length, self.num_heads * self.head_size)), task)

    def _attend(self, q, k, v, allowed, training):
        """Every query over the keys `allowed` (`[batch, 1, queries, keys]`, or broadcast to it), with dropout on
        the probabilities where training; else the backend's kernel."""
        scale = self.scale
        if not (training and self.dropout):
            return ops.dot_product_attention(q, k, v, mask=allowed, scale=scale)
        scores = ops.where(allowed, ops.einsum("bqhd,bkhd->bhqk", q, k) * scale, _blocked_score(q.dtype))
        probs = self.attention_dropout(ops.softmax(scores, axis=-1), training=training)
        return ops.einsum("bhqk,bkhd->bqhd", probs, v)

    def _attend_whole_row(self, q, k, v, keep, length):
        """Every query over every key: PyTorch's fused kernel, which never holds the scores; on TensorFlow and JAX
        `query_blocked_attention` for a row longer than `query_block` (TensorFlow's graph of a length it does not
        know when traced decides as it runs), the backend's kernel for a shorter one."""
        scale = self.scale

        def whole():
            return ops.dot_product_attention(q, k, v, mask=keep[:, None, None, :], scale=scale)

        def blocked():
            return query_blocked_attention(q, k, v, keep, self.query_block, scale)

        if not self.query_block or keras.backend.backend() == "torch":
            return whole()
        if isinstance(length, int):
            return blocked() if length > self.query_block else whole()
        return ops.cond(length > self.query_block, blocked, whole)

    def _projections(self):
        return (self.qkv,) if self.fused_qkv else (self.query, self.key, self.value)

    def _heads(self, x, batch, length, task=None):
        """Queries, keys and values `[batch, length, heads, head_size]`; shared key and value heads repeated
        for their group of query heads."""
        if self.fused_qkv:
            qkv = ops.reshape(project(self.qkv, x, task), (batch, length, 3, self.num_heads, self.head_size))
            return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        q = ops.reshape(project(self.query, x, task), (batch, length, self.num_heads, self.head_size))
        k, v = (ops.reshape(project(dense, x, task), (batch, length, self.num_key_value_heads, self.head_size))
                for dense in (self.key, self.value))
        group = self.num_heads // self.num_key_value_heads
        if group > 1:  # query head h reads key and value head h // group, as transformers' repeat_kv
            k, v = ops.repeat(k, group, axis=2), ops.repeat(v, group, axis=2)
        return q, k, v

    def compute_mask(self, inputs, mask=None):
        return mask

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "num_heads": self.num_heads, "head_size": self.head_size,
                "num_key_value_heads": self.num_key_value_heads, "fused_qkv": self.fused_qkv,
                "rope_theta": self.rope_theta, "rope_factor": self.rope_factor, "window": self.window,
                "use_bias": self.use_bias,
                "dropout": self.dropout, "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "task_lora": self.task_lora, "query_block": self.query_block, "causal": self.causal,
                "causal_window": self.causal_window, "qk_norm_epsilon": self.qk_norm_epsilon,
                "output_bias": self.output_bias, "rope_scaling": self.rope_scaling,
                "qk_norm_unit_offset": self.qk_norm_unit_offset, "attention_scale": self.attention_scale}
