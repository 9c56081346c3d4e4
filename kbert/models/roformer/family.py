"""RoFormer's checkpoint names and parameter formulas (`model="roformer"`)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Dict, List, Mapping, Optional

import numpy as np

from kbert.errors import ConfigError
from kbert.models import naming
from kbert.models.config import BertConfig, check_even_head_size
from kbert.models.bert.family import BertFamily
from kbert.models.heads import Heads
from kbert.models.tables import LayerParams, WeightName, hf_suffix


@dataclasses.dataclass(frozen=True)
class RoformerConfig(BertConfig):
    """BERT's keys; the rotation turns a head's features in pairs, so a head's size must be even."""

    family: ClassVar[str] = "roformer"

    @classmethod
    def check(cls, values: Mapping[str, Any], source: str) -> None:
        super().check(values, source)
        check_even_head_size(values, source, "RoFormer rotates a head's features in pairs")

    @classmethod
    def check_unread_keys(cls, values: Mapping[str, Any], source: str) -> None:
        if values.get("rotary_value", False) is not False:
            raise ConfigError(f"{source}: key 'rotary_value': kbert's RoFormer, as bert4keras's and the released "
                              f"RoFormer models, rotates queries and keys only (expected false, got "
                              f"{values['rotary_value']!r})")


class RoformerFamily(BertFamily):
    """RoFormer as bert4keras builds it: no position table; queries and keys rotated by position.

    `Embedding-Rotary-Position` computes the sinusoids (no weights); every
    attention layer rotates its queries and keys by them, so scores depend on
    relative positions. The checkpoint names are BERT's (`bert/…`).
    """

    hf_sequence_classifier = False  # no Hugging Face sequence classifier kbert writes

    name = "roformer"
    model_type = "roformer"
    graph = "kbert.models.roformer.graph:RoformerGraph"
    config_class = RoformerConfig
    hf_model_type = "roformer"
    hf_class = "RoFormer"
    hf_prefix = "roformer"

    @staticmethod
    def named_in(names: List[str]) -> Optional[str]:
        """RoFormer's Hugging Face names (`embed_positions`); its Google ones are BERT's."""
        return "roformer" if "encoder.embed_positions.weight" in names else None

    def layer_weights(self, layer: str) -> List[WeightName]:
        rows = super().layer_weights(layer)
        if layer == naming.EMBEDDING_MAPPING:
            return [row.renamed(row.google, f"embeddings_project.{hf_suffix(row)}") for row in rows]
        return rows

    def hf_computed_tensors(self, config: BertConfig) -> Dict[str, np.ndarray]:
        """Hugging Face's stored sinusoids (kbert computes them in `Embedding-Rotary-Position`): for
        position p and pair i of a head's K features, sin(p / 10000^(2i/K)) in the first half of a
        row, cos in the second."""
        angles = np.arange(config.max_position_embeddings)[:, None] / np.power(
            10000, 2 * np.arange(config.head_size // 2) / config.head_size)
        return {"encoder.embed_positions.weight": np.concatenate([np.sin(angles), np.cos(angles)], 1)
                .astype(np.float32)}

    def hf_config(self, config, heads: Heads) -> dict:
        """BERT's keys; values are not rotated (bert4keras's RoFormer, Hugging Face's `rotary_value` false)."""
        return {**super().hf_config(config, heads), "embedding_size": config.embedding_width,
                "rotary_value": False}

    def position_params(self, config: BertConfig) -> List[LayerParams]:
        return []  # rotary positions have no weights
