"""The Keras graph of the rotary post-norm encoders (Jina-v3, GTE, NomicBERT).

    Input-Token, Input-Segment (read where the config has a segment table)
    Embedding-Token[, Embedding-Segment, Embedding-Token-Segment], Embedding-Norm, Embedding-Dropout
    Transformer-{i}-MultiHeadSelfAttention[-Dropout|-Add|-Norm]
    Transformer-{i}-FeedForward[-Dropout|-Add|-Norm]
    heads: Pooler, Pooler-Dense; MLM-Dense, MLM-Norm, MLM-Bias, MLM-Activation
"""

from __future__ import annotations

import keras

from kbert.layers import FeedForward, GatedFeedForward, RotarySelfAttention, get_activation
from kbert.models import naming
from kbert.models.bert.graph import BertGraph


class RotaryBertGraph(BertGraph):
    """BERT's post-norm graph without a position table: `RotarySelfAttention` (a fused query/key/value) in every block,
    BERT's feed-forward or a GLU (the family's `gated_mlp`), biases where the family has them."""

    def apply_embeddings(self, inputs):
        x = self.apply_token_and_segment(inputs)
        x = self.apply_norm(x, naming.EMBEDDING_NORM)
        return self.apply(x, keras.layers.Dropout, naming.EMBEDDING_DROPOUT, rate=self.config.hidden_dropout_prob)

    def apply_attention(self, x, name: str):
        config = self.config
        return self.apply(x, RotarySelfAttention, name, num_heads=config.num_attention_heads,
                          head_size=config.head_size, rope_theta=config.rope_theta,
                          rope_factor=config.rope_factor or 1.0, use_bias=self.family.attention_bias,
                          dropout=config.attention_probs_dropout_prob,
                          kernel_initializer=self.initializer(), **self.task_settings())

    def apply_feed_forward(self, x, name: str):
        config, family = self.config, self.family
        settings = dict(intermediate_size=config.intermediate_size, activation=get_activation(config.activation),
                        use_bias=family.mlp_bias, kernel_initializer=self.initializer())
        if not family.gated_mlp:
            return self.apply(x, FeedForward, name, **settings, **self.task_settings())
        return self.apply(x, GatedFeedForward, name, fused=False, output_bias=family.mlp_output_bias, **settings)
