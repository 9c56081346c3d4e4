"""NomicBERT's config, checkpoint names and parameter formulas (`model="nomic_bert"`: nomic-embed-text).

Pure Python (no TensorFlow). The graph is the rotary post-norm encoders' (`kbert.models.jina_v3.graph`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, List

from kbert.models import naming
from kbert.models.jina_v3.config import RotaryBertConfig
from kbert.models.jina_v3.family import RotaryBertFamily
from kbert.models.tables import WeightName, norm


@dataclasses.dataclass(frozen=True)
class NomicBertConfig(RotaryBertConfig):
    """`RotaryBertConfig` with NomicBERT's defaults (θ 1,000, SiLU, no dropout, 2,048 positions, padding id 0).

    Example:
    >>> NomicBertConfig.from_dict({"vocab_size": 30528, "hidden_size": 768, "num_hidden_layers": 12,
    ...     "num_attention_heads": 12, "intermediate_size": 3072}).hidden_act
    'silu'
    """

    family: ClassVar[str] = "nomic_bert"

    hidden_act: str = "silu"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 2048
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: Any = 0
    rope_theta: float = 1000.0


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
    model_type = hf_model_type = "nomic_bert"
    config_class = NomicBertConfig
    hf_class = "NomicBert"
    hf_prefix = "nomic_bert"
    google_absent = "NomicBERT was released for transformers, never as a Google TF checkpoint"
    gated_mlp = True
    attention_bias = mlp_bias = mlp_output_bias = False
    hf_names = {"layers": "encoder.layers", "qkv": "attn.Wqkv", "attention_output": "attn.out_proj",
                "attention_norm": "norm1", "mlp_norm": "norm2", "embedding_norm": "emb_ln"}
    mlp_names = {"gate": ("mlp.fc12", (0, 1)), "up": ("mlp.fc11", (0, 1)), "output": ("mlp.fc2", (0, 1))}

    def layer_weights(self, layer: str) -> List[WeightName]:
        if layer == naming.MLM_NORM:
            return norm(layer, "cls/predictions/transform/layer_norm", "cls.predictions.transform.layer_norm")
        return super().layer_weights(layer)
