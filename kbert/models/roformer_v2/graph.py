"""RoFormer-v2's Keras graph: RoFormer's, without biases, with the weightless norm and its own MLM head."""

from __future__ import annotations

import keras

from kbert.layers import DepthScaledTruncatedNormal, RMSNormalization
from kbert.models import naming
from kbert.models.roformer.graph import RoformerGraph

# bert4keras's RoFormer-v2 norm has Keras 2's default epsilon.
NORM_EPSILON = 1e-7


class RoformerV2Graph(RoformerGraph):
    """Token + segment embeddings, Dropout, then the norm; bias-free blocks; the tied MLM output."""

    use_bias = False

    def initializer(self):
        return DepthScaledTruncatedNormal(num_layers=self.config.num_hidden_layers)

    def apply_embeddings(self, inputs):
        x = self.apply_token_and_segment(inputs)
        x = self.apply(x, keras.layers.Dropout, naming.EMBEDDING_DROPOUT, rate=self.config.hidden_dropout_prob)
        x = self.apply_norm(x, naming.EMBEDDING_NORM)
        return self.apply_mapping(x)

    def apply_norm(self, x, name: str):
        return self.apply(x, RMSNormalization, name, epsilon=NORM_EPSILON, scale=False)

    def apply_final_layers(self, x):
        if not self.heads.mlm:
            return x
        if self.family.has_mapping(self.config):
            x = self.apply(x, keras.layers.Dense, naming.OUTPUT_MAPPING, units=self.config.embedding_width,
                           use_bias=False, kernel_initializer=self.initializer())
        x = self.apply(x, keras.layers.Dropout, naming.OUTPUT_MLM_DROPOUT, rate=self.config.hidden_dropout_prob)
        x = self.layers[naming.EMBEDDING_TOKEN](x, reverse=True)
        return self.apply(x, keras.layers.Activation, naming.OUTPUT_MLM_ACTIVATION, activation=self.heads.mlm)
