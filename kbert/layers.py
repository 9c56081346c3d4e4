"""Serializable Keras 3 layers that BERT needs beyond Keras's own.

Each layer has a `get_config` and is registered under the `kbert` package, so
a model saved as `.keras` loads back with `safe_mode=True`. None of them knows
BERT's layer names: the builder gives the names.

Padding travels as a Keras mask: `TokenEmbedding(mask_zero=True)` creates it
from token id 0, Keras's own layers pass it along, and
`MultiHeadSelfAttention` uses it to hide padded keys.
"""

from __future__ import annotations

import math

import keras
from keras import ops

_PACKAGE = "kbert"


@keras.saving.register_keras_serializable(package=_PACKAGE)
def gelu_tanh(x):
    """GELU, tanh approximation (`gelu_new` in Google's and HF's configs)."""
    return keras.activations.gelu(x, approximate=True)


def get_activation(name: str):
    """The Keras activation for a canonical `BertConfig.activation` name."""
    return gelu_tanh if name == "gelu_tanh" else keras.activations.get(name)


def clone_initializer(initializer):
    """A new initializer of the same kind and settings, for one more weight.

    A Keras 3 initializer created without a seed picks one seed when it is
    created and returns the same values on every call, so weights that share
    one instance start out identical (Q = K = V, every block alike). Each
    weight therefore gets its own copy, which picks its own seed (from
    `keras.utils.set_random_seed` when that was called). An initializer given
    an explicit seed keeps it in the copy, as keras-hub's `clone_initializer`
    does.

    Example:
    >>> shared = keras.initializers.TruncatedNormal(stddev=0.02)
    >>> first, second = clone_initializer(shared), clone_initializer(shared)
    >>> bool(ops.all(first((3, 3)) == second((3, 3))))
    False
    """
    initializer = keras.initializers.get(initializer)
    return initializer.__class__.from_config(initializer.get_config())


def checked_ids(ids, limit: int, description: str):
    """`ids`, after checks that each is in `[0, limit)`; an error names `description` otherwise.

    Keras would otherwise take a negative id as counting from the end of the
    table (a silently wrong row) and raise an error that names no config key
    for one past the end. The checks are TensorFlow assertions, run in eager and
    graph mode; XLA (`jit_compile=True`) compiles them away, as it does every
    assertion.
    """
    import tensorflow as tf

    expected = f"{description}: ids must be in [0, {limit})"
    checks = [
        tf.debugging.assert_non_negative(ids, message=f"{expected}; found a negative id", summarize=8),
        tf.debugging.assert_less(ids, ops.cast(limit, ids.dtype),
                                 message=f"{expected}; found one of {limit} or more", summarize=8),
    ]
    with tf.control_dependencies(checks):
        return tf.identity(ids)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class CheckedEmbedding(keras.layers.Embedding):
    """`keras.layers.Embedding` that rejects ids outside its table.

    An id below 0 or at least `input_dim` raises an error naming the layer and
    `size_key`, the config key that sets `input_dim` (Keras's own layer would
    read a negative id as a row from the end).

    Args:
        input_dim: number of rows (ids 0 to `input_dim - 1`).
        output_dim: embedding width.
        size_key: the config key named in the error (e.g. `type_vocab_size`).
        **kwargs: as for `keras.layers.Embedding`.

    Example:
    >>> segments = CheckedEmbedding(2, 4, size_key="type_vocab_size", name="Embedding-Segment")
    >>> segments(ops.convert_to_tensor([[0, 1, 1]])).shape
    TensorShape([1, 3, 4])
    >>> segments(ops.convert_to_tensor([[0, 2]]))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tensorflow.python.framework.errors_impl.InvalidArgumentError: ...Embedding-Segment (type_vocab_size): ids must be in [0, 2); found one of 2 or more...
    """

    def __init__(self, input_dim: int, output_dim: int, size_key: str = "input_dim", **kwargs):
        super().__init__(input_dim, output_dim, **kwargs)
        self.size_key = size_key

    def call(self, inputs):
        ids = ops.cast(inputs, "int32") if inputs.dtype not in ("int32", "int64") else inputs
        return super().call(checked_ids(ids, self.input_dim, f"{self.name} ({self.size_key})"))

    def get_config(self):
        return {**super().get_config(), "size_key": self.size_key}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TokenEmbedding(CheckedEmbedding):
    """Token embedding that can also project hidden states back to the vocab.

    Called on token ids it looks them up; called with `reverse=True` on hidden
    states `[batch, seq, H]` it multiplies by the transposed table, giving
    vocabulary logits `[batch, seq, V]`. This is how BERT's masked-LM head
    shares ("ties") its output weights with the input embedding.

    Args:
        input_dim: vocabulary size V.
        output_dim: embedding width H.
        **kwargs: as for `CheckedEmbedding` (e.g. `mask_zero=True`); ids are
            checked against `vocab_size`.

    Example:
    >>> embed = TokenEmbedding(100, 8, mask_zero=True)
    >>> hidden = embed(ops.convert_to_tensor([[5, 7, 0]]))
    >>> embed(hidden, reverse=True).shape
    TensorShape([1, 3, 100])
    """

    def __init__(self, input_dim: int, output_dim: int, size_key: str = "vocab_size", **kwargs):
        super().__init__(input_dim, output_dim, size_key=size_key, **kwargs)

    def call(self, inputs, reverse=False):
        if reverse:
            kernel = ops.cast(self.embeddings, self.compute_dtype)
            return ops.matmul(inputs, ops.transpose(kernel))
        return super().call(inputs)

    def compute_mask(self, inputs, mask=None):
        # Hidden states (the reverse call) keep the mask they came with.
        if mask is not None or len(inputs.shape) == 3:
            return mask
        return super().compute_mask(inputs)

    def compute_output_spec(self, inputs, reverse=False):
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
    are used.

    Args:
        max_length: number of positions P (`max_position_embeddings`).
        embeddings_initializer: initializer of the `[P, H]` table.

    Example:
    >>> layer = PositionEmbedding(max_length=16)
    >>> layer(ops.zeros((2, 5, 8))).shape
    TensorShape([2, 5, 8])
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
        )

    def call(self, inputs):
        import tensorflow as tf

        length = ops.shape(inputs)[1]
        check = tf.debugging.assert_less_equal(
            length, self.max_length, message=f"{self.name}: the sequence is longer than "
                                             f"max_position_embeddings ({self.max_length})")
        with tf.control_dependencies([check]):
            positions = ops.cast(self.embeddings[:length], self.compute_dtype)
        return inputs + positions[None]

    def get_config(self):
        return {
            **super().get_config(),
            "max_length": self.max_length,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
        }


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


@keras.saving.register_keras_serializable(package=_PACKAGE)
class FeedForward(keras.layers.Layer):
    """BERT's position-wise feed-forward network: Dense(I, act) then Dense(H).

    Args:
        intermediate_size: width of the inner layer I.
        activation: activation of the inner layer (a Keras identifier).
        kernel_initializer: initializer of both kernels.

    Example:
    >>> ffn = FeedForward(intermediate_size=16, activation="gelu")
    >>> ffn(ops.ones((1, 3, 4))).shape
    TensorShape([1, 3, 4])
    """

    def __init__(self, intermediate_size: int, activation="gelu",
                 kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.intermediate_size = intermediate_size
        self.activation = keras.activations.get(activation)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True
        self.intermediate = keras.layers.Dense(
            intermediate_size, activation=self.activation,
            kernel_initializer=clone_initializer(self.kernel_initializer), name="intermediate",
            dtype=self.dtype_policy)
        self.output_dense = None

    def build(self, input_shape):
        self.intermediate.build(input_shape)
        self.output_dense = keras.layers.Dense(
            input_shape[-1], kernel_initializer=clone_initializer(self.kernel_initializer),
            name="output", dtype=self.dtype_policy)
        self.output_dense.build((*input_shape[:-1], self.intermediate_size))

    def call(self, inputs):
        return self.output_dense(self.intermediate(inputs))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "intermediate_size": self.intermediate_size,
            "activation": keras.activations.serialize(self.activation),
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TakeToken(keras.layers.Layer):
    """Takes the hidden state at one position: `[batch, seq, H] -> [batch, H]`.

    BERT's pooler and classifiers read position 0, the `[CLS]` token.

    Args:
        index: the position to take.

    Example:
    >>> TakeToken(0)(ops.ones((2, 5, 8))).shape
    TensorShape([2, 8])
    """

    def __init__(self, index: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.index = index

    def call(self, inputs):
        return inputs[:, self.index]

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (input_shape[0], *input_shape[2:])

    def get_config(self):
        return {**super().get_config(), "index": self.index}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BiasAdd(keras.layers.Layer):
    """Adds a learned bias vector over the last axis (BERT's MLM output bias).

    Example:
    >>> BiasAdd()(ops.zeros((2, 3, 10))).shape
    TensorShape([2, 3, 10])
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def build(self, input_shape):
        self.bias = self.add_weight(name="bias", shape=(input_shape[-1],), initializer="zeros")

    def call(self, inputs):
        return inputs + ops.cast(self.bias, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return input_shape
