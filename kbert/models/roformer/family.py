"""RoFormer's checkpoint names and parameter formulas (`model="roformer"`)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, List, Mapping

from kbert.models.config import BertConfig, check_even_head_size
from kbert.models.bert.family import BertFamily
from kbert.models.tables import LayerParams


@dataclasses.dataclass(frozen=True)
class RoformerConfig(BertConfig):
    """BERT's keys; the rotation turns a head's features in pairs, so a head's size must be even."""

    family: ClassVar[str] = "roformer"

    @classmethod
    def check(cls, values: Mapping[str, Any], source: str) -> None:
        super().check(values, source)
        check_even_head_size(values, source, "RoFormer rotates a head's features in pairs")


class RoformerFamily(BertFamily):
    """RoFormer as bert4keras builds it: no position table; queries and keys rotated by position.

    `Embedding-Rotary-Position` computes the sinusoids (no weights); every
    attention layer rotates its queries and keys by them, so scores depend on
    relative positions. The checkpoint names are BERT's (`bert/…`).
    """

    name = "roformer"
    model_type = "roformer"
    graph = "kbert.models.roformer.graph:RoformerGraph"
    config_class = RoformerConfig
    knows_hf_names = False

    def position_params(self, config: BertConfig) -> List[LayerParams]:
        return []  # rotary positions have no weights
