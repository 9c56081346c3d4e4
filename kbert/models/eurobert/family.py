"""EuroBERT's checkpoint names and parameter formulas (`model="eurobert"`).

Pure Python (no TensorFlow). The Keras graph is in `graph.py`.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from kbert.models import naming
from kbert.models.hub_family import HubFamily
from kbert.models.eurobert.config import EuroBertConfig
from kbert.models.heads import SequenceHead
from kbert.models.tables import H, I, V, LayerParams, WeightName, embedding, linear, output_weights

MLM_OUTPUT = "MLM-Output"  # the untied output matrix (lm_head)
KV = "num_key_value_heads·head_size"
# kbert's projections: transformers' names and their axes (grouped queries: fewer key and value heads)
ATTENTION_NAMES = {"query": ("q", (H, H)), "key": ("k", (H, KV)), "value": ("v", (H, KV)), "output": ("o", (H, H))}


def _rms_norm(path: str, hf: str) -> List[WeightName]:
    return [WeightName(f"{path}/scale", hf.replace(".", "/"), f"{hf}.weight", False, False, (H,))]


def pre_norm_layers(num_blocks: int) -> List[str]:
    """The layers with weights of a Llama-style stack, heads left out: the token table, each block's two norms and
    two sublayers, the final norm."""
    layers = [naming.EMBEDDING_TOKEN]
    for index in range(num_blocks):
        layers += [naming.block(index, sublayer, suffix) for sublayer in (naming.ATTENTION, naming.FEED_FORWARD)
                   for suffix in ("Norm", "")]
    return layers + [naming.OUTPUT_NORM]


class EuroBertFamily(HubFamily):
    """EuroBERT as transformers builds it (`EuroBertModel`, `EuroBertForMaskedLM`); a config with `model_type`
    eurobert gets it.

    Llama's blocks, bidirectional: pre-norm with RMS norms (`input_layernorm`, `post_attention_layernorm`, a
    final `norm`), `RotarySelfAttention` with four projections and grouped-query attention
    (`num_key_value_heads`), a SiLU GLU (`gate_proj`, `up_proj`, `down_proj`); the token table alone (no
    segments: `Input-Segment` taken and ignored, no norm); the MLM head one output matrix (`lm_head`, untied
    unless `tie_word_embeddings`). An encoder only, with the MLM head.

    Example:
    >>> family = EuroBertFamily()
    >>> config = family.config_class.from_dict({"vocab_size": 128256, "hidden_size": 768, "num_hidden_layers": 12,
    ...     "num_attention_heads": 12, "intermediate_size": 3072})
    >>> sum(row.params for row in family.layer_params(config, with_mlm=True))  # EuroBERT-210m
    310266624
    """

    name = "eurobert"
    released_by, released_for = "EuroBERT", "transformers"
    model_type = "eurobert"
    config_class = EuroBertConfig
    graph = "kbert.models.eurobert.graph:EuroBertGraph"
    hf_class = "EuroBert"
    hf_prefix = "model"
    hf_head_scopes = ("lm_head.", "dense.")  # the MLM head's; the sequence classifier's dense
    reads_segments = False
    classifier_hidden = naming.CLASSIFIER_HIDDEN  # EuroBertForSequenceClassification's dense

    def sequence_head(self, config: EuroBertConfig) -> SequenceHead:
        """`EuroBertForSequenceClassification`: `classifier_pooling` bos (the first token) or mean, then `dense`
        and GELU, then `classifier`; or late: `dense` and GELU on every token, their mean, then `classifier`
        (the mean of each token's logits, which transformers takes, as `classifier` is linear)."""
        return SequenceHead({"bos": "cls"}.get(config.classifier_pooling, config.classifier_pooling), "gelu")

    def layer_params(self, config: EuroBertConfig, *, with_pool=False, with_nsp=False, with_mlm=False,
                     with_discriminator=False) -> List[LayerParams]:
        h, v, i = config.hidden_size, config.vocab_size, config.intermediate_size
        kv = config.key_value_heads * config.head_size
        tied = with_mlm and config.tie_word_embeddings
        rows = [LayerParams(naming.EMBEDDING_TOKEN, "embeddings", "V·H", v * h,
                            "shared with the MLM output" if tied else "")]
        bias = config.attention_bias
        attention = (("2·H·H + 2·H·K + 2·K + 2·H", 2 * h * h + 2 * h * kv + 2 * kv + 2 * h) if bias
                     else ("2·H·H + 2·H·K", 2 * h * h + 2 * h * kv))
        mlp = ("3·H·I + 2·I + H", 3 * h * i + 2 * i + h) if config.mlp_bias else ("3·H·I", 3 * h * i)
        for index in range(config.num_hidden_layers):
            name, ffn = naming.block(index, naming.ATTENTION), naming.block(index, naming.FEED_FORWARD)
            rows += [LayerParams(f"{name}-Norm", "encoder", "H", h),
                     LayerParams(name, "encoder", *attention,
                                 f"query and output H·H, key and value H·K (K = {config.key_value_heads} heads)"),
                     LayerParams(f"{ffn}-Norm", "encoder", "H", h),
                     LayerParams(ffn, "encoder", *mlp, "gate_proj (SiLU) times up_proj, then down_proj")]
        rows.append(LayerParams(naming.OUTPUT_NORM, "encoder", "H", h, "the final norm"))
        if with_mlm and tied:
            rows += [LayerParams(naming.MLM_BIAS, "heads", "V", v)] if config.mlp_bias else []
        elif with_mlm:
            rows.append(LayerParams(MLM_OUTPUT, "heads", *(("H·V + V", h * v + v) if config.mlp_bias
                                                           else ("H·V", h * v)), "lm_head, its own matrix"))
        return rows

    def weight_layers(self, num_blocks: int) -> List[str]:
        return pre_norm_layers(num_blocks) + [naming.MLM_BIAS, MLM_OUTPUT, naming.CLASSIFIER_HIDDEN,
                                              naming.CLASSIFIER_DENSE]

    def outside_weights(self, layer: str) -> Dict[str, List[WeightName]]:
        return {
            naming.EMBEDDING_TOKEN: [embedding(layer, "embed_tokens", "embed_tokens", V)],
            naming.OUTPUT_NORM: _rms_norm(layer, "norm"),
            naming.MLM_BIAS: [WeightName(f"{layer}/bias", "lm_head/bias", "lm_head.bias", False, False, (V,))],
            MLM_OUTPUT: [WeightName(f"{layer}/kernel", "lm_head/kernel", "lm_head.weight", False, True, (H, V)),
                         WeightName(f"{layer}/bias", "lm_head/bias", "lm_head.bias", False, False, (V,))],
            naming.CLASSIFIER_HIDDEN: linear(layer, "dense", (H, H), bias=True),
            naming.CLASSIFIER_DENSE: output_weights(layer, "", "classifier", (H, "num_labels")),
        }

    def block_weights(self, layer: str, index: Optional[int], sublayer: str, is_norm: bool) -> List[WeightName]:
        scope = f"layers.{index or 0}"
        if is_norm:
            return _rms_norm(layer, f"{scope}.{'input_layernorm' if sublayer == naming.ATTENTION else 'post_attention_layernorm'}")
        if sublayer == naming.ATTENTION:
            return [row for part, (short, axes) in ATTENTION_NAMES.items()
                    for row in linear(f"{layer}/{part}", f"{scope}.self_attn.{short}_proj", axes, True)]
        return (linear(f"{layer}/gate", f"{scope}.mlp.gate_proj", (H, I), True)
                + linear(f"{layer}/up", f"{scope}.mlp.up_proj", (H, I), True)
                + linear(f"{layer}/output", f"{scope}.mlp.down_proj", (I, H), True))
