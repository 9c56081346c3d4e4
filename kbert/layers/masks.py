"""Attention masks of the `lm` and `unilm` applications and of packed rows, as layers (no Python lambdas).

Each gives a boolean `[batch or 1, 1, length, length]` mask, True where query i
may attend to key j; the attention layers combine it with the padding mask.
"""

from __future__ import annotations

import keras
from keras import ops

from kbert.layers.common import _PACKAGE

MASK_KINDS = ("lm", "unilm", "packed")


@keras.saving.register_keras_serializable(package=_PACKAGE)
class AttentionMask(keras.layers.Layer):
    """Which keys each query may attend to: left-to-right (`lm`), UniLM's seq2seq rule (`unilm`), or
    within its own document of a packed row (`packed`).

    - `"lm"`, called on token ids: each token attends to itself and the tokens
      before it.
    - `"unilm"`, called on segment ids: segment-0 tokens (the source) attend to
      the whole source; segment-1 tokens (the target) attend to the source and
      to the target tokens up to themselves (the rule of bert4keras: the
      cumulative segment sum of the key is at most the query's).
    - `"packed"`, called on each token's position within its document (a
      row of several documents, as packed pre-training lays them out): a
      document starts where the position is 0, and each token attends to
      the tokens of its own document only.

    Args:
        kind: `"lm"`, `"unilm"` or `"packed"`.

    Example:
    >>> segments = ops.convert_to_tensor([[0, 0, 1, 1]])
    >>> ops.convert_to_numpy(AttentionMask("unilm")(segments))[0, 0].astype(int).tolist()
    [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    >>> tuple(AttentionMask("lm")(segments).shape)
    (1, 1, 4, 4)
    >>> positions = ops.convert_to_tensor([[0, 1, 0, 1, 2]])  # two documents: 2 and 3 tokens
    >>> ops.convert_to_numpy(AttentionMask("packed")(positions))[0, 0, [0, 2]].astype(int).tolist()
    [[1, 1, 0, 0, 0], [0, 0, 1, 1, 1]]
    """

    def __init__(self, kind: str, **kwargs):
        super().__init__(**kwargs)
        if kind not in MASK_KINDS:
            raise ValueError(f"kind: expected one of {', '.join(MASK_KINDS)}, got {kind!r}")
        self.kind = kind

    def call(self, ids):
        if self.kind == "lm":
            positions = ops.arange(ops.shape(ids)[1])
            return (positions[None, :] <= positions[:, None])[None, None]
        if self.kind == "packed":
            documents = ops.cumsum(ops.cast(ops.equal(ids, 0), "int32"), axis=1)
            return ops.equal(documents[:, None, :], documents[:, :, None])[:, None]
        steps = ops.cumsum(ops.cast(ids, "int32"), axis=1)
        return (steps[:, None, :] <= steps[:, :, None])[:, None]

    def call_step(self, ids, step):
        """`call` in cached decoding (`kbert.layers.decoding`): the cache slots each new token may attend to,
        as the step gives them, `[batch, 1, q, slots]`."""
        return ops.expand_dims(step.allowed, 1)

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_spec(self, ids):
        batch = 1 if self.kind == "lm" else ids.shape[0]
        return keras.KerasTensor((batch, 1, ids.shape[1], ids.shape[1]), dtype="bool")

    def get_config(self):
        return {**super().get_config(), "kind": self.kind}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class UnmaskingDropout(keras.layers.Dropout):
    """Keras's `Dropout`, ending the padding mask it receives: later layers see every position.

    For a Hugging Face T5 decoder (`decoder_mask_zero=False`): its start token
    is id 0, which the shared token embedding masks as padding, and Hugging
    Face's decoder hides no token.

    Args:
        rate: as for `keras.layers.Dropout`.
        **kwargs: as for `keras.layers.Dropout`.

    Example:
    >>> x, mask = ops.ones((1, 3, 2)), ops.convert_to_tensor([[True, True, False]])
    >>> keras.layers.Dropout(0.1).compute_mask(x, mask) is mask, UnmaskingDropout(0.1).compute_mask(x, mask)
    (True, None)
    """

    def call(self, inputs, training=False):
        # Out of training Dropout returns its input itself, which carries the mask along: a copy does not.
        return ops.copy(super().call(inputs, training=training))

    def compute_mask(self, inputs, mask=None):
        return None


@keras.saving.register_keras_serializable(package=_PACKAGE)
class ZeroingDropout(keras.layers.Dropout):
    """Keras's `Dropout`, its hidden positions (mask False) set to zero: DeBERTa's embeddings, which transformers
    multiplies by the attention mask, so a hidden position enters the first block as zeros. The mask is kept.

    Args:
        rate: as for `keras.layers.Dropout`.
        **kwargs: as for `keras.layers.Dropout`.

    Example:
    >>> x, mask = ops.ones((1, 3, 2)), ops.convert_to_tensor([[True, True, False]])
    >>> ops.convert_to_numpy(ZeroingDropout(0.1)(x, mask=mask)).tolist()
    [[[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]]
    """

    def call(self, inputs, training=False, mask=None):
        dropped = super().call(inputs, training=training)
        return dropped if mask is None else dropped * ops.cast(mask, dropped.dtype)[..., None]
