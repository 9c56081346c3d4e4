"""Builds BERT as a Keras functional model with bert4keras's layer names.

The layer names, their order and their wiring are those of bert4keras 0.11.5,
so model tables and code written for bert4keras carry over:

    Input-Token, Input-Segment
    Embedding-Token, Embedding-Segment, Embedding-Token-Segment,
    Embedding-Position, Embedding-Norm, Embedding-Dropout
    Transformer-{i}-MultiHeadSelfAttention[-Dropout|-Add|-Norm]
    Transformer-{i}-FeedForward[-Dropout|-Add|-Norm]
    heads: Pooler, Pooler-Dense, NSP-Proba, MLM-Dense, MLM-Norm, MLM-Bias,
           MLM-Activation; classifier: CLS-token, dense_output
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional, Sequence, Union

import keras

from kbert import naming
from kbert.config import BertConfig, load_config
from kbert.errors import ConfigError
from kbert.layers import (
    BiasAdd,
    Embedding,
    FeedForward,
    MaskedAdd,
    MultiHeadSelfAttention,
    PositionEmbedding,
    TakeToken,
    TokenEmbedding,
    clone_initializer,
    get_activation,
)


@keras.saving.register_keras_serializable(package="kbert")
class IdModel(keras.Model):
    """A functional model on token and segment ids that rejects fractional ids.

    Keras casts inputs to the `Input`'s int32 dtype, which would silently turn
    an id of 2.7 into 2. Floating-point arrays of whole numbers (e.g. segment
    ids from `np.zeros`) are accepted; any other fraction raises an error that
    names the input. Integer inputs pass untouched, at no cost.
    """

    def call(self, inputs, training=None, mask=None):
        import tensorflow as tf

        for tensor, reference in zip(tf.nest.flatten(inputs), self.inputs):
            tensor = tf.convert_to_tensor(tensor)
            if tensor.dtype.is_floating:
                tf.debugging.assert_equal(
                    tensor, tf.round(tensor), summarize=8,
                    message=f"{reference.name}: ids must be whole numbers")
        return super().call(inputs, training=training, mask=mask)


@dataclasses.dataclass
class Transformer:
    """What `build_transformer_model(..., return_keras_model=False)` returns, as in bert4keras.

    Attributes:
        model: the `keras.Model`.
        inputs, outputs: the model's inputs and outputs.
        initializer: a copy of the initializer of the model's weights, for heads added later.
        config: the model's `BertConfig`.
    """

    model: keras.Model
    config: BertConfig

    @property
    def inputs(self):
        return self.model.inputs

    @property
    def outputs(self):
        return self.model.outputs

    @property
    def initializer(self):
        return _initializer_of(self.model)


def build_transformer_model(
    config=None,
    checkpoint_path: Optional[str] = None,
    model: str = "bert",
    application: str = "encoder",
    return_keras_model: bool = True,
    *,
    config_path=None,
    with_pool: bool = False,
    with_nsp: bool = False,
    with_mlm: Union[bool, str] = False,
    keep_tokens: Optional[Sequence[int]] = None,
    segment_vocab_size: Optional[int] = None,
    name: str = "bert",
) -> "keras.Model | Transformer":
    """Builds a BERT model, optionally loading a Google checkpoint.

    The positional order and keyword names are bert4keras's, so its calls
    carry over: `build_transformer_model(config_path=..., checkpoint_path=...,
    model="bert", with_mlm="linear", keep_tokens=...)`.

    Args:
        config: a `BertConfig`, a dict, or the path of a `bert_config.json`
            (`config_path=` is the same, under bert4keras's name).
        checkpoint_path: weights to load into the model: a Google checkpoint
            (prefix, one of its files, or its directory) or Hugging Face
            safetensors (a `.safetensors` file or its directory).
        model: `"bert"` or `"roberta"` (the same layout).
        application: `"encoder"`.
        return_keras_model: return the `keras.Model`; False returns a
            `Transformer` holding it (bert4keras's `.model`, `.inputs`, ...).
        with_pool: add the pooler (`Pooler`, `Pooler-Dense`, tanh).
        with_nsp: add the next-sentence head `NSP-Proba` (implies the pooler).
        with_mlm: add the masked-LM head, tied to `Embedding-Token`: True (or
            `"softmax"`) for probabilities, `"linear"` for logits.
        keep_tokens: ids of the checkpoint's vocabulary rows to keep, e.g.
            from `load_vocab(..., simplified=True)`; the model's vocabulary is
            then these rows (`vocab_size` becomes `len(keep_tokens)`).
        segment_vocab_size: segment ids the model takes (default: the config's
            `type_vocab_size`); 0 builds a model on token ids alone.
        name: the model's name.

    Returns:
        A `keras.Model` on inputs `[token_ids, segment_ids]` (or
        `[token_ids]`). Its output is, as in bert4keras: the sequence output
        `[batch, seq, H]` for the bare backbone; else the pooled/NSP output,
        the MLM probabilities, or the list `[pooled or NSP, MLM]` when both
        heads are built.

    Example:
    >>> bert = build_transformer_model("configs/bert_base_chinese.json")
    >>> bert.count_params()
    101677056
    >>> mlm = build_transformer_model(config_path="configs/bert_tiny.json", with_mlm="linear",
    ...                               segment_vocab_size=0, return_keras_model=False)
    >>> [tensor.name for tensor in mlm.inputs], mlm.model.get_layer("MLM-Activation").activation.__name__
    (['Input-Token'], 'linear')
    """
    config = load_config(_one_config(config, config_path))
    if keep_tokens is not None:  # as bert4keras: the kept rows are the model's vocabulary
        config = dataclasses.replace(config, vocab_size=len(keep_tokens))
    _check_supported(model, application)
    mlm_activation = _mlm_activation(with_mlm)
    with_pool = with_pool or with_nsp
    segment_vocab_size = config.type_vocab_size if segment_vocab_size is None else segment_vocab_size
    _check_fits_in_memory(config, with_pool=with_pool, with_nsp=with_nsp, with_mlm=bool(mlm_activation))
    token_ids = keras.Input(shape=(None,), dtype="int32", name=naming.INPUT_TOKEN)
    inputs = [token_ids]
    if segment_vocab_size:
        inputs.append(keras.Input(shape=(None,), dtype="int32", name=naming.INPUT_SEGMENT))

    token_embedding = TokenEmbedding(
        config.vocab_size, config.hidden_size, mask_zero=True,
        embeddings_initializer=_initializer(config), name=naming.EMBEDDING_TOKEN)
    x = _embeddings(config, token_embedding, inputs, segment_vocab_size)
    for index in range(config.num_hidden_layers):
        x = _transformer_block(config, index, x)
    sequence_output = x

    heads = []
    if with_pool:
        heads.append(_pooler(config, sequence_output, with_nsp))
    if mlm_activation:
        heads.append(_mlm_head(config, sequence_output, token_embedding, mlm_activation))
    outputs = heads if len(heads) > 1 else (heads or [sequence_output])[0]
    built = IdModel(inputs, outputs, name=name)
    if checkpoint_path is not None:
        from kbert.convert import load_weights

        load_weights(built, checkpoint_path, keep_tokens=keep_tokens)
    return built if return_keras_model else Transformer(built, config)


TOKEN_HEADS = ("softmax", "crf", "global_pointer")


def build_token_classifier(bert: keras.Model, num_labels: int, *, head: str = "softmax", head_size: int = 64,
                           crf_lr_multiplier: float = 1, name: str = "token_classifier") -> keras.Model:
    """Adds a sequence-labelling head to a backbone's sequence output.

    Heads, with bert4keras's recipes:
    - `"softmax"`: `dense_output`, a softmax over `num_labels` tags per token;
    - `"crf"`: `dense_emissions` then `CRF` (`ConditionalRandomField`); train
      with `model.get_layer("CRF").sparse_loss`, decode with `viterbi_decode`;
    - `"global_pointer"`: `global_pointer`, span scores `[batch, num_labels, n, n]`
      (`num_labels` entity types); train with `kbert.losses.global_pointer_crossentropy`.

    Args:
        bert: a backbone from `build_transformer_model` (sequence output, no heads).
        num_labels: tags (softmax, crf) or entity types (global_pointer).
        head: one of `TOKEN_HEADS`.
        head_size: GlobalPointer's query/key width.
        crf_lr_multiplier: the CRF transitions' learning-rate multiplier.
        name: the model's name.

    Example:
    >>> bert = build_transformer_model("configs/bert_tiny.json")
    >>> tagger = build_token_classifier(bert, 7, head="crf")
    >>> [layer.name for layer in tagger.layers[-2:]], tagger.output.shape
    (['dense_emissions', 'CRF'], (None, None, 7))
    """
    from kbert.layers import ConditionalRandomField, GlobalPointer

    if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1:
        raise ValueError(f"num_labels: expected a positive integer, got {num_labels!r}")
    if head not in TOKEN_HEADS:
        raise ValueError(f"head: expected one of {', '.join(TOKEN_HEADS)}, got {head!r}")
    features = bert.output
    if isinstance(features, (list, tuple)) or len(features.shape) != 3:
        raise ValueError("build_token_classifier needs a backbone whose output is the sequence output "
                         "(built without with_pool, with_nsp or with_mlm)")
    initializer = _initializer_of(bert)
    if head == "softmax":
        # float32 even under a mixed-precision policy: a stable softmax and loss.
        outputs = keras.layers.Dense(num_labels, activation="softmax", kernel_initializer=initializer,
                                     name=naming.CLASSIFIER_DENSE, dtype="float32")(features)
    elif head == "crf":
        emissions = keras.layers.Dense(num_labels, kernel_initializer=initializer, name="dense_emissions")(features)
        outputs = ConditionalRandomField(lr_multiplier=crf_lr_multiplier, name="CRF")(emissions)
    else:
        outputs = GlobalPointer(num_labels, head_size, kernel_initializer=initializer,
                                name="global_pointer")(features)
    return IdModel(bert.inputs, outputs, name=name)


def _one_config(config, config_path):
    if config is not None and config_path is not None:
        raise TypeError("build_transformer_model: pass the config once (config or config_path=)")
    if config is None and config_path is None:
        raise TypeError("build_transformer_model: missing the config (a path, dict or BertConfig)")
    return config if config is not None else config_path


def _check_supported(model: str, application: str) -> None:
    if model not in ("bert", "roberta"):
        raise ConfigError(f"model={model!r}: kbert builds 'bert' and 'roberta' (the same layout) so far; "
                          "ALBERT, NEZHA, RoFormer and ELECTRA are not available yet")
    if application != "encoder":
        raise ConfigError(f"application={application!r}: kbert builds 'encoder' models so far; "
                          "the 'lm' and 'unilm' attention masks are not available yet")


def _mlm_activation(with_mlm) -> Optional[str]:
    """The MLM head's output activation (None: no head): True means softmax, as in bert4keras."""
    if with_mlm is True:
        return "softmax"
    if with_mlm in (False, None):
        return None
    if with_mlm in ("softmax", "linear"):
        return with_mlm
    raise ValueError(f"with_mlm: expected True, False, 'softmax' or 'linear', got {with_mlm!r}")


def build_classifier(bert: keras.Model, num_labels: int, *, name: str = "classifier") -> keras.Model:
    """Adds the classification head of the bert4keras tutorials to a backbone.

    On a backbone whose output is the sequence output, the head is `CLS-token`
    (the `[CLS]` hidden state) then `dense_output` (Dense, softmax). On one
    built `with_pool=True`, `dense_output` reads the pooled output.

    Args:
        bert: a model from `build_transformer_model`.
        num_labels: number of classes.
        name: the classifier's name.

    Example:
    >>> bert = build_transformer_model("configs/bert_base_chinese.json")
    >>> build_classifier(bert, num_labels=2).count_params()
    101678594
    """
    if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1:
        raise ValueError(f"num_labels: expected a positive integer, got {num_labels!r}")
    features = bert.output
    if isinstance(features, (list, tuple)):
        raise ValueError("build_classifier expects a backbone with one output (no MLM/NSP heads)")
    if len(features.shape) == 3:
        features = TakeToken(0, name=naming.CLS_TOKEN)(features)
    # float32 even under a mixed-precision policy: a stable softmax and loss.
    probabilities = keras.layers.Dense(
        num_labels, activation="softmax", kernel_initializer=_initializer_of(bert),
        name=naming.CLASSIFIER_DENSE, dtype="float32")(features)
    return IdModel(bert.inputs, probabilities, name=name)


def _embeddings(config: BertConfig, token_embedding, inputs, segment_vocab_size: int):
    x = token_embedding(inputs[0])
    if segment_vocab_size:
        segments = Embedding(
            segment_vocab_size, config.hidden_size, size_key="type_vocab_size",
            embeddings_initializer=_initializer(config), name=naming.EMBEDDING_SEGMENT)(inputs[1])
        x = MaskedAdd(name=naming.EMBEDDING_TOKEN_SEGMENT)([x, segments])
    x = PositionEmbedding(config.max_position_embeddings, embeddings_initializer=_initializer(config),
                          name=naming.EMBEDDING_POSITION)(x)
    x = _layer_norm(config, naming.EMBEDDING_NORM)(x)
    return keras.layers.Dropout(config.hidden_dropout_prob, name=naming.EMBEDDING_DROPOUT)(x)


def _transformer_block(config: BertConfig, index: int, x):
    attention_name = naming.block(index, naming.ATTENTION)
    attended = MultiHeadSelfAttention(
        config.num_attention_heads, config.head_size, dropout=config.attention_probs_dropout_prob,
        kernel_initializer=_initializer(config), name=attention_name)([x, x, x])
    x = _residual(config, attention_name, x, attended)
    ffn_name = naming.block(index, naming.FEED_FORWARD)
    transformed = FeedForward(
        config.intermediate_size, activation=get_activation(config.activation),
        kernel_initializer=_initializer(config), name=ffn_name)(x)
    return _residual(config, ffn_name, x, transformed)


def _residual(config: BertConfig, prefix: str, shortcut, x):
    """Post-LN residual: Dropout, Add the shortcut, LayerNorm."""
    x = keras.layers.Dropout(config.hidden_dropout_prob, name=f"{prefix}-Dropout")(x)
    x = keras.layers.Add(name=f"{prefix}-Add")([shortcut, x])
    return _layer_norm(config, f"{prefix}-Norm")(x)


def _pooler(config: BertConfig, sequence_output, with_nsp: bool):
    x = TakeToken(0, name=naming.POOLER)(sequence_output)
    x = keras.layers.Dense(config.hidden_size, activation="tanh",
                           kernel_initializer=_initializer(config), name=naming.POOLER_DENSE)(x)
    if with_nsp:
        x = keras.layers.Dense(2, activation="softmax", kernel_initializer=_initializer(config),
                               name=naming.NSP_PROBA)(x)
    return x


def _mlm_head(config: BertConfig, sequence_output, token_embedding: TokenEmbedding, activation: str):
    x = keras.layers.Dense(config.hidden_size, activation=get_activation(config.activation),
                           kernel_initializer=_initializer(config), name=naming.MLM_DENSE)(sequence_output)
    x = _layer_norm(config, naming.MLM_NORM)(x)
    x = token_embedding(x, reverse=True)
    x = BiasAdd(name=naming.MLM_BIAS)(x)
    return keras.layers.Activation(activation, name=naming.MLM_ACTIVATION)(x)


def _layer_norm(config: BertConfig, name: str):
    return keras.layers.LayerNormalization(epsilon=config.layer_norm_eps, name=name)


def _check_fits_in_memory(config: BertConfig, **heads) -> None:
    """Fails at once, naming the largest layer, when the weights alone exceed the machine's memory.

    Keras would otherwise spend a long time initializing before running out of memory.
    """
    from kbert.params import SYMBOL_KEYS, analyze

    analysis = analyze(config, **heads)
    bytes_per_value = 4  # float32 variables, also under mixed precision
    needed = analysis.total * bytes_per_value
    available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if needed > available:
        largest = max(analysis.layers, key=lambda layer: layer.params)
        keys = [SYMBOL_KEYS[symbol] for symbol in SYMBOL_KEYS if symbol in largest.formula]
        raise ConfigError(
            f"the model's weights need {needed / 2**30:,.1f} GB, more than this machine's "
            f"{available / 2**30:,.1f} GB of memory; the largest layer, {largest.name}, holds "
            f"{largest.formula} = {analysis.expand(largest.formula)} values "
            f"({largest.params * bytes_per_value / 2**30:,.1f} GB): check {' and '.join(keys)}")


def _initializer(config: BertConfig):
    """A new truncated-normal initializer: every weight gets its own (see `clone_initializer`)."""
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


def _initializer_of(bert: keras.Model):
    """A copy of the backbone's initializer, for a head added later."""
    return clone_initializer(bert.get_layer(naming.EMBEDDING_TOKEN).embeddings_initializer)
