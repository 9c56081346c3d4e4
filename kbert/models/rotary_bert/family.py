"""The rotary post-norm encoders' skeleton (`RotaryBertFamily`) that Jina-v3, GTE and NomicBERT build on: their
checkpoint names and parameter formulas, with the hooks each family sets.

Pure Python (no TensorFlow). The Keras graph is in `graph.py`.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional

from kbert.models import naming
from kbert.models.hub_family import HubFamily
from kbert.models.rotary_bert.config import RotaryBertConfig
from kbert.models.tables import H, I, LayerParams, WeightName, linear, norm

THREE_H, WHOLE = "3·hidden_size", (0, 1)


class RotaryBertFamily(HubFamily):
    """The skeleton of the rotary post-norm encoders (Jina-v3, GTE, NomicBERT): BERT's post-norm blocks and
    embeddings without a position table; `RotarySelfAttention` with a fused query/key/value projection.

    The hooks a family sets: `gated_mlp` (a GLU feed-forward; else BERT's), `attention_bias`, `mlp_bias` and
    `mlp_output_bias`, `mlm_activation` (None: the config's), and the checkpoint names `hf_names` and
    `mlp_names`: the hub's files, which transformers 5 also writes (it renames them as it loads). An encoder
    only.
    """

    config_class = RotaryBertConfig
    graph = "kbert.models.rotary_bert.graph:RotaryBertGraph"
    heads = ("with_pool", "with_mlm")
    gated_mlp = False
    attention_bias = mlp_bias = mlp_output_bias = True
    # The hub's (and transformers' on-disk) names: Jina's flash-attention XLM-R.
    hf_names = {"layers": "encoder.layers", "qkv": "mixer.Wqkv", "attention_output": "mixer.out_proj",
                "attention_norm": "norm1", "mlp_norm": "norm2", "embedding_norm": "emb_ln"}
    # The feed-forward's sublayers: (Hugging Face name, the slice of it: (i, n) the i-th of n).
    mlp_names = {"intermediate": ("mlp.fc1", WHOLE), "output": ("mlp.fc2", WHOLE)}

    def segment_input_size(self, config: RotaryBertConfig) -> int:
        return max(config.type_vocab_size, 1)  # taken without a table (type_vocab_size 0), as transformers does

    def segment_table(self, config: RotaryBertConfig) -> bool:
        return config.type_vocab_size > 0  # gte-base-en-v1.5 has none

    def position_params(self, config: RotaryBertConfig) -> List[LayerParams]:
        return []  # rotary positions: no table

    def block_params(self, config: RotaryBertConfig) -> List[LayerParams]:
        h, i = config.hidden_size, config.intermediate_size
        attention = ("4·(H·H + H)", 4 * (h * h + h)) if self.attention_bias else ("4·H·H", 4 * h * h)
        if not self.gated_mlp:
            mlp = ("H·I + I + I·H + H", 2 * h * i + i + h, "fc1, then fc2")
        else:
            formula, count = ("3·H·I + 2·I", 3 * h * i + 2 * i) if self.mlp_bias else ("3·H·I", 3 * h * i)
            if self.mlp_output_bias:
                formula, count = f"{formula} + H", count + h
            mlp = (formula, count, "gate_proj (activated) times up_proj, then down_proj")
        rows = []
        for index in range(config.num_hidden_layers):
            name = naming.block(index, naming.ATTENTION)
            ffn = naming.block(index, naming.FEED_FORWARD)
            rows += [LayerParams(name, "encoder", *attention, "query, key, value and output; rotary positions"),
                     LayerParams(f"{name}-Norm", "encoder", "2·H", 2 * h),
                     LayerParams(ffn, "encoder", *mlp),
                     LayerParams(f"{ffn}-Norm", "encoder", "2·H", 2 * h)]
        return rows

    def layer_weights(self, layer: str) -> List[WeightName]:
        if layer in (naming.EMBEDDING_POSITION, naming.EMBEDDING_MAPPING, naming.NSP_PROBA):
            return []
        if layer == naming.EMBEDDING_NORM:
            return norm(layer, self.hf_names["embedding_norm"].replace(".", "/"), self.hf_names["embedding_norm"])
        return super().layer_weights(layer)

    def block_weights(self, layer: str, index: Optional[int], sublayer: str, is_norm: bool) -> List[WeightName]:
        names = self.hf_names
        scope = f"{names['layers']}.{index or 0}"
        if is_norm:
            name = f"{scope}.{names['attention_norm' if sublayer == naming.ATTENTION else 'mlp_norm']}"
            return norm(layer, name.replace(".", "/"), name)
        if sublayer == naming.ATTENTION:
            return (linear(f"{layer}/qkv", f"{scope}.{names['qkv']}", (H, THREE_H), self.attention_bias)
                    + linear(f"{layer}/output", f"{scope}.{names['attention_output']}", (H, H), self.attention_bias))
        rows = []
        for sublayer_name, (hf, part) in self.mlp_names.items():
            bias = self.mlp_output_bias if sublayer_name == "output" else self.mlp_bias
            axes = (I, H) if sublayer_name == "output" else (H, I)
            rows += [dataclasses.replace(row, hf_part=part)
                     for row in linear(f"{layer}/{sublayer_name}", f"{scope}.{hf}", axes, bias)]
        return rows
