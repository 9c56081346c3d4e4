"""MPNet's Keras graph: Hugging Face RoBERTa's embeddings (no segments) and a relative position bias for every
layer.

    Input-Token, Input-Segment (taken, not read)
    Embedding-Token, Embedding-Position, Embedding-Norm, Embedding-Dropout
    Embedding-Relative-Position (one [q, k, heads] bias, made once)
    Transformer-{i}-MultiHeadSelfAttention[-Dropout|-Add|-Norm]
    Transformer-{i}-FeedForward[-Dropout|-Add|-Norm]
"""

from __future__ import annotations

from kbert.layers import RobertaPositionEmbedding, T5RelativePositionBias
from kbert.models import naming
from kbert.models.bert.graph import BertGraph
from kbert.models.mpnet.config import BUCKETS

# transformers' MPNet: distances from 128 on share a bucket.
MAX_DISTANCE = 128


class MpnetGraph(BertGraph):
    """BERT's graph with absolute positions after the padding id and T5's bucketed bias on the scaled scores."""

    position_encoding = "t5_relative"

    def apply_positions(self, x):
        """Learned absolute positions, numbered from `pad_token_id + 1` over the real tokens, as RoBERTa's."""
        return self.apply(x, RobertaPositionEmbedding, naming.EMBEDDING_POSITION,
                          max_length=self.config.max_position_embeddings, padding_idx=self.config.pad_token_id,
                          embeddings_initializer=self.initializer())

    def make_position_bias(self, x):
        return self.apply([x, x], T5RelativePositionBias, naming.EMBEDDING_RELATIVE_POSITION, num_buckets=BUCKETS,
                          num_heads=self.config.num_attention_heads, max_distance=MAX_DISTANCE, bidirectional=True,
                          embeddings_initializer=self.initializer())
