"""NEZHA's Keras graph: BERT's, with relative positions entering every attention layer."""

from __future__ import annotations

from kbert.models import naming
from kbert.layers import RelativePositionEmbedding
from kbert.models.bert.graph import BertGraph
from kbert.models.nezha.family import TABLE_DISTANCE


class NezhaGraph(BertGraph):
    """No `Embedding-Position`; `Embedding-Relative-Position` (on the first block's input) feeds every block."""

    position_encoding = "relative"

    def make_position_bias(self, x):
        return self.apply([x, x], RelativePositionEmbedding, naming.EMBEDDING_RELATIVE_POSITION,
                          input_dim=2 * TABLE_DISTANCE + 1, output_dim=self.config.head_size)
