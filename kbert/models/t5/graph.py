"""T5's Keras graph: an encoder stack and a decoder stack sharing `Embedding-Token`, as bert4keras builds them.

    Encoder-Input-Token -> Embedding-Token, Encoder-Embedding-Dropout,
        Encoder-Embedding-Relative-Position,
        Encoder-Transformer-{i}-{MultiHeadSelfAttention,FeedForward}[-Norm|-Dropout|-Add],
        Encoder-Output-Norm, Encoder-Output-Dropout
    [Input-Context or the encoder's output, Decoder-Input-Token] -> Embedding-Token,
        Decoder-Embedding-Dropout, Attention-LM-Mask, Decoder-Embedding-Relative-Position,
        Decoder-Transformer-{i}-{MultiHeadSelfAttention,MultiHeadCrossAttention,FeedForward}[...],
        Decoder-Output-Norm, Decoder-Output-Dropout, Decoder-Output-Scale,
        Decoder-Output-LM-Activation (T5.1.0, tied) or Decoder-Output-LM (T5.1.1, mT5)

As in bert4keras, the whole model is made by building the decoder on an
`Input-Context` first, then calling its layers again on the encoder's
output: every decoder layer has two call sites.
"""

from __future__ import annotations

import keras

from kbert.layers import (AttentionMask, FeedForward, MultiHeadSelfAttention, RMSNormalization, Scale,
                          T5RelativePositionBias, TokenEmbedding, UnmaskingDropout, get_activation)
from kbert.models import naming
from kbert.models.t5.config import NORM_EPSILON
from kbert.models.t5.family import (CROSS_ATTENTION, DECODER, DECODER_OUTPUT_LM, DECODER_OUTPUT_LM_ACTIVATION,
                                    ENCODER, SELF_ATTENTION, block, output_norm, relative_position)
from kbert.models.transformer import TransformerGraph, id_model

ENCODER_INPUT = "Encoder-Input-Token"
DECODER_INPUT = "Decoder-Input-Token"
CONTEXT_INPUT = "Input-Context"
# The relative position biases' learning rate in a T5 that kbert trains from random weights, in multiples of the
# rest's (`T5Graph.learning_rate_multipliers`).
POSITION_BIAS_LEARNING_RATE = 10.0


class T5Graph(TransformerGraph):
    """Builds `family.part` of T5: `"both"` (inputs `[encoder ids, decoder ids]`), `"encoder"` or `"decoder"`."""

    def build(self, name: str):
        part, hidden = self.family.part, self.config.hidden_size
        encoder_ids = keras.Input(shape=(None,), dtype="int32", name=ENCODER_INPUT)
        decoder_ids = keras.Input(shape=(None,), dtype="int32", name=DECODER_INPUT)
        if part == "encoder":
            self.inputs = [encoder_ids]
            return id_model(self.inputs, self.run_encoder(encoder_ids), self.family.name, name, self.spec())
        context = keras.Input(shape=(None, hidden), name=CONTEXT_INPUT)
        if part == "decoder":
            self.inputs = [context, decoder_ids]
            return id_model(self.inputs, self.run_decoder(context, decoder_ids), self.family.name, name,
                            self.spec())
        encoded = self.run_encoder(encoder_ids)
        self.run_decoder(context, decoder_ids)  # bert4keras's decoder model on Input-Context, first
        self.inputs = [encoder_ids, decoder_ids]
        return id_model(self.inputs, self.run_decoder(encoded, decoder_ids), self.family.name, name, self.spec())

    def run(self, inputs):
        """The graph on `inputs` (as `build` takes them for the family's part)."""
        part = self.family.part
        if part == "encoder":
            return self.run_encoder(inputs[0])
        if part == "decoder":
            return self.run_decoder(*inputs)
        return self.run_decoder(self.run_encoder(inputs[0]), inputs[1])

    # --- the two stacks ------------------------------------------------------------------
    def run_encoder(self, token_ids):
        self.position_bias = None
        x = self.apply(self.embed(token_ids), keras.layers.Dropout, "Encoder-Embedding-Dropout",
                       rate=self.config.hidden_dropout_prob)
        for index in range(self.config.num_hidden_layers):
            x = self.apply_block(ENCODER, index, x)
        return self.apply_output(ENCODER, x)

    def run_decoder(self, context, token_ids):
        self.position_bias = None
        # Hugging Face's decoder hides no token: its Dropout ends the embedding's padding mask there.
        dropout = keras.layers.Dropout if self.config.decoder_mask_zero else UnmaskingDropout
        x = self.apply(self.embed(token_ids), dropout, "Decoder-Embedding-Dropout",
                       rate=self.config.hidden_dropout_prob)
        if self.attention_mask is None:  # made once from the decoder ids, as bert4keras's LM mask
            self.attention_mask = self.apply(token_ids, AttentionMask, naming.ATTENTION_LM_MASK, kind="lm")
        for index in range(self.config.num_hidden_layers):
            x = self.apply_block(DECODER, index, x, context)
        x = self.apply_output(DECODER, x)
        scale = self.config.hidden_size ** -0.5 if self.config.scale_decoder_outputs else 1.0
        x = self.apply(x, Scale, "Decoder-Output-Scale", factor=scale)
        return self.apply_lm(x)

    @staticmethod
    def initialise(model: keras.Model, config) -> None:
        """Google's T5 initialisation (`initialise_as_t5`) in place of bert4keras's."""
        initialise_as_t5(model, config)

    @staticmethod
    def learning_rate_multipliers(model: keras.Model, optimizer: str) -> dict:
        """T5's relative position biases learn at `POSITION_BIAS_LEARNING_RATE` times the learning rate under
        AdamW and LAMB; under Adafactor, whose steps are relative to each weight's scale, at the common rate.

        A stack's positions are a table of 32 scalars per head, each moved by at most
        about the learning rate per Adam step: at `kbert train`'s 1e-3 and a few thousand
        steps no bias can reach the few units that attention to one neighbour needs.
        Trained so on MSRA extraction (2 epochs), the encoder's biases ended within
        ±0.19 of zero and the decoder's within ±0.38, and the model copied few characters
        of a name from its source (docs/generation.md).
        """
        if optimizer == "adafactor":
            return {}
        return {layer.embeddings.path: POSITION_BIAS_LEARNING_RATE for layer in model.layers
                if isinstance(layer, T5RelativePositionBias)}

    def embed(self, token_ids):
        config = self.config
        return self.apply(token_ids, TokenEmbedding, naming.EMBEDDING_TOKEN, input_dim=config.vocab_size,
                          output_dim=config.hidden_size, embeddings_initializer=self.initializer(),
                          **self.token_padding())

    def apply_block(self, stack: str, index: int, x, context=None):
        """Pre-norm sub-layers: self-attention, the decoder's cross-attention, the feed-forward."""
        self_bias, cross_bias = self.stack_position_bias(stack, x, context)
        mask = [self.attention_mask] if stack == DECODER else []
        x = self.apply_sublayer(block(stack, index, SELF_ATTENTION), x,
                                lambda y, name: self.attend([y, y, y] + mask + [self_bias], name, bool(mask)))
        if stack == DECODER:
            biases = [cross_bias] if self.config.cross_position_bias else []
            x = self.apply_sublayer(block(stack, index, CROSS_ATTENTION), x,
                                    lambda y, name: self.attend([y, context, context] + biases, name, False,
                                                                bool(biases)))
        return self.apply_sublayer(block(stack, index, naming.FEED_FORWARD), x, self.feed_forward)

    def apply_sublayer(self, name: str, x, sublayer):
        """Norm, the sub-layer, Dropout, Add the shortcut."""
        y = sublayer(self.apply_norm(x, f"{name}-Norm"), name)
        y = self.apply(y, keras.layers.Dropout, f"{name}-Dropout", rate=self.config.hidden_dropout_prob)
        return self.apply([x, y], keras.layers.Add, f"{name}-Add")

    def attend(self, inputs, name: str, use_attention_mask: bool, position_bias: bool = True):
        config = self.config
        return self.apply(inputs, MultiHeadSelfAttention, name, num_heads=config.num_attention_heads,
                          head_size=config.head_size, dropout=config.attention_probs_dropout_prob,
                          kernel_initializer=self.initializer(),
                          position_encoding="t5_relative" if position_bias else None,
                          use_attention_mask=use_attention_mask, use_bias=False, scale=False,
                          output_dim=config.hidden_size)

    def feed_forward(self, x, name: str):
        config = self.config
        activation = [get_activation(name) for name in config.activation] if config.gated \
            else get_activation(config.activation)
        return self.apply(x, FeedForward, name, intermediate_size=config.intermediate_size, activation=activation,
                          kernel_initializer=self.initializer(), use_bias=False)

    def stack_position_bias(self, stack: str, x, context):
        """The stack's relative position biases (self, cross), made from its first block's input."""
        if self.position_bias is None:
            options = dict(num_buckets=self.config.relative_attention_num_buckets,
                           num_heads=self.config.num_attention_heads, bidirectional=stack == ENCODER,
                           embeddings_initializer=self.initializer())
            self_bias = self.apply([x, x], T5RelativePositionBias, relative_position(stack), **options)
            cross_bias = None if context is None or not self.config.cross_position_bias else \
                self.apply([x, context], T5RelativePositionBias, relative_position(stack), **options)
            self.position_bias = (self_bias, cross_bias)
        return self.position_bias

    def apply_norm(self, x, name: str):
        return self.apply(x, RMSNormalization, name, epsilon=NORM_EPSILON)

    def apply_output(self, stack: str, x):
        x = self.apply_norm(x, output_norm(stack))
        return self.apply(x, keras.layers.Dropout, f"{stack}-Output-Dropout", rate=self.config.hidden_dropout_prob)

    def apply_lm(self, x):
        """T5.1.0: the token embedding's transpose (tied); T5.1.1 and mT5: their own `Decoder-Output-LM`."""
        if self.family.version == "t5.1.0":
            x = self.layers[naming.EMBEDDING_TOKEN](x, reverse=True)
            return self.apply(x, keras.layers.Activation, DECODER_OUTPUT_LM_ACTIVATION, activation="softmax")
        return self.apply(x, keras.layers.Dense, DECODER_OUTPUT_LM, units=self.config.vocab_size,
                          activation="softmax", use_bias=False, kernel_initializer=self.initializer())


def initialise_as_t5(model: keras.Model, config) -> None:
    """Redraws a T5's weights as Google's T5 (Mesh TensorFlow) initialises them: each normal, std 1/√fan-in.

    bert4keras draws every T5 weight with std 0.02. In T5's pre-norm stack nothing
    rescales the residual stream, so the token embedding (std 0.02) is outweighed by
    the first sub-layers' outputs, and without the attention's 1/√K the scores start
    flat. T5's scheme keeps every projection's output at unit scale: the query at
    1/√(H·K) (its 1/√K in place of the score scaling), key and value 1/√H, the
    attention output 1/√(A·K), the feed-forward 1/√H in and 1/√I out, the relative
    position biases 1/√H, the token embedding 1 and T5.1.1's own LM kernel 1/√H
    (Mesh TensorFlow's dense default), so the first logits have unit scale.
    """
    hidden, inner = config.hidden_size, config.num_attention_heads * config.head_size

    def redraw(variable, std: float):
        variable.assign(keras.random.normal(variable.shape, stddev=std, dtype=variable.dtype))

    for layer in model.layers:
        if isinstance(layer, MultiHeadSelfAttention):
            redraw(layer.query.kernel, (hidden * config.head_size) ** -0.5)
            redraw(layer.key.kernel, hidden ** -0.5)
            redraw(layer.value.kernel, hidden ** -0.5)
            redraw(layer.output_dense.kernel, inner ** -0.5)
        elif isinstance(layer, FeedForward):
            for dense in filter(None, (layer.intermediate, layer.gate)):
                redraw(dense.kernel, hidden ** -0.5)
            redraw(layer.output_dense.kernel, config.intermediate_size ** -0.5)
        elif isinstance(layer, T5RelativePositionBias):
            redraw(layer.embeddings, hidden ** -0.5)
        elif isinstance(layer, TokenEmbedding):
            redraw(layer.embeddings, 1.0)
        elif layer.name == DECODER_OUTPUT_LM:
            redraw(layer.kernel, hidden ** -0.5)
