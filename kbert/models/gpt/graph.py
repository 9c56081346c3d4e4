"""The Keras graphs of GPT, GPT-2 and GPT2-ML: BERT's skeleton, causal, with the tied LM output."""

from __future__ import annotations

from typing import Optional

import keras

from kbert.models import naming
from kbert.models.bert.graph import BertGraph
from kbert.models.gpt.config import GPT2_NORM_EPSILON


class GptGraph(BertGraph):
    """GPT: token + segment + position embeddings, Dropout, no norm; BERT's blocks under the LM mask."""

    # The norms' epsilon (None: the config's layer_norm_eps); bert4keras's GPT-2 and GPT2-ML use 1e-5.
    norm_epsilon: Optional[float] = None

    def apply_norm(self, x, name: str):
        return self.layer_norm(x, name, self.norm_epsilon or self.config.layer_norm_eps)

    def apply_embeddings(self, inputs):
        x = self.apply_positions(self.apply_token_and_segment(inputs))
        x = self.apply(x, keras.layers.Dropout, naming.EMBEDDING_DROPOUT, rate=self.config.hidden_dropout_prob)
        return self.apply_mapping(x)

    def apply_final_layers(self, x):
        """The LM output: `Embedding-Token`'s transpose, then `LM-Activation` (softmax)."""
        x = self.layers[naming.EMBEDDING_TOKEN](x, reverse=True)
        return self.apply(x, keras.layers.Activation, naming.LM_ACTIVATION, activation="softmax")


class Gpt2Graph(GptGraph):
    """GPT-2: token + position embeddings; pre-norm blocks; `Output-Norm` and `Output-Dropout` before the LM."""

    norm_epsilon = GPT2_NORM_EPSILON

    def apply_embeddings(self, inputs):
        return self.apply_mapping(self.apply_positions(self.apply_token_and_segment(inputs)))

    def apply_main_layers(self, x, index: Optional[int]):
        for sublayer, run in ((naming.ATTENTION, self.apply_attention),
                              (naming.FEED_FORWARD, self.apply_feed_forward)):
            name = naming.block(index, sublayer)
            y = run(self.apply_norm(x, f"{name}-Norm"), name)
            y = self.apply(y, keras.layers.Dropout, f"{name}-Dropout", rate=self.config.hidden_dropout_prob)
            x = self.apply([x, y], keras.layers.Add, f"{name}-Add")
        return x

    def apply_final_layers(self, x):
        x = self.apply_norm(x, naming.OUTPUT_NORM)
        x = self.apply(x, keras.layers.Dropout, naming.OUTPUT_DROPOUT, rate=self.config.hidden_dropout_prob)
        return super().apply_final_layers(x)


class Gpt2MlGraph(GptGraph):
    """GPT2-ML: token + position embeddings and `Embedding-Norm`; attention, then norm, feed-forward, norm."""

    norm_epsilon = 1e-5

    def apply_embeddings(self, inputs):
        x = self.apply_positions(self.apply_token_and_segment(inputs))
        return self.apply_mapping(self.apply_norm(x, naming.EMBEDDING_NORM))

    def apply_main_layers(self, x, index: Optional[int]):
        attention = naming.block(index, naming.ATTENTION)
        y = self.apply(self.apply_attention(x, attention), keras.layers.Dropout, f"{attention}-Dropout",
                       rate=self.config.hidden_dropout_prob)
        x = self.apply([x, y], keras.layers.Add, f"{attention}-Add")
        ffn = naming.block(index, naming.FEED_FORWARD)
        y = self.apply_feed_forward(self.apply_norm(x, f"{ffn}-Norm-0"), ffn)
        y = self.apply(y, keras.layers.Dropout, f"{ffn}-Dropout", rate=self.config.hidden_dropout_prob)
        return self.apply_norm(self.apply([x, y], keras.layers.Add, f"{ffn}-Add"), f"{ffn}-Norm-1")
