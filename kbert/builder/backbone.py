"""`build_transformer_model`: a BERT-family backbone with bert4keras's layer names, and its checkpoint.

It resolves the family (`kbert.models.registry`), checks the application,
heads and memory, lets the family's graph build the backbone
(`kbert.models.<family>.graph`), and loads a checkpoint (`kbert.checkpoints`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Optional, Sequence, Union

import keras

from kbert.checkpoints.formats import checkpoint_files, load_weights
from kbert.checkpoints.loader import compound_rows
from kbert.checkpoints.undrawn import undrawn_weights
from kbert.errors import ConfigError, is_whole_number
from kbert.layers.common import global_dtype_policy
from kbert.models.config import BertConfig
from kbert.models.heads import Heads
from kbert.models.registry import graph_class, resolve
from kbert.models.tables import SYMBOL_KEYS, expand_formula, symbol_values
from kbert.models.transformer import NEGATIVE_PADDING, NormCondition, Transformer


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
    with_mlm: Union[bool, str, None] = None,
    with_discriminator: bool = False,
    keep_tokens: Optional[Sequence[int]] = None,
    compound_tokens: Optional[Sequence] = None,
    segment_vocab_size: Optional[int] = None,
    layer_norm_cond=None,
    layer_norm_cond_hidden_size: Optional[int] = None,
    layer_norm_cond_hidden_act: Optional[str] = None,
    additional_input_layers=None,
    residual_attention_scores: bool = False,
    name: str = "bert",
    dtype: Optional[str] = None,
    task_lora: Optional[dict] = None,
    padding: "int | str | None" = None,
) -> "keras.Model | Transformer":
    """Builds a BERT-family model, optionally loading its original checkpoint.

    The positional order and keyword names are bert4keras's, so its calls
    carry over: `build_transformer_model(config_path=..., checkpoint_path=...,
    model="albert", with_mlm="linear", keep_tokens=...)`.

    Args:
        config: a `BertConfig`, a dict, or the path of a `bert_config.json`
            (`config_path=` is the same, under bert4keras's name). Left out
            with a `checkpoint_path`, the config beside the checkpoint.
        checkpoint_path: weights to load into the model: the family's original
            TF checkpoint (prefix, one of its files, or its directory) or, for
            BERT, Hugging Face safetensors (a `.safetensors` file or its
            directory); or a name `kbert.hub` fetches and caches:
            `hf://OWNER/NAME[@REVISION]`, `modelscope://OWNER/NAME`, an
            archive's `https://` or `file://` URL, or a preset
            (`kbert presets`), whose family is then the default `model`.
        model: the family, by bert4keras's name: `"bert"`, `"roberta"` (BERT's
            layout), `"albert"`, `"albert_unshared"`, `"nezha"`, `"roformer"`,
            `"roformer_v2"`, `"electra"`, `"gpt"`, `"gpt2"`, `"gpt2_ml"`,
            `"t5"`/`"t5.1.0"`, `"t5.1.1"`, `"mt5.1.1"` (each T5 also as
            `…_encoder` and `…_decoder`). Default: the config's `model_type`
            (Hugging Face's key), else BERT.
        application: `"encoder"`; `"lm"` (each token attends to itself and the
            tokens before it: `Attention-LM-Mask`) or `"unilm"` (segment-0 source
            tokens attend to the source, segment-1 target tokens to the source
            and the target up to themselves: `Attention-UniLM-Mask`), for the
            encoder families but ELECTRA. The GPT families are `"lm"` by
            construction (the default `"encoder"` builds them so, as in bert4keras).
        return_keras_model: return the `keras.Model`; False returns a
            `Transformer` holding it (bert4keras's `.model`, `.inputs`, ...).
        with_pool: add the pooler (`Pooler`, `Pooler-Dense`, tanh).
        with_nsp: add the next-sentence head `NSP-Proba` (implies the pooler).
        with_mlm: add the masked-LM head, tied to `Embedding-Token`: True (or
            `"softmax"`) for probabilities, `"linear"` for logits. Left out
            (None), as bert4keras: True for `application="lm"` or `"unilm"`
            (their output is the next token), else False; `with_mlm=False`
            builds an `lm`/`unilm` encoder without it (bert4keras builds the
            head whatever is passed).
        with_discriminator: ELECTRA's replaced-token head (`Discriminator-Dense`,
            `Discriminator-Prediction`, sigmoid).
        keep_tokens: ids of the checkpoint's vocabulary rows to keep, e.g.
            from `load_vocab(..., simplified=True)`; the model's vocabulary is
            then these rows (`vocab_size` becomes `len(keep_tokens)`).
        compound_tokens: new vocabulary rows after those (bert4keras's): each
            item a list of ids, or `(ids, weights)`, whose rows' (weighted) mean
            the checkpoint's tables get for the new token; `vocab_size` grows
            by `len(compound_tokens)`. The ids count in the vocabulary after
            `keep_tokens`.
        segment_vocab_size: segment ids the model takes (default: the config's
            `type_vocab_size`); 0 builds a model on token ids alone.
        layer_norm_cond: a Keras tensor `[batch, C]` every layer norm is
            conditioned on (`ConditionalLayerNormalization`: bert4keras's
            conditional layer norm, e.g. a class embedding or an image's
            features); the LayerNorm families only.
        layer_norm_cond_hidden_size: each norm first projects the condition to
            this width (default: none).
        layer_norm_cond_hidden_act: that projection's activation (default: linear).
        additional_input_layers: the `keras.Input`(s) the condition is computed
            from; they become the model's inputs after the family's own.
        residual_attention_scores: each attention layer adds the previous
            one's scores (scaled, before the mask) to its own before the
            softmax: RealFormer, as bert4keras's option of that name; the
            encoder application of the encoder families.
        name: the model's name.
        dtype: the dtype policy the model is built under (None: Keras's
            global one, float32 by default). `"bfloat16"` holds every weight
            in bfloat16, half the memory, and computes in it (the heads that
            must stay exact are float32 under any policy); a checkpoint's
            float32 tensors are rounded as each is assigned.
        task_lora: `{"tasks": n, "rank": r, "scale": s}`: a low-rank pair per
            task beside each embedding table, attention projection and
            feed-forward kernel (`kbert.layers.task_lora`), as Jina-v3's files
            hold them (`load_hf_weights` reads them all); the model computes
            the base weights, and one task's when its layers are called with
            `task=` (`kbert.embeddings.embedder.Embedder.for_adapter`). Jina-v3 only.
        padding: which token positions the model hides from attention and
            pooling. None: those of the config's `pad_token_id` (bert4keras's:
            id 0). An id: that one, the id batches are padded with (a
            tokenizer's `padding`, where it differs from the config's).
            `"negative"`: batches padded with negative ids (`-1 - i`), a
            position hidden because its text ended, whatever its token; for a
            tokenizer whose pad token is also a token of its texts (EuroBERT's
            `<|end_of_text|>`), or that has none.

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
    if config is None and config_path is None and checkpoint_path is not None:
        found = checkpoint_files(checkpoint_path)  # a name (hf://..., a preset) is fetched here, once
        config, checkpoint_path, model = _config_beside(found), found.weights, model or found.family
    family, config = resolve(_one_config(config, config_path), model)
    if keep_tokens is not None:  # as bert4keras: the kept rows are the model's vocabulary
        config = dataclasses.replace(config, vocab_size=len(keep_tokens))
    if compound_tokens:  # ... and the compound tokens come after them
        config = dataclasses.replace(config, vocab_size=config.vocab_size + len(compound_rows(compound_tokens)))
    if application == "encoder":
        application = family.default_application
    _check_application(family, application, segment_vocab_size)
    if with_mlm is None:
        with_mlm = application in ("lm", "unilm") and "with_mlm" in family.heads
    heads = Heads.from_flags(with_pool, with_nsp, with_mlm, with_discriminator)
    _check_heads(family, heads)
    if not family.takes_segments:
        segment_vocab_size = 0
    segment_vocab_size = family.segment_input_size(config) if segment_vocab_size is None else segment_vocab_size
    _check_fits_in_memory(family, config, heads)
    condition = _norm_condition(family, layer_norm_cond, layer_norm_cond_hidden_size, layer_norm_cond_hidden_act,
                                additional_input_layers)
    if residual_attention_scores and (application != "encoder" or not family.residual_scores):
        raise ConfigError(f"residual_attention_scores: built for the encoder families' application='encoder' "
                          f"(not model={family.name!r}, application={application!r}); with an lm/unilm mask, "
                          "bert4keras 0.11.5's code would Add the scores to its boolean mask")
    if task_lora is not None and not family.task_lora_layers:
        raise ConfigError(f"task_lora: model={family.name!r} holds no task adapters (Jina-v3's do)")
    if task_lora is not None and (with_pool or with_nsp):
        raise ConfigError("task_lora: the pooler has task adapters in Jina-v3's files that kbert does not compute "
                          "per task; build the encoder without with_pool (an embedding model pools the tokens)")
    _check_padding(padding, config)
    graph = graph_class(family)(family, config, heads, segment_vocab_size, application, condition,
                                residual_attention_scores, task_lora)
    graph.padding = padding
    with global_dtype_policy(dtype), undrawn_weights() if checkpoint_path is not None else contextlib.nullcontext():
        built = graph.build(name)  # a checkpoint's values are read into it, not random ones replaced
    if checkpoint_path is not None:
        load_weights(built, checkpoint_path, keep_tokens=keep_tokens, compound_tokens=compound_tokens)
    return built if return_keras_model else Transformer(built, config)


def _check_padding(padding, config) -> None:
    """`padding`: None, an id of the vocabulary, or `"negative"`."""
    if padding is None or padding == NEGATIVE_PADDING or (is_whole_number(padding, minimum=0)
                                                          and padding < config.vocab_size):
        return
    raise ConfigError(f"padding: expected None (the config's pad_token_id), an id in [0, vocab_size "
                      f"{config.vocab_size}) or {NEGATIVE_PADDING!r}, got {padding!r}")


def _norm_condition(family, tensor, hidden_size, hidden_act, inputs) -> Optional[NormCondition]:
    """bert4keras's `layer_norm_cond*` and `additional_input_layers`, checked."""
    if tensor is None:
        if hidden_size is not None or hidden_act is not None:
            raise ConfigError("layer_norm_cond_hidden_size and layer_norm_cond_hidden_act shape the condition "
                              "of layer_norm_cond, which was not given")
        if inputs is not None:
            raise ConfigError("additional_input_layers are the inputs of layer_norm_cond, which was not given")
        return None
    if not family.conditional_norms:
        raise ConfigError(f"layer_norm_cond: model={family.name!r} has no LayerNorm to condition (T5's and "
                          "RoFormer-v2's RMS norms are not conditional in kbert yet)")
    if not isinstance(tensor, keras.KerasTensor) or len(tensor.shape) not in (2, 3):
        raise ConfigError(f"layer_norm_cond: expected a Keras tensor [batch, C] (e.g. an Embedding of a class "
                          f"id, flattened), got {tensor!r}")
    inputs = () if inputs is None else tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)
    return NormCondition(tensor, hidden_size, hidden_act or "linear", inputs)


def _config_beside(found) -> str:
    if found.config is None:
        raise ConfigError(f"{found.weights}: no bert_config.json or config.json beside the checkpoint; pass "
                          "the config (build_transformer_model(config_path, checkpoint_path))")
    return found.config


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
    wrong = [flag for flag, wanted in heads.flags().items() if wanted and flag not in family.heads]
    if wrong:
        raise ConfigError(f"model={family.name!r} has no {', '.join(wrong)} head; "
                          f"it builds {', '.join(family.heads)}")


def _check_fits_in_memory(family, config: BertConfig, heads: Heads) -> None:
    """Fails at once, naming the largest layer, when the weights alone exceed the machine's memory.

    Keras would otherwise spend a long time initializing before running out of memory.
    """
    flags = heads.flags()
    layers = family.layer_params(config, **{**flags, "with_mlm": bool(flags["with_mlm"])})
    bytes_per_value = 4  # float32 variables, also under mixed precision
    needed = sum(layer.params for layer in layers) * bytes_per_value
    available = _physical_memory()
    if available is not None and needed > available:
        largest = max(layers, key=lambda layer: layer.params)
        keys = [SYMBOL_KEYS[symbol] for symbol in SYMBOL_KEYS if symbol in largest.formula]
        raise ConfigError(
            f"the model's weights need {needed / 2**30:,.1f} GB, more than this machine's "
            f"{available / 2**30:,.1f} GB of memory; the largest layer, {largest.name}, holds "
            f"{largest.formula} = {expand_formula(largest.formula, symbol_values(config))} values "
            f"({largest.params * bytes_per_value / 2**30:,.1f} GB): check {' and '.join(keys)}")


def _physical_memory() -> Optional[int]:
    """This machine's memory in bytes; None where the OS does not say (`os.sysconf` is POSIX only)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
