"""EuroBERT's Keras graph.

    Input-Token, Input-Segment (taken, not read)
    Embedding-Token
    Transformer-{i}-MultiHeadSelfAttention-Norm, Transformer-{i}-MultiHeadSelfAttention[-Add]
    Transformer-{i}-FeedForward-Norm, Transformer-{i}-FeedForward[-Add]
    Output-Norm
    heads: MLM-Output (or the tied token table and MLM-Bias), MLM-Activation
"""

from __future__ import annotations

from typing import Optional

import keras

from kbert.layers import BiasAdd, GatedFeedForward, RMSNormalization, RotarySelfAttention, TokenEmbedding, get_activation
from kbert.models import naming
from kbert.models.eurobert.family import MLM_OUTPUT
from kbert.models.transformer import PreNormGraph


class EuroBertGraph(PreNormGraph):
    """Llama's pre-norm blocks, bidirectional: RMS norms, grouped-query `RotarySelfAttention`, a SiLU
    `GatedFeedForward`; no dropout (EuroBERT has none in its blocks)."""

    def apply_embeddings(self, inputs):
        config = self.config
        return self.apply(inputs[0], TokenEmbedding, naming.EMBEDDING_TOKEN, input_dim=config.vocab_size,
                          output_dim=config.hidden_size, embeddings_initializer=self.initializer(),
                          **self.token_padding())

    def apply_norm(self, x, name: str):
        return self.apply(x, RMSNormalization, name, epsilon=self.config.layer_norm_eps)

    def apply_main_layers(self, x, index: Optional[int]):
        config = self.config
        name = naming.block(index, naming.ATTENTION)
        attended = self.apply(self.apply_norm(x, f"{name}-Norm"), RotarySelfAttention, name,
                              **self.attention_settings(index))
        x = self.apply([x, attended], keras.layers.Add, f"{name}-Add")
        name = naming.block(index, naming.FEED_FORWARD)
        fed = self.apply(self.apply_norm(x, f"{name}-Norm"), GatedFeedForward, name, fused=False,
                         intermediate_size=config.intermediate_size, activation=get_activation(config.activation),
                         use_bias=config.mlp_bias, kernel_initializer=self.initializer())
        return self.apply([x, fed], keras.layers.Add, f"{name}-Add")

    def attention_settings(self, index: Optional[int]) -> dict:
        """Block `index`'s `RotarySelfAttention` keywords: four projections, grouped-query heads, the config's
        rotary base and scaling, biases and dropout."""
        config = self.config
        return dict(num_heads=config.num_attention_heads, head_size=config.head_size,
                    num_key_value_heads=config.key_value_heads, fused_qkv=False, rope_theta=config.rope_theta,
                    rope_factor=config.rope_factor or 1.0, use_bias=config.attention_bias,
                    dropout=config.attention_probs_dropout_prob, kernel_initializer=self.initializer())

    output_layer = MLM_OUTPUT  # the untied head's layer

    def lm_bias(self) -> bool:
        """Whether the head has a bias (EuroBERT's: where the feed-forward has them)."""
        return self.config.mlp_bias

    def apply_mlm_head(self, x):
        return self.apply(self.lm_logits(x), keras.layers.Activation, naming.MLM_ACTIVATION,
                          activation=self.heads.mlm)

    def lm_logits(self, x):
        """The vocabulary's logits: the tied token table (and its bias where `lm_bias`), or the head's own matrix."""
        config = self.config
        if config.tie_word_embeddings:
            x = self.layers[naming.EMBEDDING_TOKEN](x, reverse=True)
            return self.apply(x, BiasAdd, naming.MLM_BIAS) if self.lm_bias() else x
        return self.apply(x, keras.layers.Dense, self.output_layer, units=config.vocab_size, use_bias=self.lm_bias(),
                          kernel_initializer=self.initializer())
