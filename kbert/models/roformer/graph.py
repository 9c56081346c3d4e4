"""RoFormer's Keras graph: BERT's, with rotary positions entering every attention layer."""

from __future__ import annotations

from kbert.models import naming
from kbert.layers import SinusoidalPositionEmbedding
from kbert.models.bert.graph import BertGraph


class RoformerGraph(BertGraph):
    """No `Embedding-Position`; `Embedding-Rotary-Position` (on the first block's input) feeds every block."""

    position_encoding = "rotary"

    def make_position_bias(self, x):
        return self.apply(x, SinusoidalPositionEmbedding, naming.EMBEDDING_ROTARY_POSITION,
                          output_dim=self.config.head_size)
