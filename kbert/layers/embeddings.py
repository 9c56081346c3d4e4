"""Embeddings: token (with the tied reverse projection), segment, position, and their sum.

Padding travels as a Keras mask: `TokenEmbedding(mask_zero=True)` creates it
from token id 0, and `MaskedAdd` keeps it where Keras 3's `Add` would drop it.
Ids outside a table are errors that name the config key (`checked_ids`).
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from kbert.errors import InputError
from kbert.layers.checks import checked
from kbert.layers.common import _PACKAGE, clone_initializer
from kbert.layers.task_lora import add_task_weights, check_task_lora, task_update


def checked_ids(ids, limit: int, description: str, negative_hint: str = ""):
    """`ids`, after checks that each is in `[0, limit)`; an error names `description` otherwise.

    Keras would otherwise take a negative id as counting from the end of the
    table (a silently wrong row) and raise an error that names no config key
    for one past the end. The checks run on every backend where values can be
    read (`kbert.layers.checks`).
    """
    negative, too_large = _range_errors(limit, description, negative_hint)
    ids = checked(ids, ops.all(ids >= 0), negative)
    return checked(ids, ops.all(ids < limit), too_large)


def _range_errors(limit: int, description: str, negative_hint: str = "") -> tuple:
    """The messages of an id below 0 (with what may have made it) and of one at least `limit`."""
    expected = f"{description}: ids must be in [0, {limit})"
    return f"{expected}; found a negative id{negative_hint}", f"{expected}; found one of {limit} or more"


@keras.saving.register_keras_serializable(package=_PACKAGE)
class Embedding(keras.layers.Embedding):
    """`keras.layers.Embedding` that rejects ids outside its table.

    An id below 0 or at least `input_dim` raises an error naming the layer and
    `size_key`, the config key that sets `input_dim` (Keras's own layer would
    read a negative id as a row from the end).

    It keeps Keras's class name on purpose: Keras 3's `.weights.h5` files key
    each layer by its class name, so model directories written when the
    segment embedding was `keras.layers.Embedding` still load.

    Args:
        input_dim: number of rows (ids 0 to `input_dim - 1`).
        output_dim: embedding width.
        size_key: the config key named in the error (e.g. `type_vocab_size`).
        task_lora: `{"tasks": n, "rank": r, "scale": s}`: a low-rank update of the table per task
            (`kbert.layers.task_lora`), added to the rows looked up when called with `task=t`; None: none.
        **kwargs: as for `keras.layers.Embedding`.

    Example:
    >>> segments = Embedding(2, 4, size_key="type_vocab_size", name="Embedding-Segment")
    >>> tuple(segments(ops.convert_to_tensor([[0, 1, 1]])).shape)
    (1, 3, 4)
    >>> try:  # kbert's InputError; TensorFlow's InvalidArgumentError where the check runs in its graph
    ...     segments(ops.convert_to_tensor([[0, 2]]))
    ... except Exception as error:
    ...     print("Embedding-Segment (type_vocab_size): ids must be in [0, 2); found one of 2 or more" in str(error))
    True
    """

    def __init__(self, input_dim: int, output_dim: int, size_key: str = "input_dim", task_lora=None, **kwargs):
        super().__init__(input_dim, output_dim, **kwargs)
        self.size_key = size_key
        self.task_lora = check_task_lora(task_lora)

    def build(self, input_shape=None):
        super().build(input_shape)
        if self.task_lora is not None:
            self.task_lora_a, self.task_lora_b = add_task_weights(self, self.task_lora, self.input_dim,
                                                                  self.output_dim)

    def add_weight(self, *args, **kwargs):
        # The table is read in its own dtype and only the rows looked up are cast to the compute dtype.
        # Keras's Embedding asks for that with `autocast = False` on the layer, which a model called
        # through `stateless_call` (JAX's train and predict steps) passes by: the whole table was cast
        # to bfloat16 under mixed_bfloat16 and its gradient added up in bfloat16 (a slow scatter, and
        # a segment table summing thousands of rows at 8 bits of mantissa).
        kwargs.setdefault("autocast", False)
        return super().add_weight(*args, **kwargs)

    negative_hint = ""  # what may have made a negative id, for the error

    def call(self, inputs, task=None):
        ids = checked_ids(ops.cast(inputs, "int32") if inputs.dtype not in ("int32", "int64") else inputs,
                          self.input_dim, self._description, self.negative_hint)
        rows = super().call(ids)
        if task is None:
            return rows
        update = task_update(ids, self.task_lora_a, self.task_lora_b, task, self.task_lora["scale"], lookup=True)
        return rows + ops.cast(update, rows.dtype)

    def compute_output_spec(self, inputs, task=None):
        return super().compute_output_spec(inputs)

    def check_ids(self, ids: np.ndarray) -> None:
        """`call`'s checks on an array of ids, for a model to run before a compiled step (`IdModel`)."""
        negative, too_large = _range_errors(self.input_dim, self._description, self.negative_hint)
        if ids.size and ids.min() < 0:
            raise InputError(negative)
        if ids.size and ids.max() >= self.input_dim:
            raise InputError(too_large)

    @property
    def _description(self) -> str:
        return f"{self.name} ({self.size_key})"

    def get_config(self):
        return {**super().get_config(), "size_key": self.size_key, "task_lora": self.task_lora}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TokenEmbedding(Embedding):
    """Token embedding that can also project hidden states back to the vocab.

    Called on token ids it looks them up; called with `reverse=True` on hidden
    states `[batch, seq, H]` it multiplies by the transposed table, giving
    vocabulary logits `[batch, seq, V]`. This is how BERT's masked-LM head
    shares ("ties") its output weights with the input embedding.

    Args:
        input_dim: vocabulary size V.
        output_dim: embedding width H.
        pad_id: the padding id the mask hides, when it is not 0 (`mask_zero=True`
            for 0; neither: no mask).
        hidden_ids: whether a negative id `-1 - i` stands for token `i` hidden by
            the mask: looked up as `i`, attended to by no other token, yet given
            its own output (ColBERT's query expansion: `[MASK]` tokens in the
            padding that each read the query, which never reads them). Without
            `mask_zero` or `pad_id`, the negative ids alone are hidden: padding
            made of them hides the positions after a text, whatever its ids (a
            tokenizer whose pad token also ends every text).
        **kwargs: as for `Embedding` (e.g. `mask_zero=True`); ids are
            checked against `vocab_size`.

    Example:
    >>> embed = TokenEmbedding(100, 8, mask_zero=True)
    >>> hidden = embed(ops.convert_to_tensor([[5, 7, 0]]))
    >>> tuple(embed(hidden, reverse=True).shape)
    (1, 3, 100)
    >>> ops.convert_to_numpy(TokenEmbedding(100, 8, pad_id=1).compute_mask(ops.convert_to_tensor([[5, 1, 0]]))).tolist()
    [[True, False, True]]
    >>> ops.convert_to_numpy(TokenEmbedding(100, 8, mask_zero=True, hidden_ids=True).compute_mask(
    ...     ops.convert_to_tensor([[5, -4, 0]]))).tolist()
    [[True, False, False]]
    >>> ops.convert_to_numpy(TokenEmbedding(100, 8, hidden_ids=True).compute_mask(
    ...     ops.convert_to_tensor([[5, 0, -1]]))).tolist()
    [[True, True, False]]
    """

    # A `tokenizer.json`'s batches are padded with negative ids, which only a model built for them takes.
    negative_hint = (" (a batch padded by a tokenizer.json pads with negative ids: build the model with "
                     "padding=tokenizer.padding, which hides them)")

    def __init__(self, input_dim: int, output_dim: int, size_key: str = "vocab_size", pad_id=None,
                 hidden_ids: bool = False, **kwargs):
        super().__init__(input_dim, output_dim, size_key=size_key, **kwargs)
        if pad_id is not None and self.mask_zero:
            raise ValueError("TokenEmbedding: give mask_zero=True (padding id 0) or pad_id, not both")
        self.pad_id = pad_id
        self.hidden_ids = hidden_ids
        if pad_id is not None or hidden_ids:  # Keras sets a layer's mask on its output only when it supports masking
            self.supports_masking = True

    def call(self, inputs, reverse=False, task=None):
        if reverse:
            kernel = ops.cast(self.embeddings, self.compute_dtype)
            return ops.matmul(inputs, ops.transpose(kernel))
        if self.hidden_ids:
            inputs = ops.where(inputs < 0, -1 - inputs, inputs)
        return super().call(inputs, task=task)

    def compute_mask(self, inputs, mask=None):
        # Hidden states (the reverse call) keep the mask they came with.
        if mask is not None or len(inputs.shape) == 3:
            return mask
        if self.pad_id is not None:
            mask = ops.not_equal(inputs, self.pad_id)
        else:
            mask = super().compute_mask(inputs)
        if self.hidden_ids:
            mask = inputs >= 0 if mask is None else ops.logical_and(mask, inputs >= 0)
        return mask

    def check_ids(self, ids: np.ndarray) -> None:
        super().check_ids(np.where(ids < 0, -1 - ids, ids) if self.hidden_ids else ids)

    def get_config(self):
        return {**super().get_config(), **({} if self.pad_id is None else {"pad_id": self.pad_id}),
                **({"hidden_ids": True} if self.hidden_ids else {})}

    def compute_output_spec(self, inputs, reverse=False, task=None):
        if reverse:
            shape = (*inputs.shape[:-1], self.input_dim)
            return keras.KerasTensor(shape, dtype=self.compute_dtype)
        return super().compute_output_spec(inputs)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class MaskedAdd(keras.layers.Add):
    """`keras.layers.Add` that keeps the mask of the inputs that have one.

    Keras 3's `Add` drops the mask as soon as one input has none; Keras 2 (and
    so bert4keras) combined the masks that exist. BERT needs the Keras 2 rule
    where token embeddings (masked at padding) meet segment embeddings (no
    mask).

    Example:
    >>> tokens = keras.Input((None,), dtype="int32")
    >>> token_vectors = keras.layers.Embedding(10, 4, mask_zero=True)(tokens)
    >>> segment_vectors = keras.layers.Embedding(2, 4)(tokens * 0)
    >>> MaskedAdd()([token_vectors, segment_vectors])._keras_mask is not None
    True
    """

    def compute_mask(self, inputs, mask=None):
        masks = [m for m in (mask or []) if m is not None]
        if not masks:
            return None
        combined = masks[0]
        for other in masks[1:]:
            combined = ops.logical_and(combined, other)
        return combined


@keras.saving.register_keras_serializable(package=_PACKAGE)
class PositionEmbedding(keras.layers.Layer):
    """Adds a learned absolute position embedding to its input.

    The input may be shorter than `max_length`; the first rows of the table
    are used. Called with `positions` (`[batch, length]` ids, as packed
    pre-training gives each token's position within its document), the
    rows of those positions are added instead.

    Args:
        max_length: number of positions P (`max_position_embeddings`).
        embeddings_initializer: initializer of the `[P, H]` table.

    Example:
    >>> layer = PositionEmbedding(max_length=16)
    >>> tuple(layer(ops.zeros((2, 5, 8))).shape)
    (2, 5, 8)
    >>> restarted = layer(ops.zeros((1, 4, 8)), positions=ops.convert_to_tensor([[0, 1, 0, 1]]))
    >>> bool(ops.all(restarted[0, 2] == restarted[0, 0]))
    True
    """

    def __init__(self, max_length: int, embeddings_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.supports_masking = True

    def build(self, input_shape):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.max_length, input_shape[-1]),
            initializer=clone_initializer(self.embeddings_initializer),
            autocast=False,  # as `Embedding`'s: the rows used are cast, not the table
        )

    def call(self, inputs, positions=None):
        if positions is not None:
            rows = checked_ids(positions, self.max_length, f"{self.name}: a position (max_position_embeddings)")
            return inputs + ops.cast(ops.take(self.embeddings, rows, axis=0), self.compute_dtype)
        table = self.checked_table(inputs)
        positions = ops.slice(table, (0, 0), (ops.shape(inputs)[1], ops.shape(table)[1]))
        return inputs + ops.cast(positions, self.compute_dtype)[None]

    def checked_table(self, inputs):
        """The table, once the input's length is checked against `longest_input`."""
        length = ops.shape(inputs)[1]
        if isinstance(length, int):  # a static length (JAX, torch, a fixed-length Input): checked here
            self.check_length(length)
            return self.embeddings.value
        return checked(self.embeddings.value, ops.less_equal(length, self.longest_input), self._too_long)

    @property
    def longest_input(self) -> int:
        """The most tokens a row may hold: the table's rows."""
        return self.max_length

    def call_step(self, inputs, step):
        """`call` in cached decoding (`kbert.layers.decoding`): each new token's own position's row."""
        return inputs + ops.cast(ops.take(self.embeddings, step.positions, axis=0), inputs.dtype)

    def compute_output_spec(self, inputs, **kwargs):  # `positions`, and RoBERTa's `mask`, leave the shape as it is
        return keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)

    def check_length(self, length: int) -> None:
        """Raises `InputError` for a sequence longer than the table (for `IdModel` to run before a compiled step)."""
        if length > self.longest_input:
            raise InputError(self._too_long)

    @property
    def _too_long(self) -> str:
        return f"{self.name}: the sequence is longer than max_position_embeddings ({self.max_length})"

    def get_config(self):
        return {
            **super().get_config(),
            "max_length": self.max_length,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
        }


@keras.saving.register_keras_serializable(package=_PACKAGE)
class RobertaPositionEmbedding(PositionEmbedding):
    """`PositionEmbedding` as Hugging Face's RoBERTa and XLM-RoBERTa number positions: after the padding id.

    Positions are counted over the real tokens only: the k-th real token of
    a row (k from 1) reads row `padding_idx + k`, a padded one row
    `padding_idx`, wherever the padding is (transformers'
    `create_position_ids_from_input_ids`). The input's mask (the padding the
    token embedding hides) says which tokens are real; without one, all are.
    A row holds at most `max_length - padding_idx - 1` tokens.

    Args:
        max_length: number of positions P (`max_position_embeddings`, 514 in roberta-base).
        padding_idx: the padding id (`pad_token_id`, 1 in RoBERTa and XLM-R).
        **kwargs: as for `PositionEmbedding` (`embeddings_initializer`).

    Example:
    >>> layer = RobertaPositionEmbedding(max_length=8, padding_idx=1)
    >>> ops.convert_to_numpy(layer.positions(ops.convert_to_tensor([[True, True, False], [False, True, True]])))
    array([[2, 3, 1],
           [1, 2, 3]], dtype=int32)
    >>> layer.longest_input
    6
    """

    def __init__(self, max_length: int, padding_idx: int, **kwargs):
        super().__init__(max_length, **kwargs)
        self.padding_idx = padding_idx

    def call(self, inputs, mask=None):
        table = self.checked_table(inputs)
        real = ops.ones(ops.shape(inputs)[:2], "bool") if mask is None else mask
        return inputs + ops.cast(ops.take(table, self.positions(real), axis=0), self.compute_dtype)

    def positions(self, real):
        """`[batch, length]` table rows: the running count of real tokens after `padding_idx`, and
        `padding_idx` itself where `real` (a boolean mask) is False."""
        real = ops.cast(real, "int32")
        return ops.cumsum(real, axis=1) * real + self.padding_idx

    def call_step(self, inputs, step):
        """`call` in cached decoding: the token at slot p (counted from 0, no padding before it) reads row
        `padding_idx + 1 + p`, as it does in `call`."""
        rows = step.positions + self.padding_idx + 1
        return inputs + ops.cast(ops.take(self.embeddings, rows, axis=0), inputs.dtype)

    @property
    def longest_input(self) -> int:
        """The table's rows less those at and below `padding_idx`."""
        return self.max_length - self.padding_idx - 1

    @property
    def _too_long(self) -> str:
        return (f"{self.name}: the sequence is longer than {self.longest_input} tokens (max_position_embeddings "
                f"{self.max_length}, less the {self.padding_idx + 1} rows at and below padding id "
                f"{self.padding_idx}, where this model's positions start)")

    def get_config(self):
        return {**super().get_config(), "padding_idx": self.padding_idx}
