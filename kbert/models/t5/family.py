"""T5's checkpoint names and parameter formulas: T5.1.0, T5.1.1 and mT5, whole or one stack.

The names are those of Google's T5 checkpoints (bert4keras's
`T5_Base.variable_mapping`): `shared/embedding`, then per stack
`{encoder,decoder}/block_00i/layer_00j/…`. T5.1.1 splits the feed-forward's
`wi` into `wi_0` (activated) and `wi_1` (linear) and has its own LM kernel
`decoder/logits/kernel`; mT5 names its norms `rms_norm`. The relative
attention biases are stored `[heads, buckets]`, the transpose of the Keras
table.
"""

from __future__ import annotations

import dataclasses
import re
from typing import List, Optional

from kbert.models import naming
from kbert.models.bert.family import BertFamily
from kbert.models.heads import Heads
from kbert.models.t5.config import NORM_EPSILON, T5Config, hf_feed_forward
from kbert.models.tables import H, I, V, LayerParams, WeightName

ENCODER, DECODER = "Encoder", "Decoder"
SELF_ATTENTION, CROSS_ATTENTION = "MultiHeadSelfAttention", "MultiHeadCrossAttention"
_BLOCK = re.compile(r"(Encoder|Decoder)-Transformer-(\d+)-(MultiHeadSelfAttention|MultiHeadCrossAttention|FeedForward)"
                    r"(-Norm)?")
INNER = "attention_head_size"  # the config key of the attention's inner width, heads · head size


def block(stack: str, index: int, sublayer: str) -> str:
    """`block("Decoder", 0, "MultiHeadCrossAttention")` is "Decoder-Transformer-0-MultiHeadCrossAttention"."""
    return f"{stack}-Transformer-{index}-{sublayer}"


def relative_position(stack: str) -> str:
    return f"{stack}-Embedding-Relative-Position"


def output_norm(stack: str) -> str:
    return f"{stack}-Output-Norm"


DECODER_OUTPUT_LM = "Decoder-Output-LM"  # T5.1.1's own LM kernel
DECODER_OUTPUT_LM_ACTIVATION = "Decoder-Output-LM-Activation"  # T5.1.0's tied LM output


def _weight(path: str, google: str, hf: str, axes, google_transposed: bool = False,
            hf_transposed: bool = False) -> WeightName:
    return WeightName(path, google, hf, google_transposed, hf_transposed, tuple(axes))


def _kernel(path: str, google: str, hf: str, axes) -> WeightName:
    """A projection's kernel: Google's T5 stores Keras's [in, out], Hugging Face PyTorch's [out, in]."""
    return _weight(f"{path}/kernel", google, f"{hf}.weight", axes, hf_transposed=True)


class T5Family(BertFamily):
    """T5.1.0 as bert4keras builds it (`model="t5"` or `"t5.1.0"`): the encoder-decoder with the LM head.

    Pre-norm blocks with T5's scale-only RMS norm (ε 1e-6), bias-free
    attention without the 1/√d scaling, a relative position bias per stack
    (shared by its blocks; the decoder's also enters its cross-attention, as
    in bert4keras), and one token embedding shared by both stacks and, for
    T5.1.0, the LM output (after `Decoder-Output-Scale`, H^(−1/2)). A
    Hugging Face config computes as Hugging Face does instead (`T5Config`'s
    `cross_position_bias`, `scale_decoder_outputs`, `decoder_mask_zero`).

    Inputs `[encoder token ids, decoder token ids]`; `part` builds one stack
    (`"encoder"`: `[encoder token ids]` -> states; `"decoder"`: `[context,
    decoder token ids]` -> probabilities).
    """

    hf_sequence_classifier = False  # no Hugging Face sequence classifier kbert writes

    name = "t5.1.0"
    model_type = "t5"
    config_class = T5Config
    graph = "kbert.models.t5.graph:T5Graph"
    heads = ()
    applications = ("encoder",)
    hf_prefix = None
    takes_segments = False
    conditional_norms = False
    residual_scores = False
    version = "t5.1.0"
    part = "both"  # or "encoder", "decoder"

    @staticmethod
    def named_in(names: List[str]) -> Optional[str]:
        """T5's names: Hugging Face's `shared` and `encoder.block.` (T5.1.1 with `wi_0`), Google's `shared/embedding`
        (T5.1.1 with `decoder/logits/kernel`, mT5 with `rms_norm`)."""
        if "shared.weight" in names and any(name.startswith("encoder.block.") for name in names):
            return "t5.1.1" if any(".DenseReluDense.wi_0." in name for name in names) else "t5.1.0"
        if "shared/embedding" in names:
            if any("rms_norm" in name for name in names):
                return "mt5.1.1"
            return "t5.1.1" if "decoder/logits/kernel" in names else "t5.1.0"
        return None

    def config_to_train(self, config: T5Config, initialised: bool) -> T5Config:
        """A T5 that kbert initialises is built as Google's: no output scale before an untied
        LM head, and no position bias in the cross-attention. A checkpoint keeps the graph
        it was trained with.

        bert4keras scales the decoder's output by H^(−1/2) for every version. In front
        of T5.1.1's own `Decoder-Output-LM` that makes the first logits √H times too
        small, and the head must grow √H-fold before predictions sharpen (a 2-layer H 64
        T5.1.1, vocabulary 40, on a toy extraction: validation accuracy 0.695 after 300
        steps with the scale, 0.783 without). Google's and Hugging Face's T5 scale only
        before the tied head.

        bert4keras also adds the decoder's relative position bias to the cross-attention,
        where the "distance" is from the decoder's step to a source position: as the
        decoder's self-attention learns to look at its last tokens, the same table pins
        the cross-attention to the source positions just before the step's index, which
        carry nothing about what to copy (docs/generation.md).
        """
        if initialised:
            untied = self.version != "t5.1.0"
            return dataclasses.replace(config, cross_position_bias=False,
                                       scale_decoder_outputs=config.scale_decoder_outputs and not untied)
        return config

    @property
    def lm_output(self) -> str:
        return DECODER_OUTPUT_LM_ACTIVATION if self.version == "t5.1.0" else DECODER_OUTPUT_LM

    @property
    def stacks(self) -> List[str]:
        return {"both": [ENCODER, DECODER], "encoder": [ENCODER], "decoder": [DECODER]}[self.part]

    # --- analytic parameter counts ---------------------------------------------------
    def layer_params(self, config: T5Config, **heads) -> List[LayerParams]:
        h, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
        attention = 4 * h * config.num_attention_heads * config.head_size
        buckets = config.relative_attention_num_buckets
        ffn_formula, ffn = ("3·H·I", 3 * h * i) if config.gated else ("2·H·I", 2 * h * i)
        shared = "shared by the encoder and decoder" + (
            " and the LM output" if self.version == "t5.1.0" and DECODER in self.stacks else "")
        rows = [LayerParams(naming.EMBEDDING_TOKEN, "embeddings", "V·H", v * h,
                            shared if self.part == "both" or self.version == "t5.1.0" else "")]
        for stack in self.stacks:
            group = stack.lower()
            rows.append(LayerParams(relative_position(stack), group, f"{buckets}·A", buckets * config.num_attention_heads,
                                    "a bias per head for each bucket of relative distance"))
            for index in range(config.num_hidden_layers):
                sublayers = [SELF_ATTENTION] + ([CROSS_ATTENTION] if stack == DECODER else [])
                for sublayer in sublayers:
                    rows += [LayerParams(block(stack, index, sublayer), group, "4·H·A·K", attention,
                                         "query, key, value and output projections, no biases"),
                             LayerParams(f"{block(stack, index, sublayer)}-Norm", group, "H", h, "scale only")]
                name = block(stack, index, naming.FEED_FORWARD)
                rows += [LayerParams(name, group, ffn_formula, ffn,
                                     "gated: two inner projections" if config.gated else "no biases"),
                         LayerParams(f"{name}-Norm", group, "H", h, "scale only")]
            rows.append(LayerParams(output_norm(stack), group, "H", h, "scale only"))
        if DECODER in self.stacks and self.version != "t5.1.0":
            rows.append(LayerParams(DECODER_OUTPUT_LM, "heads", "H·V", h * v, "not tied to the embedding"))
        return rows

    # --- checkpoint variable names ---------------------------------------------------
    def weight_layers(self, num_blocks: int) -> List[str]:
        layers = [naming.EMBEDDING_TOKEN]
        for stack in (ENCODER, DECODER):
            layers += [relative_position(stack), output_norm(stack)]
            for index in range(num_blocks):
                sublayers = [SELF_ATTENTION] + ([CROSS_ATTENTION] if stack == DECODER else []) + [naming.FEED_FORWARD]
                for sublayer in sublayers:
                    layers += [block(stack, index, sublayer), f"{block(stack, index, sublayer)}-Norm"]
        return layers + [DECODER_OUTPUT_LM]

    def layer_weights(self, layer: str) -> List[WeightName]:
        """Google's names (`encoder/block_000/layer_000/…`) and Hugging Face's (`encoder.block.0.layer.0.…`)."""
        norm = "rms_norm" if self.version == "mt5.1.1" else "layer_norm"
        final_norm = "rms_norm" if self.version == "mt5.1.1" else "final_layer_norm"
        if layer == naming.EMBEDDING_TOKEN:
            return [_weight(f"{layer}/embeddings", "shared/embedding", "shared.weight", (V, H))]
        if layer == DECODER_OUTPUT_LM:  # transformers 5 ties a new model's lm_head to shared, and saves one
            return [dataclasses.replace(_kernel(layer, "decoder/logits/kernel", "lm_head", (H, V)),
                                        hf_tied="shared.weight")]
        for stack in (ENCODER, DECODER):
            scope = stack.lower()
            if layer == relative_position(stack):
                return [_weight(f"{layer}/embeddings", f"{scope}/block_000/layer_000/SelfAttention/"
                                "relative_attention_bias", f"{scope}.block.0.layer.0.SelfAttention."
                                "relative_attention_bias.weight",
                                ("relative_attention_num_buckets", "num_attention_heads"), google_transposed=True)]
            if layer == output_norm(stack):
                return [_weight(f"{layer}/scale", f"{scope}/{final_norm}/scale", f"{scope}.final_layer_norm.weight",
                                (H,))]
        match = _BLOCK.fullmatch(layer)
        if match is None:
            return []
        stack, index, sublayer, is_norm = match.groups()
        sublayer_index = {SELF_ATTENTION: 0, CROSS_ATTENTION: 1,
                          naming.FEED_FORWARD: 1 if stack == ENCODER else 2}[sublayer]
        scope = f"{stack.lower()}/block_{int(index):03d}/layer_{sublayer_index:03d}"
        hf = f"{stack.lower()}.block.{int(index)}.layer.{sublayer_index}"
        if is_norm:
            return [_weight(f"{layer}/scale", f"{scope}/{norm}/scale", f"{hf}.layer_norm.weight", (H,))]
        if sublayer == naming.FEED_FORWARD:
            inner = [("intermediate", "wi_0"), ("gate", "wi_1")] if self.version != "t5.1.0" \
                else [("intermediate", "wi")]
            return ([_kernel(f"{layer}/{part}", f"{scope}/DenseReluDense/{name}/kernel", f"{hf}.DenseReluDense.{name}",
                             (H, I)) for part, name in inner]
                    + [_kernel(f"{layer}/output", f"{scope}/DenseReluDense/wo/kernel", f"{hf}.DenseReluDense.wo",
                               (I, H))])
        attention = "SelfAttention" if sublayer == SELF_ATTENTION else "EncDecAttention"
        return [_kernel(f"{layer}/{part}", f"{scope}/{attention}/{name}", f"{hf}.{attention}.{name}", axes)
                for part, name, axes in (("query", "q", (H, INNER)), ("key", "k", (H, INNER)),
                                         ("value", "v", (H, INNER)), ("output", "o", (INNER, H)))]

    # --- Hugging Face's classes and config ------------------------------------------------
    def hf_architecture(self, heads: Heads) -> str:
        stem = "MT5" if self.version == "mt5.1.1" else "T5"
        return f"{stem}EncoderModel" if self.part == "encoder" else f"{stem}ForConditionalGeneration"

    def hf_with_heads(self, names: List[str]) -> bool:
        return False  # T5's names have no backbone prefix: `shared`, `encoder.…`, `decoder.…`, `lm_head`

    def hf_config(self, config: T5Config, heads: Heads) -> dict:
        """Hugging Face's T5 keys. What they cannot say (bert4keras's position bias in the
        cross-attention, its hidden start token) is kept in kbert's own keys beside them, and
        `save_hf_weights` warns that `transformers` computes otherwise."""
        return {"model_type": "mt5" if self.version == "mt5.1.1" else "t5",
                "architectures": [self.hf_architecture(heads)], "vocab_size": config.vocab_size,
                "d_model": config.hidden_size, "d_kv": config.head_size, "d_ff": config.intermediate_size,
                "num_layers": config.num_hidden_layers, "num_decoder_layers": config.num_hidden_layers,
                "num_heads": config.num_attention_heads,
                "relative_attention_num_buckets": config.relative_attention_num_buckets,
                "relative_attention_max_distance": 128, "dropout_rate": config.hidden_dropout_prob,
                "layer_norm_epsilon": NORM_EPSILON, "feed_forward_proj": hf_feed_forward(config),
                "tie_word_embeddings": self.version == "t5.1.0",
                "scale_decoder_outputs": config.scale_decoder_outputs,
                "cross_position_bias": config.cross_position_bias, "decoder_mask_zero": config.decoder_mask_zero,
                # SentencePiece T5's framing: the decoder starts from the padding id and ends with id 1
                # (`save_hf_weights` writes [CLS]/[SEP]'s ids for a T5 on a WordPiece vocab.txt).
                "is_encoder_decoder": True, "pad_token_id": config.pad_token_id,
                "decoder_start_token_id": config.pad_token_id, "eos_token_id": 1}

    def hf_differences(self, config: T5Config) -> List[str]:
        """How `transformers` would compute otherwise than this model."""
        differences = []
        if config.cross_position_bias and self.part != "encoder":
            differences.append("its cross-attention has no relative position bias (bert4keras's has)")
        if config.decoder_mask_zero and self.part != "encoder":
            differences.append("its decoder does not hide tokens of id 0, T5's start token (bert4keras's does)")
        if config.scale_decoder_outputs and self.version == "mt5.1.1" and self.part != "encoder":
            differences.append("its mT5 does not scale the decoder's output by H^(-1/2) (bert4keras's does)")
        elif config.scale_decoder_outputs and self.version == "t5.1.1" and self.part != "encoder":
            differences.append("before 5.0 it does not scale an untied decoder's output by H^(-1/2) "
                               "(bert4keras's does)")
        return differences


class EncoderAlone:
    """A T5's encoder alone: mixed into the family of its whole model."""

    part = "encoder"


class DecoderAlone:
    """A T5's decoder alone, on `[context, decoder token ids]`: mixed into the family of its whole model."""

    part = "decoder"
    knows_hf_names = False
    hf_absent = "Hugging Face's transformers has no class for T5's decoder alone on a context input"


class T5EncoderFamily(EncoderAlone, T5Family):
    """T5.1.0's encoder alone (`model="t5_encoder"` or `"t5.1.0_encoder"`)."""

    name, model_type = "t5.1.0_encoder", "t5_encoder"


class T5DecoderFamily(DecoderAlone, T5Family):
    """T5.1.0's decoder alone (`model="t5_decoder"` or `"t5.1.0_decoder"`)."""

    name, model_type = "t5.1.0_decoder", "t5_decoder"


class T511Family(T5Family):
    """T5.1.1 (`model="t5.1.1"`): gated feed-forward (`hidden_act: ["gelu", "linear"]`), untied LM output."""

    name = model_type = version = "t5.1.1"


class T511EncoderFamily(EncoderAlone, T511Family):
    """T5.1.1's encoder alone (`model="t5.1.1_encoder"`)."""

    name = model_type = "t5.1.1_encoder"


class T511DecoderFamily(DecoderAlone, T511Family):
    """T5.1.1's decoder alone (`model="t5.1.1_decoder"`)."""

    name = model_type = "t5.1.1_decoder"


class Mt5Family(T511Family):
    """mT5 (`model="mt5.1.1"`): T5.1.1 with mT5's checkpoint names (`rms_norm`)."""

    name, model_type, version = "mt5.1.1", "mt5", "mt5.1.1"


class Mt5EncoderFamily(EncoderAlone, Mt5Family):
    """mT5's encoder alone (`model="mt5.1.1_encoder"`)."""

    name, model_type = "mt5.1.1_encoder", "mt5_encoder"


class Mt5DecoderFamily(DecoderAlone, Mt5Family):
    """mT5's decoder alone (`model="mt5.1.1_decoder"`)."""

    name, model_type = "mt5.1.1_decoder", "mt5_decoder"
