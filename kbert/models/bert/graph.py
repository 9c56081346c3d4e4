"""BERT's Keras graph with bert4keras's layer names; the other families override its hooks.

    Input-Token, Input-Segment
    Embedding-Token, Embedding-Segment, Embedding-Token-Segment,
    Embedding-Position, Embedding-Norm, Embedding-Dropout[, Embedding-Mapping]
    Transformer-{i}-MultiHeadSelfAttention[-Dropout|-Add|-Norm]
    Transformer-{i}-FeedForward[-Dropout|-Add|-Norm]
    heads: Pooler, Pooler-Dense, NSP-Proba, MLM-Dense, MLM-Norm, MLM-Bias, MLM-Activation
"""

from __future__ import annotations

from typing import Optional

import keras

from kbert.models import naming
from kbert.models.config import ACTIVATIONS
from kbert.layers import (
    AttentionMask,
    BiasAdd,
    ConditionalLayerNormalization,
    Embedding,
    FeedForward,
    MaskedAdd,
    MultiHeadSelfAttention,
    PositionEmbedding,
    RobertaPositionEmbedding,
    TakeToken,
    TokenEmbedding,
    get_activation,
)
from kbert.models.transformer import TransformerGraph


class BertGraph(TransformerGraph):
    """BERT: absolute positions, post-LN blocks, pooler/NSP and tied MLM heads.

    Hooks for the other families: `position_encoding` with
    `make_position_bias` (positions that enter every attention layer as a
    fourth input, instead of absolute positions in the embeddings), and
    `apply_final_layers` (heads).
    """

    # How attention uses positions (None: BERT's absolute positions are in the embeddings).
    position_encoding: Optional[str] = None
    attention_scores = None  # with residual_attention_scores: the last attention layer's scores

    # Biases in the attention, feed-forward and mapping layers (RoFormer-v2 has none).
    use_bias = True

    def apply_embeddings(self, inputs):
        config = self.config
        x = self.apply_token_and_segment(inputs)
        x = self.apply_positions(x)
        x = self.apply_norm(x, naming.EMBEDDING_NORM)
        x = self.apply(x, keras.layers.Dropout, naming.EMBEDDING_DROPOUT, rate=config.hidden_dropout_prob)
        return self.apply_mapping(x)

    def apply_token_and_segment(self, inputs):
        """`Embedding-Token`, plus `Embedding-Segment` (`Embedding-Token-Segment`) where segments are taken."""
        config = self.config
        width = config.embedding_width
        x = self.apply(inputs[0], TokenEmbedding, naming.EMBEDDING_TOKEN, input_dim=config.vocab_size,
                       output_dim=width, embeddings_initializer=self.initializer(), **self.token_padding(),
                       **self.task_settings())
        if self.segment_vocab_size and self.family.segment_table(self.config):
            segments = self.apply(inputs[1], Embedding, naming.EMBEDDING_SEGMENT,
                                  input_dim=self.segment_vocab_size, output_dim=width,
                                  size_key="type_vocab_size", embeddings_initializer=self.initializer(),
                                  **self.task_settings())
            x = self.apply([x, segments], MaskedAdd, naming.EMBEDDING_TOKEN_SEGMENT)
        return x

    def apply_mapping(self, x):
        """`Embedding-Mapping` (E -> H) where the embeddings are narrower than the blocks."""
        if not self.family.has_mapping(self.config):
            return x
        return self.apply(x, keras.layers.Dense, naming.EMBEDDING_MAPPING, units=self.config.hidden_size,
                          kernel_initializer=self.initializer(), use_bias=self.use_bias)

    def apply_norm(self, x, name: str):
        """The family's layer norm (BERT's: LayerNormalization with the config's epsilon)."""
        return self.layer_norm(x, name, self.config.layer_norm_eps)

    def layer_norm(self, x, name: str, epsilon: float):
        """A LayerNormalization, or with `layer_norm_cond` a `ConditionalLayerNormalization` on the condition."""
        if self.condition is None:
            return self.apply(x, keras.layers.LayerNormalization, name, epsilon=epsilon)
        return self.apply([x, self.condition.tensor], ConditionalLayerNormalization, name, epsilon=epsilon,
                          hidden_units=self.condition.hidden_size, hidden_activation=self.condition.hidden_act,
                          hidden_initializer=self.initializer())

    def apply_positions(self, x):
        """Adds learned absolute positions, unless positions enter the attention instead."""
        if self.position_encoding:
            return x
        if self.family.positions_after_padding:  # Hugging Face's RoBERTa
            return self.apply(x, RobertaPositionEmbedding, naming.EMBEDDING_POSITION,
                              max_length=self.config.max_position_embeddings, padding_idx=self.config.pad_token_id,
                              embeddings_initializer=self.initializer())
        settings = {"max_length": self.config.max_position_embeddings, "embeddings_initializer": self.initializer()}
        if self.application == "packed":  # positions restart with each document of the row
            return self.apply(None, PositionEmbedding, naming.EMBEDDING_POSITION, **settings)(
                x, positions=self.inputs[-1])
        return self.apply(x, PositionEmbedding, naming.EMBEDDING_POSITION, **settings)

    def apply_position_bias(self, x):
        """The attention's fourth input (None: none), made by `make_position_bias` for the first block."""
        if self.position_encoding and self.position_bias is None:
            self.position_bias = self.make_position_bias(x)
        return self.position_bias

    def make_position_bias(self, x):
        """The positions a `position_encoding` family feeds to every attention layer."""
        raise NotImplementedError(f"{type(self).__name__} sets position_encoding but makes no positions")

    def apply_attention_mask(self):
        """The `lm` mask (from the token ids), `unilm` mask (from the segment ids) or `packed` mask (from the
        positions within each document); None for `encoder`."""
        if self.application != "encoder" and self.attention_mask is None:
            name, source = {"lm": (naming.ATTENTION_LM_MASK, 0), "unilm": (naming.ATTENTION_UNILM_MASK, 1),
                            "packed": (naming.ATTENTION_PACKED_MASK, -1)}[self.application]
            self.attention_mask = self.apply(self.inputs[source], AttentionMask, name, kind=self.application)
        return self.attention_mask

    def apply_main_layers(self, x, index: Optional[int]):
        attention_name = naming.block(index, naming.ATTENTION)
        x = self.apply_residual(attention_name, x, self.apply_attention(x, attention_name))
        ffn_name = naming.block(index, naming.FEED_FORWARD)
        return self.apply_residual(ffn_name, x, self.apply_feed_forward(x, ffn_name))

    def apply_attention(self, x, name: str):
        """Self-attention over `x`, with the application's mask, the previous layer's scores
        (`residual_attention_scores`) and the family's positions."""
        config = self.config
        # A packed run reuses an encoder's layers, built without a mask input: its mask goes as a keyword.
        packed = self.application == "packed"
        mask = self.apply_attention_mask()
        extra = [tensor for tensor in (None if packed else mask, self.attention_scores, self.apply_position_bias(x))
                 if tensor is not None]
        settings = dict(num_heads=config.num_attention_heads, head_size=config.head_size,
                        dropout=config.attention_probs_dropout_prob, kernel_initializer=self.initializer(),
                        position_encoding=self.position_encoding, use_bias=self.use_bias,
                        use_attention_mask=self.application not in ("encoder", "packed"),
                        return_attention_scores=self.residual_attention_scores)
        if packed:
            output = self.apply(None, MultiHeadSelfAttention, name, **settings)([x, x, x] + extra, attention_mask=mask)
        else:
            output = self.apply([x, x, x] + extra, MultiHeadSelfAttention, name, **settings)
        if not self.residual_attention_scores:
            return output
        output, self.attention_scores = output  # RealFormer: the next layer adds these scores to its own
        return output

    def apply_feed_forward(self, x, name: str):
        config = self.config
        return self.apply(x, FeedForward, name, intermediate_size=config.intermediate_size,
                          activation=get_activation(config.activation), kernel_initializer=self.initializer(),
                          use_bias=self.use_bias)

    def apply_residual(self, prefix: str, shortcut, x):
        """Post-LN residual: Dropout, Add the shortcut, the family's norm."""
        x = self.apply(x, keras.layers.Dropout, f"{prefix}-Dropout", rate=self.config.hidden_dropout_prob)
        x = self.apply([shortcut, x], keras.layers.Add, f"{prefix}-Add")
        return self.apply_norm(x, f"{prefix}-Norm")

    def apply_final_layers(self, x):
        """The pooler/NSP and MLM heads as bert4keras builds them; the sequence output without heads."""
        outputs = []
        if self.heads.pool or self.heads.nsp:
            outputs.append(self.apply_pooler(x))
        if self.heads.mlm:
            outputs.append(self.apply_mlm(x))
        return outputs if len(outputs) > 1 else (outputs or [x])[0]

    def apply_pooler(self, x):
        config = self.config
        x = self.apply(x, TakeToken, naming.POOLER, index=0)
        x = self.apply(x, keras.layers.Dense, naming.POOLER_DENSE, units=config.hidden_size,
                       activation="tanh", kernel_initializer=self.initializer())
        if self.heads.nsp:
            x = self.apply(x, keras.layers.Dense, naming.NSP_PROBA, units=2, activation="softmax",
                           kernel_initializer=self.initializer())
        return x

    def apply_mlm(self, x):
        """Dense + LayerNorm to the embeddings' width, then the token embedding's transpose, tied."""
        config = self.config
        activation = ACTIVATIONS[self.family.mlm_activation] if self.family.mlm_activation else config.activation
        x = self.apply(x, keras.layers.Dense, naming.MLM_DENSE, units=config.embedding_width,
                       activation=get_activation(activation), kernel_initializer=self.initializer())
        x = self.layer_norm(x, naming.MLM_NORM, config.layer_norm_eps)
        x = self.layers[naming.EMBEDDING_TOKEN](x, reverse=True)
        x = self.apply(x, BiasAdd, naming.MLM_BIAS)
        return self.apply(x, keras.layers.Activation, naming.MLM_ACTIVATION, activation=self.heads.mlm)
