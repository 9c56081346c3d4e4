"""Builds BERT-family models and the task models on them, with bert4keras's layer names.

`build_transformer_model` resolves the family (`kbert.models.registry`),
lets its graph build the backbone (`kbert.models.<family>.graph`), and loads
a checkpoint; `build_classifier` and `build_token_classifier` add the task
heads of the bert4keras tutorials.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from typing import Optional, Sequence, Union

import keras

from kbert import naming
from kbert.config import BertConfig
from kbert.errors import ConfigError
from kbert.layers import TakeToken
from kbert.models.registry import resolve
from kbert.models.transformer import Heads, IdModel, Transformer, id_model, initializer_of

__all__ = ["IdModel", "TOKEN_HEADS", "Transformer", "build_classifier", "build_token_classifier",
           "build_transformer_model"]


def build_transformer_model(
    config=None,
    checkpoint_path: Optional[str] = None,
    model: Optional[str] = None,
    application: str = "encoder",
    return_keras_model: bool = True,
    *,
    config_path=None,
    with_pool: bool = False,
    with_nsp: bool = False,
    with_mlm: Union[bool, str] = False,
    with_discriminator: bool = False,
    keep_tokens: Optional[Sequence[int]] = None,
    segment_vocab_size: Optional[int] = None,
    name: str = "bert",
) -> "keras.Model | Transformer":
    """Builds a BERT-family model, optionally loading its original checkpoint.

    The positional order and keyword names are bert4keras's, so its calls
    carry over: `build_transformer_model(config_path=..., checkpoint_path=...,
    model="albert", with_mlm="linear", keep_tokens=...)`.

    Args:
        config: a `BertConfig`, a dict, or the path of a `bert_config.json`
            (`config_path=` is the same, under bert4keras's name).
        checkpoint_path: weights to load into the model: the family's original
            TF checkpoint (prefix, one of its files, or its directory) or, for
            BERT, Hugging Face safetensors (a `.safetensors` file or its directory).
        model: the family, by bert4keras's name: `"bert"`, `"roberta"` (BERT's
            layout), `"albert"`, `"albert_unshared"`, `"nezha"`, `"roformer"`,
            `"electra"`. Default: the config's `model_type` (Hugging Face's
            key), else BERT.
        application: `"encoder"`; `"lm"` (each token attends to itself and the
            tokens before it: `Attention-LM-Mask`) or `"unilm"` (segment-0 source
            tokens attend to the source, segment-1 target tokens to the source
            and the target up to themselves: `Attention-UniLM-Mask`), for every
            family but ELECTRA.
        return_keras_model: return the `keras.Model`; False returns a
            `Transformer` holding it (bert4keras's `.model`, `.inputs`, ...).
        with_pool: add the pooler (`Pooler`, `Pooler-Dense`, tanh).
        with_nsp: add the next-sentence head `NSP-Proba` (implies the pooler).
        with_mlm: add the masked-LM head, tied to `Embedding-Token`: True (or
            `"softmax"`) for probabilities, `"linear"` for logits.
        with_discriminator: ELECTRA's replaced-token head (`Discriminator-Dense`,
            `Discriminator-Prediction`, sigmoid).
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
        heads are built; ELECTRA's discriminator gives `[batch, seq, 1]`.

    Example:
    >>> bert = build_transformer_model("configs/bert_base_chinese.json")
    >>> bert.count_params()
    101677056
    >>> albert = build_transformer_model("configs/albert_tiny_zh.json", model="albert")
    >>> albert.count_params(), albert.get_layer("Transformer-FeedForward").count_params()
    (3982864, 780312)
    >>> mlm = build_transformer_model(config_path="configs/bert_tiny.json", with_mlm="linear",
    ...                               segment_vocab_size=0, return_keras_model=False)
    >>> [tensor.name for tensor in mlm.inputs], mlm.model.get_layer("MLM-Activation").activation.__name__
    (['Input-Token'], 'linear')
    """
    family, config = resolve(_one_config(config, config_path), model)
    if keep_tokens is not None:  # as bert4keras: the kept rows are the model's vocabulary
        config = dataclasses.replace(config, vocab_size=len(keep_tokens))
    _check_application(family, application, segment_vocab_size)
    heads = Heads(pool=with_pool or with_nsp, nsp=with_nsp, mlm=_mlm_activation(with_mlm),
                  discriminator=with_discriminator)
    _check_heads(family, heads)
    segment_vocab_size = config.type_vocab_size if segment_vocab_size is None else segment_vocab_size
    _check_fits_in_memory(config, model=family.name, with_pool=heads.pool, with_nsp=heads.nsp,
                          with_mlm=bool(heads.mlm), with_discriminator=heads.discriminator)
    module, graph_class = family.graph.split(":")
    graph = getattr(importlib.import_module(module), graph_class)(family, config, heads, segment_vocab_size,
                                                                  application)
    built = graph.build(name)
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
    initializer = initializer_of(bert)
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
    return id_model(bert.inputs, outputs, getattr(bert, "family", "bert"), name)


def _one_config(config, config_path):
    if config is not None and config_path is not None:
        raise TypeError("build_transformer_model: pass the config once (config or config_path=)")
    if config is None and config_path is None:
        raise TypeError("build_transformer_model: missing the config (a path, dict or BertConfig)")
    return config if config is not None else config_path


def _check_application(family, application: str, segment_vocab_size: Optional[int]) -> None:
    if application not in family.applications:
        raise ConfigError(f"application={application!r}: model={family.name!r} builds "
                          f"{', '.join(repr(name) for name in family.applications)}")
    if application == "unilm" and segment_vocab_size == 0:
        raise ConfigError("application='unilm' reads the segment ids (0: source, 1: target); "
                          "it cannot be built with segment_vocab_size=0")


def _check_heads(family, heads: Heads) -> None:
    """Rejects a head the family does not have (ELECTRA: no pooler or MLM; only ELECTRA: discriminator)."""
    asked = {"with_pool": heads.pool, "with_nsp": heads.nsp, "with_mlm": bool(heads.mlm),
             "with_discriminator": heads.discriminator}
    wrong = [flag for flag, wanted in asked.items() if wanted and flag not in family.heads]
    if wrong:
        raise ConfigError(f"model={family.name!r} has no {', '.join(wrong)} head; "
                          f"it builds {', '.join(family.heads)}")


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
        num_labels, activation="softmax", kernel_initializer=initializer_of(bert),
        name=naming.CLASSIFIER_DENSE, dtype="float32")(features)
    return id_model(bert.inputs, probabilities, getattr(bert, "family", "bert"), name)


def load_keras_model(path: str, *, safe_mode: bool = True) -> keras.Model:
    """Loads a `.keras` file of a kbert model (`model.save("m.keras")`, `kbert export`).

    `import kbert` loads nothing until used, so Keras alone would not find
    kbert's layers in a fresh process; this imports them, then calls
    `keras.saving.load_model`.

    Example:

    >>> import os, tempfile
    >>> bert = build_transformer_model("configs/bert_tiny.json")
    >>> path = os.path.join(tempfile.mkdtemp(), "bert.keras")
    >>> bert.save(path)
    >>> load_keras_model(path).count_params() == bert.count_params()
    True
    """
    importlib.import_module("kbert.schedules")  # a compiled model's learning-rate schedule
    return keras.saving.load_model(path, safe_mode=safe_mode)


def _check_fits_in_memory(config: BertConfig, **model) -> None:
    """Fails at once, naming the largest layer, when the weights alone exceed the machine's memory.

    Keras would otherwise spend a long time initializing before running out of memory.
    """
    from kbert.params import SYMBOL_KEYS, analyze

    analysis = analyze(config, **model)
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
