"""GPT, GPT-2 and GPT2-ML: checkpoint names and parameter formulas.

All three are language models by construction (`Attention-LM-Mask` in every
block, the output is `Embedding-Token`'s transpose then `LM-Activation`),
as bert4keras builds them; they differ in where the norms are:

- GPT: BERT's post-norm blocks, token + segment + position embeddings, no
  embedding norm;
- GPT-2: token + position embeddings, pre-norm blocks, a final `Output-Norm`;
- GPT2-ML: token + position embeddings and `Embedding-Norm`; in each block a
  norm before the feed-forward and one after its residual.
"""

from __future__ import annotations

import dataclasses
import re
from typing import List, Optional

from kbert.models import naming
from kbert.models.bert.family import BertFamily
from kbert.models.config import BertConfig
from kbert.models.gpt.config import GPT2_NORM_EPSILON, Gpt2Config
from kbert.models.heads import Heads
from kbert.models.tables import H, I, V, LayerParams, WeightName, dense, embedding, hf_suffix, norm


class GptFamily(BertFamily):
    """GPT as bert4keras builds it (`model="gpt"`): BERT's blocks under a causal mask, BERT's names under `gpt/`.

    Chinese GPT releases in this layout (e.g. the NEZHA-GPT and CDial-GPT
    conversions for bert4keras) use BERT's WordPiece vocabulary.
    """

    hf_sequence_classifier = False  # no Hugging Face sequence classifier kbert writes

    name = "gpt"
    model_type = "openai-gpt"
    graph = "kbert.models.gpt.graph:GptGraph"
    heads = ()
    applications = ("lm",)
    default_application = "lm"
    knows_hf_names = False
    hf_absent = ("Hugging Face's OpenAI GPT class adds segments through the token table, where bert4keras's GPT "
                 "has a segment table of its own")
    lm_output = naming.LM_ACTIVATION

    @staticmethod
    def named_in(names: List[str]) -> Optional[str]:
        """GPT-2's Hugging Face names (`wte`), or GPT's Google ones (`gpt/…`; GPT-2 with `gpt/output/LayerNorm`)."""
        if "wte.weight" in names:
            return "gpt2"
        if any(name.startswith("gpt/") for name in names):
            return "gpt2" if any(name.startswith("gpt/output/LayerNorm") for name in names) else "gpt"
        return None

    def embedding_params(self, config: BertConfig, with_mlm: bool) -> List[LayerParams]:
        h = config.hidden_size
        rows = [LayerParams(naming.EMBEDDING_TOKEN, "embeddings", "V·H", config.vocab_size * h,
                            "shared with the LM output")]
        if self.takes_segments:
            rows.append(LayerParams(naming.EMBEDDING_SEGMENT, "embeddings", "T·H", config.type_vocab_size * h))
        return rows + [LayerParams(naming.EMBEDDING_POSITION, "embeddings", "P·H",
                                   config.max_position_embeddings * h)]

    def head_params(self, config: BertConfig, *, with_pool, with_nsp, with_mlm,
                    with_discriminator) -> List[LayerParams]:
        return []  # the LM output is Embedding-Token's transpose

    def weight_layers(self, num_blocks: int) -> List[str]:
        layers = [naming.EMBEDDING_TOKEN, naming.EMBEDDING_SEGMENT, naming.EMBEDDING_POSITION]
        for index in range(num_blocks):
            for sublayer in (naming.ATTENTION, naming.FEED_FORWARD):
                layers += [naming.block(index, sublayer), naming.block(index, sublayer, "Norm")]
        return layers

    def layer_weights(self, layer: str) -> List[WeightName]:
        # BERT's table with bert4keras's renaming: bert/ -> gpt/, encoder -> transformer.
        return [row.renamed(row.google.replace("bert/", "gpt/", 1).replace("encoder", "transformer"))
                for row in super().layer_weights(layer)]


class Gpt2Family(GptFamily):
    """GPT-2 as bert4keras builds it (`model="gpt2"`): pre-norm blocks and `Output-Norm` (ε 1e-5).

    The Chinese GPT-2 models (CPM-LM conversions, `uer/gpt2-chinese-*`) use
    BERT's Chinese WordPiece vocabulary: `kbert.Tokenizer` on their
    `vocab.txt` encodes prompts and decodes generated ids.
    """

    name = "gpt2"
    model_type = hf_model_type = "gpt2"
    config_class = Gpt2Config
    graph = "kbert.models.gpt.graph:Gpt2Graph"
    takes_segments = False
    knows_hf_names = True
    hf_absent = None
    hf_class = "GPT2"
    hf_prefix = "transformer"
    hf_head_scopes = ("lm_head.",)

    def hf_architecture(self, heads: Heads) -> str:
        return "GPT2LMHeadModel"  # the LM output is the token table's transpose: written under transformer.

    def hf_with_heads(self, names) -> bool:
        return True

    def hf_config(self, config: BertConfig, heads: Heads) -> dict:
        """Hugging Face's GPT-2 keys (`n_embd`, `n_layer`, ...; ε 1e-5 as bert4keras's GPT-2)."""
        return {"model_type": "gpt2", "architectures": [self.hf_architecture(heads)],
                "vocab_size": config.vocab_size, "n_embd": config.hidden_size, "n_layer": config.num_hidden_layers,
                "n_head": config.num_attention_heads, "n_inner": config.intermediate_size,
                "n_positions": config.max_position_embeddings, "activation_function": config.hidden_act,
                "layer_norm_epsilon": GPT2_NORM_EPSILON, "resid_pdrop": config.hidden_dropout_prob,
                "embd_pdrop": config.hidden_dropout_prob, "attn_pdrop": config.attention_probs_dropout_prob,
                "initializer_range": config.initializer_range, "tie_word_embeddings": True,
                **({} if config.pad_token_id is None else {"pad_token_id": config.pad_token_id})}

    def block_params(self, config: BertConfig) -> List[LayerParams]:
        return super().block_params(config) + [
            LayerParams(naming.OUTPUT_NORM, "encoder", "2·H", 2 * config.hidden_size, "the final norm")]

    def weight_layers(self, num_blocks: int) -> List[str]:
        return super().weight_layers(num_blocks) + [naming.OUTPUT_NORM]

    def layer_weights(self, layer: str) -> List[WeightName]:
        if layer == naming.OUTPUT_NORM:
            rows = norm(layer, "gpt/output/LayerNorm", "")
        else:
            # The norms come before their sub-layer: bert4keras names them input/LayerNorm.
            rows = [row.renamed(row.google.replace("output/LayerNorm", "input/LayerNorm"))
                    for row in super().layer_weights(layer)]
        return [_with_hf_gpt2_name(row) for row in rows]


# Hugging Face's GPT-2 (`GPT2Model`): kbert layer -> its module. Conv1D stores Keras's [in, out];
# the block's query, key and value are one fused `c_attn`, in that order.
_HF_GPT2 = re.compile(r"Transformer-(\d+)-(MultiHeadSelfAttention|FeedForward)(-Norm)?/(\w+)/")
_HF_GPT2_FIXED = {naming.EMBEDDING_TOKEN: "wte", naming.EMBEDDING_POSITION: "wpe", naming.OUTPUT_NORM: "ln_f"}
_HF_GPT2_BLOCK = {("MultiHeadSelfAttention", "-Norm"): "ln_1", ("FeedForward", "-Norm"): "ln_2",
                  ("MultiHeadSelfAttention", "output"): "attn.c_proj", ("FeedForward", "intermediate"): "mlp.c_fc",
                  ("FeedForward", "output"): "mlp.c_proj"}
_FUSED = ("query", "key", "value")


def _with_hf_gpt2_name(row: WeightName) -> WeightName:
    """A GPT-2 row with Hugging Face's name, layout (not transposed) and slice of `c_attn`."""
    layer, suffix = row.path.split("/", 1)[0], hf_suffix(row)
    if layer in _HF_GPT2_FIXED:
        return dataclasses.replace(row, hf=f"{_HF_GPT2_FIXED[layer]}.{suffix}", hf_transposed=False)
    match = _HF_GPT2.match(row.path + "/")
    if match is None:  # a layer GPT-2 does not build (BERT's segment table)
        return row.renamed(row.google)
    index, sublayer, is_norm, part = match.groups()
    if part in _FUSED:
        return dataclasses.replace(row, hf=f"h.{index}.attn.c_attn.{suffix}", hf_transposed=False,
                                   hf_part=(_FUSED.index(part), len(_FUSED)))
    module = _HF_GPT2_BLOCK[sublayer, is_norm or part]
    return dataclasses.replace(row, hf=f"h.{index}.{module}.{suffix}", hf_transposed=False)


# GPT2-ML's block variables, by kbert layer suffix.
_GPT2_ML_BLOCK = re.compile(r"Transformer-(\d+)-(MultiHeadSelfAttention|FeedForward)(?:-Norm-(\d))?")


class Gpt2MlFamily(GptFamily):
    """GPT2-ML as bert4keras builds it (`model="gpt2_ml"`), with its own checkpoint names (`newslm/…`).

    Despite the name its blocks are closer to GPT's: attention, residual, a
    norm (`FeedForward-Norm-0`), the feed-forward, residual, a norm
    (`FeedForward-Norm-1`); and the embeddings end with `Embedding-Norm`.
    """

    name = "gpt2_ml"
    model_type = "gpt2_ml"
    graph = "kbert.models.gpt.graph:Gpt2MlGraph"
    takes_segments = False
    hf_absent = "Hugging Face's transformers has no GPT2-ML class; its weights are released in this TF layout only"

    @staticmethod
    def named_in(names: List[str]) -> Optional[str]:
        """GPT2-ML's Google names (`newslm/…`)."""
        return "gpt2_ml" if any(name.startswith("newslm/") for name in names) else None

    def embedding_params(self, config: BertConfig, with_mlm: bool) -> List[LayerParams]:
        return super().embedding_params(config, with_mlm) + [
            LayerParams(naming.EMBEDDING_NORM, "embeddings", "2·H", 2 * config.hidden_size)]

    def block_params(self, config: BertConfig) -> List[LayerParams]:
        h, i = config.hidden_size, config.intermediate_size
        rows = []
        for index in self.block_indices(config):
            ffn = naming.block(index, naming.FEED_FORWARD)
            rows += [
                LayerParams(naming.block(index, naming.ATTENTION), "encoder", "4·(H·H + H)", 4 * (h * h + h),
                            "query, key, value and output projections"),
                LayerParams(f"{ffn}-Norm-0", "encoder", "2·H", 2 * h, "before the feed-forward"),
                LayerParams(ffn, "encoder", "H·I + I + I·H + H", 2 * h * i + i + h),
                LayerParams(f"{ffn}-Norm-1", "encoder", "2·H", 2 * h, "after the residual"),
            ]
        return rows

    def weight_layers(self, num_blocks: int) -> List[str]:
        layers = [naming.EMBEDDING_TOKEN, naming.EMBEDDING_POSITION, naming.EMBEDDING_NORM]
        for index in range(num_blocks):
            ffn = naming.block(index, naming.FEED_FORWARD)
            layers += [naming.block(index, naming.ATTENTION), f"{ffn}-Norm-0", ffn, f"{ffn}-Norm-1"]
        return layers

    def layer_weights(self, layer: str) -> List[WeightName]:
        fixed = {
            naming.EMBEDDING_TOKEN: [embedding(layer, "newslm/embeddings/word_embed", "", V, H)],
            naming.EMBEDDING_POSITION: [embedding(layer, "newslm/embeddings/pos_embed", "",
                                                  "max_position_embeddings", H)],
            naming.EMBEDDING_NORM: norm(layer, "newslm/embeddings/LayerNorm_embed_norm", ""),
        }
        if layer in fixed:
            return [row.renamed(row.google) for row in fixed[layer]]
        match = _GPT2_ML_BLOCK.fullmatch(layer)
        return [] if match is None else [row.renamed(row.google) for row in self._block_rows(layer, *match.groups())]

    @staticmethod
    def _block_rows(layer: str, index: str, sublayer: str, norm_index: Optional[str]) -> List[WeightName]:
        scope = f"newslm/layer{int(index):02d}"
        if norm_index is not None:
            return norm(layer, f"{scope}/LayerNorm_mlp_ln{norm_index}", "")
        if sublayer == naming.ATTENTION:
            rows = []
            for part, name in (("query", "query_layer"), ("key", "key_layer"), ("value", "value_layer"),
                               ("output", "context_projection_layer")):
                rows += dense(f"{layer}/{part}", f"{scope}/{name}", None, (H, H))
            return rows
        return (dense(f"{layer}/intermediate", f"{scope}/intermediate", None, (H, I))
                + dense(f"{layer}/output", f"{scope}/output", None, (I, H)))
