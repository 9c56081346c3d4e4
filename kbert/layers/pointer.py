"""GlobalPointer and EfficientGlobalPointer: span scores for every (start, end) pair, per entity type.

bert4keras's layers (Su Jianlin's design): for each head (entity type) h, the
score of the span from position m to position n is `q_m · k_n / sqrt(d)`,
queries and keys being projections of the hidden states with rotary
positions. Padded rows and columns, and spans that end before they start
(the lower triangle), get -1e12. Train with
`kbert.losses.global_pointer_crossentropy`.
"""

from __future__ import annotations

import keras
from keras import ops

from kbert.layers.common import _PACKAGE, clone_initializer
from kbert.layers.rotary import apply_rotary, sinusoidal_positions

MASKED = -1e12


class _SpanScores(keras.layers.Layer):
    """What both pointers share: arguments, masking of padding and of the lower triangle."""

    def __init__(self, heads: int, head_size: int, RoPE: bool = True, use_bias: bool = True,  # noqa: N803
                 tril_mask: bool = True, kernel_initializer="lecun_normal", **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.heads, self.head_size, self.RoPE = heads, head_size, RoPE
        self.use_bias, self.tril_mask = use_bias, tril_mask
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True

    def _dense(self, units: int, name: str):
        return keras.layers.Dense(units, use_bias=self.use_bias, name=name, dtype=self.dtype_policy,
                                  kernel_initializer=clone_initializer(self.kernel_initializer))

    def _rotate(self, x):
        return apply_rotary(x, sinusoidal_positions(ops.shape(x)[1], self.head_size, x.dtype)) if self.RoPE else x

    def _masked(self, logits, mask):
        """`logits` [batch, heads, m, n] with padding and (if tril_mask) the lower triangle at -1e12."""
        length = ops.shape(logits)[-1]
        keep = ops.ones_like(logits, dtype="bool")
        # expand_dims, not x[:, None]: LiteRT's converter takes no new-axis slices of booleans
        if mask is not None:
            mask = ops.cast(mask, "bool")
            keep = keep & ops.expand_dims(mask, (1, 3)) & ops.expand_dims(mask, (1, 2))
        if self.tril_mask:
            positions = ops.arange(length)
            keep = keep & ops.expand_dims(ops.expand_dims(positions, 1) <= ops.expand_dims(positions, 0), (0, 1))
        return ops.where(keep, logits, ops.cast(MASKED, logits.dtype))

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.heads, input_shape[1], input_shape[1])

    def get_config(self):
        return {**super().get_config(), "heads": self.heads, "head_size": self.head_size, "RoPE": self.RoPE,
                "use_bias": self.use_bias, "tril_mask": self.tril_mask,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer)}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class GlobalPointer(_SpanScores):
    """Span scores `[batch, heads, length, length]` from hidden states `[batch, length, H]`.

    One Dense layer gives each head its own query and key (`2 * head_size`
    features per head).

    Args:
        heads: number of entity types.
        head_size: width of queries and keys.
        RoPE: rotary positions on queries and keys.
        use_bias: biases in the projection.
        tril_mask: mask spans that end before they start.

    Example:
    >>> pointer = GlobalPointer(heads=2, head_size=4)
    >>> scores = pointer(ops.ones((1, 3, 8)), mask=ops.convert_to_tensor([[True, True, False]]))
    >>> tuple(scores.shape), bool(scores[0, 0, 1, 0] == MASKED), bool(scores[0, 0, 0, 2] == MASKED)
    ((1, 2, 3, 3), True, True)
    """

    def build(self, input_shape):
        self.dense = self._dense(self.heads * self.head_size * 2, "dense")
        self.dense.build(input_shape)

    def call(self, inputs, mask=None):
        projected = self.dense(inputs)
        batch, length = ops.shape(projected)[0], ops.shape(projected)[1]
        per_head = ops.reshape(projected, (batch, length, self.heads, 2 * self.head_size))
        queries = self._rotate(per_head[..., :self.head_size])
        keys = self._rotate(per_head[..., self.head_size:])
        logits = ops.einsum("bmhd,bnhd->bhmn", queries, keys) / self.head_size ** 0.5
        return self._masked(logits, mask)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class EfficientGlobalPointer(_SpanScores):
    """GlobalPointer with queries and keys shared by all heads, plus per-head start and end terms.

    Far fewer parameters (H·2d + 2d·2·heads instead of H·2d·heads); the
    same arguments as `GlobalPointer`.

    Example:
    >>> pointer = EfficientGlobalPointer(heads=3, head_size=4)
    >>> tuple(pointer(ops.ones((2, 5, 8))).shape), pointer.count_params()
    ((2, 3, 5, 5), 126)
    """

    def build(self, input_shape):
        self.p_dense = self._dense(self.head_size * 2, "p_dense")
        self.p_dense.build(input_shape)
        self.q_dense = self._dense(self.heads * 2, "q_dense")
        self.q_dense.build((*input_shape[:-1], self.head_size * 2))

    def call(self, inputs, mask=None):
        projected = self.p_dense(inputs)
        queries, keys = self._rotate(projected[..., ::2]), self._rotate(projected[..., 1::2])
        logits = ops.einsum("bmd,bnd->bmn", queries, keys) / self.head_size ** 0.5
        # Per head, a start term for row m and an end term for column n.
        bias = ops.transpose(self.q_dense(projected), (0, 2, 1)) / 2
        logits = logits[:, None] + bias[:, ::2, None] + bias[:, 1::2, :, None]
        return self._masked(logits, mask)
