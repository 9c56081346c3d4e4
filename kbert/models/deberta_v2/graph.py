"""DeBERTa-v2/v3's Keras graph: BERT's, with `DisentangledSelfAttention` over one relative position table.

    Input-Token, Input-Segment (read where the config has a segment table)
    Embedding-Token[, Embedding-Segment, Embedding-Token-Segment][, Embedding-Position][, Embedding-Mapping],
    Embedding-Norm, Embedding-Dropout
    Embedding-Relative-Position (the table every layer reads)
    Transformer-{i}-MultiHeadSelfAttention[-Dropout|-Add|-Norm]
    Transformer-{i}-FeedForward[-Dropout|-Add|-Norm]
    heads: MLM-Dense, MLM-Norm, MLM-Bias, MLM-Activation
"""

from __future__ import annotations

import keras

from kbert.layers import (DisentangledSelfAttention, Embedding, MaskedAdd, PositionEmbedding, RelativePositionTable,
                          TokenEmbedding, ZeroingDropout)
from kbert.models import naming
from kbert.models.bert.graph import BertGraph


class DebertaV2Graph(BertGraph):
    """BERT's post-norm graph; embeddings in DeBERTa's order (token, segment, absolute positions where
    `position_biased_input`, the E → H mapping without a bias, then the norm) and disentangled attention."""

    def apply_embeddings(self, inputs):
        config = self.config
        x = self.apply(inputs[0], TokenEmbedding, naming.EMBEDDING_TOKEN, input_dim=config.vocab_size, output_dim=config.embedding_width,
                       embeddings_initializer=self.initializer(), **self.token_padding())
        if config.type_vocab_size:
            segments = self.apply(inputs[1], Embedding, naming.EMBEDDING_SEGMENT, input_dim=config.type_vocab_size,
                                  output_dim=config.embedding_width, size_key="type_vocab_size",
                                  embeddings_initializer=self.initializer())
            x = self.apply([x, segments], MaskedAdd, naming.EMBEDDING_TOKEN_SEGMENT)
        if config.position_biased_input:
            x = self.apply(x, PositionEmbedding, naming.EMBEDDING_POSITION, max_length=config.max_position_embeddings,
                           embeddings_initializer=self.initializer())
        if self.family.has_mapping(config):
            x = self.apply(x, keras.layers.Dense, naming.EMBEDDING_MAPPING, units=config.hidden_size, use_bias=False,
                           kernel_initializer=self.initializer())
        x = self.apply_norm(x, naming.EMBEDDING_NORM)
        # hidden positions enter the blocks as zeros, as transformers multiplies DeBERTa's embeddings by the mask
        return self.apply(x, ZeroingDropout, naming.EMBEDDING_DROPOUT, rate=config.hidden_dropout_prob)

    def apply_attention(self, x, name: str):
        config = self.config
        if self.position_bias is None:
            self.position_bias = self.apply(x, RelativePositionTable, naming.EMBEDDING_RELATIVE_POSITION,
                                            span=config.span, width=config.hidden_size,
                                            normalize=config.norm_rel_ebd == "layer_norm",
                                            epsilon=config.layer_norm_eps, embeddings_initializer=self.initializer())
        return self.apply([x, self.position_bias], DisentangledSelfAttention, name,
                          num_heads=config.num_attention_heads, head_size=config.head_size, span=config.span,
                          buckets=config.position_buckets, max_position=config.relative_reach,
                          c2p="c2p" in config.pos_att_type, p2c="p2c" in config.pos_att_type,
                          dropout=config.attention_probs_dropout_prob, kernel_initializer=self.initializer())
