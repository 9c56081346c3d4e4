"""GTE's checkpoint names and parameter formulas (`model="gte"`: gte-base-en-v1.5, gte-multilingual-base).

Pure Python (no TensorFlow). The graph is the rotary post-norm encoders' (`kbert.models.rotary_bert.graph`).
"""

from __future__ import annotations

from typing import List

from kbert.models import naming
from kbert.models.gte.config import GteConfig
from kbert.models.rotary_bert.family import RotaryBertFamily
from kbert.models.tables import V, WeightName, dense, norm


class GteFamily(RotaryBertFamily):
    """GTE as transformers builds it (`GteModel`, `GteForMaskedLM`, `GteForSequenceClassification`); a config
    with `model_type` gte gets it.

    The rotary post-norm encoder (`RotaryBertFamily`) with biased attention and a GELU GLU whose only bias is
    `down_proj`'s; no segment table where `type_vocab_size` is 0 (gte-base-en-v1.5); BERT's pooler and
    classifier under `gte.`; XLM-R's MLM head (`lm_head.dense`, `lm_head.norm`, GELU) whose output bias is
    `lm_head.decoder.bias`. Its files' names are Alibaba's own (`encoder.layer.{i}.attention.qkv_proj`,
    `mlp.up_gate_proj`: up, then gate).

    Example:
    >>> family = GteFamily()
    >>> config = family.config_class.from_dict({"vocab_size": 30528, "hidden_size": 768, "num_hidden_layers": 12,
    ...     "num_attention_heads": 12, "intermediate_size": 3072, "type_vocab_size": 0})
    >>> sum(row.params for row in family.layer_params(config))  # gte-base-en-v1.5
    136776192
    """

    name = "gte"
    released_by, released_for = "GTE", "transformers"
    # Alibaba's own GTE v1.5 / mGTE files: model_type "new", rotary positions (transformers 5's gte).
    position_types = (("new", "rope", "Alibaba's GTE"),)
    model_type = "gte"
    config_class = GteConfig
    hf_class = "Gte"
    hf_prefix = "gte"
    hf_prefix_aliases = ("new",)  # Alibaba's own task models' files
    hf_head_scopes = ("lm_head.",)
    gated_mlp = True
    mlp_bias = False
    mlm_activation = "gelu"
    hf_names = {"layers": "encoder.layer", "qkv": "attention.qkv_proj", "attention_output": "attention.o_proj",
                "attention_norm": "attn_ln", "mlp_norm": "mlp_ln", "embedding_norm": "embeddings.LayerNorm"}
    # One fused up_gate_proj: the linear half (up) first, the activated half (gate) second.
    mlp_names = {"gate": ("mlp.up_gate_proj", (1, 2)), "up": ("mlp.up_gate_proj", (0, 2)),
                 "output": ("mlp.down_proj", (0, 1))}

    def layer_weights(self, layer: str) -> List[WeightName]:
        heads = {
            naming.MLM_DENSE: dense(layer, "lm_head/dense", "lm_head.dense", ("hidden_size", "hidden_size")),
            naming.MLM_NORM: norm(layer, "lm_head/norm", "lm_head.norm"),
            naming.MLM_BIAS: [WeightName(f"{layer}/bias", "lm_head/decoder/bias", "lm_head.decoder.bias", False,
                                         False, (V,))],
        }
        return heads.get(layer) or super().layer_weights(layer)
