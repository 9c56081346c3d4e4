"""RoFormer's checkpoint names and parameter formulas (`model="roformer"`)."""

from __future__ import annotations

from typing import List

from kbert.models.config import BertConfig
from kbert.models.bert.family import BertFamily
from kbert.models.tables import LayerParams


class RoformerFamily(BertFamily):
    """RoFormer as bert4keras builds it: no position table; queries and keys rotated by position.

    `Embedding-Rotary-Position` computes the sinusoids (no weights); every
    attention layer rotates its queries and keys by them, so scores depend on
    relative positions. The checkpoint names are BERT's (`bert/…`).
    """

    name = "roformer"
    model_type = "roformer"
    graph = "kbert.models.roformer.graph:RoformerGraph"
    knows_hf_names = False

    def position_params(self, config: BertConfig) -> List[LayerParams]:
        return []  # rotary positions have no weights
