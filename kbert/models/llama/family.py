"""Llama's checkpoint names and parameter formulas (`model="llama"`), the base of Qwen2's, Qwen3's and Mistral's.

Pure Python (no TensorFlow). The Keras graph is in `graph.py`.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from kbert.models import naming
from kbert.models.eurobert.family import pre_norm_layers
from kbert.models.heads import Heads, SequenceHead
from kbert.models.hub_family import HubFamily
from kbert.models.llama.config import LlamaConfig
from kbert.models.tables import H, I, V, LayerParams, WeightName, embedding, linear

LM_OUTPUT = "LM-Output"  # the untied LM head (lm_head)
Q, KV = "num_attention_heads·head_dim", "num_key_value_heads·head_dim"
HEAD = "head_dim"
# kbert's projections: transformers' names and their axes (grouped queries: fewer key and value heads)
ATTENTION_NAMES = {"query": ("q", (H, Q)), "key": ("k", (H, KV)), "value": ("v", (H, KV)), "output": ("o", (Q, H))}


def _rms_norm(path: str, hf: str, width: str = H) -> List[WeightName]:
    return [WeightName(f"{path}/scale", hf.replace(".", "/"), f"{hf}.weight", False, False, (width,))]


class LlamaFamily(HubFamily):
    """Llama as transformers builds it (`LlamaModel`, `LlamaForCausalLM`); a config with `model_type` llama gets it.

    Pre-norm blocks with RMS norms (`input_layernorm`, `post_attention_layernorm`, a final `norm`), causal
    `RotarySelfAttention` (bidirectional where `use_bidirectional_attention`) with grouped-query heads of
    `head_dim` features, a SiLU GLU (`gate_proj`, `up_proj`, `down_proj`); the token table alone (no segments,
    no norm); the LM head (`with_mlm`) one output matrix (`lm_head`), or the token table where
    `tie_word_embeddings`. A decoder family differs by its config class (`LlamaConfig`'s class keys: biases,
    the queries' and keys' norms, sliding windows).

    Example:
    >>> family = LlamaFamily()
    >>> config = family.config_class.from_dict({"vocab_size": 128256, "hidden_size": 2048, "num_hidden_layers": 16,
    ...     "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192,
    ...     "tie_word_embeddings": True})
    >>> sum(row.params for row in family.layer_params(config, with_mlm=True))  # Llama-3.2-1B
    1235814400
    """

    name = "llama"
    released_by, released_for = "Llama", "transformers"
    model_type = "llama"
    config_class = LlamaConfig
    graph = "kbert.models.llama.graph:LlamaGraph"
    hf_class = "Llama"
    hf_prefix = "model"
    hf_head_scopes = ("lm_head.", "score.")
    reads_segments = False
    hf_sequence_classifier = True  # LlamaForSequenceClassification: the last real token's `score`
    causal_lm = True  # a reranker scores with the LM head (sentence-transformers' LogitScore)

    embedding_note = ""  # what the token table's row says beside its sharing

    def sequence_head(self, config: LlamaConfig) -> SequenceHead:
        """`LlamaForSequenceClassification` (and Qwen2's, Qwen3's, Mistral's): the last real token's hidden state,
        after the final norm, straight to `score` (no bias)."""
        return SequenceHead(pooling="lasttoken", hidden=False, output_bias=False)

    def hf_architecture(self, heads: Heads) -> str:
        return f"{self.hf_class}ForCausalLM" if heads.mlm else f"{self.hf_class}Model"

    def layer_params(self, config: LlamaConfig, *, with_pool=False, with_nsp=False, with_mlm=False,
                     with_discriminator=False) -> List[LayerParams]:
        h, v, i = config.hidden_size, config.vocab_size, config.intermediate_size
        q, kv = config.num_attention_heads * config.head_size, config.key_value_heads * config.head_size
        tied = with_mlm and config.tie_word_embeddings
        note = "; ".join(filter(None, [self.embedding_note, "shared with the LM head" if tied else ""]))
        rows = [LayerParams(naming.EMBEDDING_TOKEN, "embeddings", "V·H", v * h, note)]
        attention = _attention_params(config, h, q, kv)
        mlp = (("3·H·I + 2·I + H", 3 * h * i + 2 * i + h) if config.mlp_bias else ("3·H·I", 3 * h * i)) + (
            f"gate_proj ({config.activation}) times up_proj, then down_proj",)
        for index in range(config.num_hidden_layers):
            rows += self.block_params(index, attention, mlp, h)
        rows.append(LayerParams(naming.OUTPUT_NORM, "encoder", "H", h, "the final norm"))
        if with_mlm and not tied:
            rows.append(LayerParams(LM_OUTPUT, "heads", "H·V", h * v, "lm_head, its own matrix"))
        return rows

    def block_params(self, index: int, attention: tuple, mlp: tuple, h: int) -> List[LayerParams]:
        """Block `index`'s rows: each sublayer's (formula, count, note) after its norm's."""
        rows = []
        for sublayer, params in ((naming.ATTENTION, attention), (naming.FEED_FORWARD, mlp)):
            name = naming.block(index, sublayer)
            rows += [LayerParams(f"{name}-Norm", "encoder", "H", h), LayerParams(name, "encoder", *params)]
        return rows

    def weight_layers(self, num_blocks: int) -> List[str]:
        return pre_norm_layers(num_blocks) + [LM_OUTPUT, naming.CLASSIFIER_DENSE]

    def outside_weights(self, layer: str) -> Dict[str, List[WeightName]]:
        return {
            naming.EMBEDDING_TOKEN: [embedding(layer, "embed_tokens", "embed_tokens", V)],
            naming.OUTPUT_NORM: _rms_norm(layer, "norm"),
            LM_OUTPUT: [WeightName(f"{layer}/kernel", "lm_head/kernel", "lm_head.weight", False, True, (H, V))],
            naming.CLASSIFIER_DENSE: [WeightName(f"{layer}/kernel", "score/kernel", "score.weight", False, True,
                                                 (H, "num_labels"))],
        }

    def block_weights(self, layer: str, index: Optional[int], sublayer: str, is_norm: bool) -> List[WeightName]:
        scope = f"layers.{index or 0}"
        if is_norm:
            norm = "input_layernorm" if sublayer == naming.ATTENTION else "post_attention_layernorm"
            return _rms_norm(layer, f"{scope}.{norm}")
        if sublayer == naming.ATTENTION:
            # every projection's bias is listed: the loader reads those the built layer has
            rows = [row for part, (short, axes) in ATTENTION_NAMES.items()
                    for row in linear(f"{layer}/{part}", f"{scope}.self_attn.{short}_proj", axes, True)]
            return rows + [row for part in ("query", "key")
                           for row in _rms_norm(f"{layer}/{part}_norm", f"{scope}.self_attn.{part[0]}_norm", HEAD)]
        return (linear(f"{layer}/gate", f"{scope}.mlp.gate_proj", (H, I), True)
                + linear(f"{layer}/up", f"{scope}.mlp.up_proj", (H, I), True)
                + linear(f"{layer}/output", f"{scope}.mlp.down_proj", (I, H), True))


def _attention_params(config: LlamaConfig, h: int, q: int, kv: int) -> tuple:
    """(formula, count, note) of one block's attention: four projections, their biases, the heads' norms."""
    formula, count = "2·H·A·K + 2·H·G·K", 2 * h * q + 2 * h * kv
    output_bias = config.attention_bias if config.output_bias is None else config.output_bias
    if config.attention_bias:
        formula, count = formula + " + A·K + 2·G·K", count + q + 2 * kv
    if output_bias:
        formula, count = formula + " + H", count + h
    if config.qk_norm:
        formula, count = formula + " + 2·K", count + 2 * config.head_size
    note = "q_proj and o_proj H·A·K, k_proj and v_proj H·G·K (G key and value heads shared by the A query heads)"
    return formula, count, note
