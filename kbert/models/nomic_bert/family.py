"""NomicBERT's checkpoint names and parameter formulas (`model="nomic_bert"`: nomic-embed-text).

Pure Python (no TensorFlow). The graph is the rotary post-norm encoders' (`kbert.models.rotary_bert.graph`).
"""

from __future__ import annotations

from typing import List

from kbert.models import naming
from kbert.models.nomic_bert.config import NomicBertConfig
from kbert.models.rotary_bert.family import RotaryBertFamily
from kbert.models.tables import WeightName, norm


class NomicBertFamily(RotaryBertFamily):
    """NomicBERT as transformers builds it (`NomicBertModel`, `NomicBertForMaskedLM`,
    `NomicBertForSequenceClassification`); a config with `model_type` nomic_bert gets it.

    The rotary post-norm encoder (`RotaryBertFamily`) without a bias in attention or feed-forward (a SwiGLU);
    BERT's pooler, classifier and MLM head (at `cls.predictions`, its norm named `layer_norm`) under
    `nomic_bert.`. Its files' names are Nomic's own (`encoder.layers.{i}.attn.Wqkv`, `mlp.fc11` the linear
    half, `mlp.fc12` the activated one).

    Example:
    >>> family = NomicBertFamily()
    >>> config = family.config_class.from_dict({"vocab_size": 30528, "hidden_size": 768, "num_hidden_layers": 12,
    ...     "num_attention_heads": 12, "intermediate_size": 3072})
    >>> sum(row.params for row in family.layer_params(config))  # nomic-embed-text-v1.5
    136731648
    """

    name = "nomic_bert"
    released_by, released_for = "NomicBERT", "transformers"
    model_type = "nomic_bert"
    config_class = NomicBertConfig
    hf_class = "NomicBert"
    hf_prefix = "nomic_bert"
    gated_mlp = True
    attention_bias = mlp_bias = mlp_output_bias = False
    hf_names = {"layers": "encoder.layers", "qkv": "attn.Wqkv", "attention_output": "attn.out_proj",
                "attention_norm": "norm1", "mlp_norm": "norm2", "embedding_norm": "emb_ln"}
    mlp_names = {"gate": ("mlp.fc12", (0, 1)), "up": ("mlp.fc11", (0, 1)), "output": ("mlp.fc2", (0, 1))}

    def layer_weights(self, layer: str) -> List[WeightName]:
        if layer == naming.MLM_NORM:
            return norm(layer, "cls/predictions/transform/layer_norm", "cls.predictions.transform.layer_norm")
        return super().layer_weights(layer)
