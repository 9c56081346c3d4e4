"""ModernBERT's Keras graph.

    Input-Token, Input-Segment (taken, not read)
    Embedding-Token, Embedding-Norm, Embedding-Dropout
    Transformer-{i}-MultiHeadSelfAttention-Norm (not in block 0), Transformer-{i}-MultiHeadSelfAttention[-Dropout|-Add]
    Transformer-{i}-FeedForward-Norm, Transformer-{i}-FeedForward[-Dropout|-Add]
    Output-Norm
    heads: MLM-Dense, MLM-Norm, MLM-Bias, MLM-Activation
"""

from __future__ import annotations

from typing import Optional

import keras

from kbert.layers import BiasAdd, GatedFeedForward, RotarySelfAttention, TokenEmbedding, get_activation
from kbert.models import naming
from kbert.models.config import ACTIVATIONS
from kbert.models.modernbert.config import GLOBAL
from kbert.models.transformer import PreNormGraph


class ModernBertGraph(PreNormGraph):
    """Pre-norm blocks of `RotarySelfAttention` (global or windowed by the config's `layer_types`) and
    `GatedFeedForward`, without biases unless the config asks for them."""

    def apply_embeddings(self, inputs):
        config = self.config
        x = self.apply(inputs[0], TokenEmbedding, naming.EMBEDDING_TOKEN, input_dim=config.vocab_size,
                       output_dim=config.hidden_size, embeddings_initializer=self.initializer(), **self.token_padding())
        x = self.apply_norm(x, naming.EMBEDDING_NORM)
        return self.apply(x, keras.layers.Dropout, naming.EMBEDDING_DROPOUT, rate=config.hidden_dropout_prob)

    def apply_norm(self, x, name: str):
        return self.apply(x, keras.layers.LayerNormalization, name, epsilon=self.config.layer_norm_eps,
                          center=self.config.norm_bias)

    def apply_main_layers(self, x, index: Optional[int]):
        config = self.config
        name = naming.block(index, naming.ATTENTION)
        global_ = config.layer_types[index] == GLOBAL
        normed = self.apply_norm(x, f"{name}-Norm") if index else x
        attended = self.apply(normed, RotarySelfAttention, name, num_heads=config.num_attention_heads,
                              head_size=config.head_size, use_bias=config.attention_bias,
                              rope_theta=config.global_rope_theta if global_ else config.local_rope_theta,
                              window=None if global_ else config.window, dropout=config.attention_probs_dropout_prob,
                              kernel_initializer=self.initializer())
        x = self.apply_residual(name, x, attended)
        name = naming.block(index, naming.FEED_FORWARD)
        fed = self.apply(self.apply_norm(x, f"{name}-Norm"), GatedFeedForward, name,
                         intermediate_size=config.intermediate_size, activation=get_activation(config.activation),
                         use_bias=config.mlp_bias, kernel_initializer=self.initializer())
        return self.apply_residual(name, x, fed)

    def apply_residual(self, prefix: str, shortcut, x):
        x = self.apply(x, keras.layers.Dropout, f"{prefix}-Dropout", rate=self.config.hidden_dropout_prob)
        return self.apply([shortcut, x], keras.layers.Add, f"{prefix}-Add")

    def apply_mlm_head(self, x):
        config = self.config
        x = self.apply(x, keras.layers.Dense, naming.MLM_DENSE, units=config.hidden_size,
                       activation=get_activation(ACTIVATIONS[config.classifier_activation]), use_bias=config.classifier_bias,
                       kernel_initializer=self.initializer())
        x = self.apply_norm(x, naming.MLM_NORM)
        x = self.layers[naming.EMBEDDING_TOKEN](x, reverse=True)
        if config.decoder_bias:
            x = self.apply(x, BiasAdd, naming.MLM_BIAS)
        return self.apply(x, keras.layers.Activation, naming.MLM_ACTIVATION, activation=self.heads.mlm)
