"""ELECTRA's Keras graph: BERT's, with the discriminator head instead of the pooler and MLM."""

from __future__ import annotations

import keras

from kbert.models import naming
from kbert.layers import get_activation
from kbert.models.bert.graph import BertGraph


class ElectraGraph(BertGraph):
    """`Discriminator-Dense` (H, the hidden activation) then `Discriminator-Prediction` (1, sigmoid)."""

    def apply_final_layers(self, x):
        if not self.heads.discriminator:
            return x
        x = self.apply(x, keras.layers.Dense, naming.DISCRIMINATOR_DENSE, units=self.config.hidden_size,
                       activation=get_activation(self.config.activation), kernel_initializer=self.initializer())
        return self.apply(x, keras.layers.Dense, naming.DISCRIMINATOR_PREDICTION, units=1,
                          activation="sigmoid", kernel_initializer=self.initializer())
