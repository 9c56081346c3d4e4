"""ModernBERT's checkpoint names and parameter formulas (`model="modernbert"`).

Pure Python (no TensorFlow). The Keras graph is in `graph.py`.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from kbert.models import naming
from kbert.models.hub_family import HubFamily
from kbert.models.config import ACTIVATIONS
from kbert.models.heads import SequenceHead
from kbert.models.modernbert.config import ModernBertConfig
from kbert.models.tables import H, I, V, LayerParams, WeightName, embedding, linear, output_weights

THREE_H, TWO_I = "3·hidden_size", "2·intermediate_size"  # the fused projections' widths


def _norm(path: str, hf: str) -> List[WeightName]:
    google = hf.replace(".", "/")
    return [WeightName(f"{path}/gamma", f"{google}/gamma", f"{hf}.weight", False, False, (H,)),
            WeightName(f"{path}/beta", f"{google}/beta", f"{hf}.bias", False, False, (H,))]


class ModernBertFamily(HubFamily):
    """ModernBERT as transformers builds it (`ModernBertModel`, `ModernBertForMaskedLM`); a config with
    `model_type` modernbert gets it (mmBERT and the Ettin encoders are ModernBERTs).

    Pre-norm blocks without biases (by default): the first block reads the embeddings' norm, every other
    normalises first (`Transformer-{i}-MultiHeadSelfAttention-Norm`); attention with one fused
    query/key/value matrix and rotary positions (half-split), over the whole row on every
    `global_attn_every_n_layers`-th block and over ±`local_attention / 2` tokens, block by block, on the
    rest, each kind with its own θ; a GeGLU feed-forward (`Wi` fused: value, then gate); `Output-Norm`.
    No positions table, no segments (`Input-Segment` taken and ignored), no pooler; the MLM head is a
    dense, GELU and norm before the tied token table. An encoder only, with the MLM head.

    Example:
    >>> family = ModernBertFamily()
    >>> config = family.config_class.from_dict({"vocab_size": 50368, "hidden_size": 768, "num_hidden_layers": 22,
    ...     "num_attention_heads": 12, "intermediate_size": 1152})
    >>> sum(row.params for row in family.layer_params(config))  # ModernBERT-base
    149014272
    """

    name = "modernbert"
    released_by, released_for = "ModernBERT", "transformers"
    model_type = "modernbert"
    config_class = ModernBertConfig
    graph = "kbert.models.modernbert.graph:ModernBertGraph"
    hf_class = "ModernBert"
    hf_prefix = "model"
    hf_head_scopes = ("head.", "decoder.")
    reads_segments = False
    classifier_hidden = naming.CLASSIFIER_HIDDEN  # ModernBertForSequenceClassification's head.dense

    def sequence_head(self, config: ModernBertConfig) -> SequenceHead:
        """`ModernBertForSequenceClassification`: the `classifier_pooling` (cls or mean), then its prediction head
        (the MLM head's layout: dense, `classifier_activation`, norm), then `classifier`."""
        return SequenceHead(config.classifier_pooling, ACTIVATIONS[config.classifier_activation],
                            config.classifier_bias, config.layer_norm_eps, config.norm_bias)

    def layer_params(self, config: ModernBertConfig, *, with_pool=False, with_nsp=False, with_mlm=False,
                     with_discriminator=False) -> List[LayerParams]:
        h, v, i = config.hidden_size, config.vocab_size, config.intermediate_size
        norm = ("2·H", 2 * h) if config.norm_bias else ("H", h)
        rows = [LayerParams(naming.EMBEDDING_TOKEN, "embeddings", "V·H", v * h,
                            "shared with the MLM output" if with_mlm else ""),
                LayerParams(naming.EMBEDDING_NORM, "embeddings", *norm)]
        attention = ("4·(H·H + H)", 4 * (h * h + h)) if config.attention_bias else ("4·H·H", 4 * h * h)
        mlp = ("3·H·I + 2·I + H", 3 * h * i + 2 * i + h) if config.mlp_bias else ("3·H·I", 3 * h * i)
        for index, kind in enumerate(config.layer_types):
            attention_name = naming.block(index, naming.ATTENTION)
            if index:  # the first block reads the embeddings' norm
                rows.append(LayerParams(f"{attention_name}-Norm", "encoder", *norm))
            rows += [LayerParams(attention_name, "encoder", *attention,
                                 f"{'global' if kind == 'full_attention' else 'local'}: fused query, key and value, "
                                 "then the output"),
                     LayerParams(naming.block(index, naming.FEED_FORWARD, "Norm"), "encoder", *norm),
                     LayerParams(naming.block(index, naming.FEED_FORWARD), "encoder", *mlp,
                                 "GeGLU: value and gate fused, then the output")]
        rows.append(LayerParams(naming.OUTPUT_NORM, "encoder", *norm, "the final norm"))
        if with_mlm:
            rows += [LayerParams(naming.MLM_DENSE, "heads", *(("H·H + H", h * h + h) if config.classifier_bias
                                                              else ("H·H", h * h))),
                     LayerParams(naming.MLM_NORM, "heads", *norm)]
            if config.decoder_bias:
                rows.append(LayerParams(naming.MLM_BIAS, "heads", "V", v,
                                        "output weights are Embedding-Token's, counted there"))
        return rows

    def weight_layers(self, num_blocks: int) -> List[str]:
        layers = [naming.EMBEDDING_TOKEN, naming.EMBEDDING_NORM]
        for index in range(num_blocks):
            layers += [naming.block(index, sublayer, suffix) for sublayer in (naming.ATTENTION, naming.FEED_FORWARD)
                       for suffix in ("Norm", "")]
        # The classifier's head before the MLM head's: both are `head.dense` and `head.norm` in Hugging Face's
        # files, and a file with `head.*` names is read as the MLM head's unless asked otherwise.
        return layers + [naming.OUTPUT_NORM, naming.CLASSIFIER_HIDDEN, naming.CLASSIFIER_NORM,
                         naming.CLASSIFIER_DENSE, naming.MLM_DENSE, naming.MLM_NORM, naming.MLM_BIAS]

    def outside_weights(self, layer: str) -> Dict[str, List[WeightName]]:
        return {
            naming.EMBEDDING_TOKEN: [embedding(layer, "embeddings/tok_embeddings", "embeddings.tok_embeddings", V)],
            naming.EMBEDDING_NORM: _norm(layer, "embeddings.norm"),
            naming.OUTPUT_NORM: _norm(layer, "final_norm"),
            naming.MLM_DENSE: linear(layer, "head.dense", (H, H), bias=True),
            naming.MLM_NORM: _norm(layer, "head.norm"),
            naming.CLASSIFIER_HIDDEN: linear(layer, "head.dense", (H, H), bias=True),
            naming.CLASSIFIER_NORM: _norm(layer, "head.norm"),
            naming.CLASSIFIER_DENSE: output_weights(layer, "", "classifier", (H, "num_labels")),
            naming.MLM_BIAS: [WeightName(f"{layer}/bias", "decoder/bias", "decoder.bias", False, False, (V,))],
        }

    def block_weights(self, layer: str, index: Optional[int], sublayer: str, is_norm: bool) -> List[WeightName]:
        hf = f"layers.{index or 0}"
        if is_norm:
            return _norm(layer, f"{hf}.{'attn_norm' if sublayer == naming.ATTENTION else 'mlp_norm'}")
        if sublayer == naming.ATTENTION:
            return (linear(f"{layer}/qkv", f"{hf}.attn.Wqkv", (H, THREE_H), bias=True)
                    + linear(f"{layer}/output", f"{hf}.attn.Wo", (H, H), bias=True))
        return (linear(f"{layer}/input", f"{hf}.mlp.Wi", (H, TWO_I), bias=True)
                + linear(f"{layer}/output", f"{hf}.mlp.Wo", (I, H), bias=True))
