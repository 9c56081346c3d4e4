"""BERT's config, checkpoint names and parameter formulas; the base the other families extend.

Pure Python (no TensorFlow): `kbert params` and `kbert inspect` read it. The
Keras graph is in `graph.py`.
"""

from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

from kbert.models import naming
from kbert.models.config import BertConfig
from kbert.models.heads import Heads, SequenceHead
from kbert.models.tables import H, I, V, LayerParams, WeightName, dense, embedding, norm, output_weights


class BertFamily:
    """BERT as bert4keras 0.11.5 builds it (`model="bert"`).

    Attributes:
        name: bert4keras's `model=` name.
        model_type: Hugging Face's `model_type` for the family.
        config_class: the family's config (`BertConfig` or a subclass).
        graph: `"module:class"` of the Keras graph (imported only to build).
        shared_blocks: one Transformer block applied L times (ALBERT).
        derived_layers: layers whose weights are computed from the config,
            in no checkpoint (NEZHA's relative positions).
        heads: the builder's head flags the family accepts.
        applications: bert4keras's `application=` values the family accepts.
        knows_hf_names: kbert can read and write its Hugging Face safetensors.
        hf_absent: why the family has no Hugging Face layout, where that is
            the reason kbert knows none (None: not yet written).
        hf_model_type: the `model_type` written into a Hugging Face config.json.
        hf_class: the stem of Hugging Face's class names (`Bert` in `BertModel`).
        hf_prefix: the backbone's scope in Hugging Face's task models
            (`bert.` in `BertForMaskedLM`); a bare `BertModel` has none.
        hf_prefix_aliases: other scopes of the backbone in the files of its hub releases (GTE's `new.`), read
            as `hf_prefix`.
        hf_head_scopes: the heads' scopes there (beside the backbone's, not in it).
        embedding_axis: the config key of the embeddings' width (E or H).
        default_application: what `application="encoder"` (the builder's
            default) builds: `"lm"` for the GPT families, language models by
            construction as in bert4keras.
        takes_segments: the model reads segment ids (GPT-2, GPT2-ML: no).
        lm_output: the layer whose output is the next-token distribution of an
            `lm`/`unilm` model (its MLM head's last layer), for generation.
        conditional_norms: its layer norms can take bert4keras's `layer_norm_cond`
            (LayerNorm families; not T5's or RoFormer-v2's RMS norms, yet).
        residual_scores: it can be built with `residual_attention_scores`
            (the encoder families; not the GPT families or T5).
        model_type_aliases: other Hugging Face `model_type`s that build this
            family (`xlm-roberta` for `hf_roberta`).
        positions_after_padding: real tokens' positions are counted from
            `pad_token_id + 1` (Hugging Face's RoBERTa), not from 0.
        google_absent: why the family has no original TF checkpoint (None:
            it has one).
        layout_difference: how this family's model differs from another that reads
            the same tensor names (None: none does); every refusal of the crossing says it.
        classifier_hidden: the tanh dense of a sequence classifier (a
            reranker) between `[CLS]` and its output: BERT's pooler;
            RoBERTa's classification head has its own.
        classifier_activation: that dense's activation (DistilBERT's
            `pre_classifier`: ReLU).
        hf_sequence_classifier: a reranker's head (`sequence_head`) is written
            as Hugging Face's `...ForSequenceClassification`, which
            sentence-transformers' CrossEncoder reads (`kbert train --task rerank`).
        causal_lm: a decoder whose reranker scores with its LM head at the last
            token (sentence-transformers' `LogitScore`: Qwen3-Reranker's form).
        own_tokenizer: tokenized by its folder's `tokenizer.json` (byte-level
            BPE, Unigram or WordPiece, with its own padding id), never by a
            `vocab.txt`: Hugging Face's RoBERTa / XLM-R, MPNet, ModernBERT.
        reads_segments: the graph adds segment embeddings; False: it takes
            `Input-Segment`, so that every task feeds it alike, and ignores
            it, as transformers ignores `token_type_ids` for DistilBERT and
            MPNet.
        task_lora_layers: the graph can hold task LoRA pairs beside its weights (`build_transformer_model(...,
            task_lora=)`): Jina-v3's, whose hub files carry them.
        mlm_activation: the MLM head's dense activation (None: the config's
            `hidden_act`; XLM-R's `lm_head`, which Jina-v3 and GTE keep: GELU).
        hf_classes: the model_types among the family's own (`model_type_aliases`) that
            transformers builds with classes of their own, and those classes' stem
            (`XLMRoberta` for xlm-roberta); a config of one is written as it.
        position_types: other models' configs this family reads, told by their
            `position_embedding_type`: `(model_type, position_embedding_type,
            what they are)` each (Jina's own files: xlm-roberta with rotary).
    """

    name = "bert"
    model_type = "bert"
    config_class = BertConfig
    graph = "kbert.models.bert.graph:BertGraph"
    shared_blocks = False
    derived_layers: frozenset = frozenset()
    heads = ("with_pool", "with_nsp", "with_mlm")
    applications = ("encoder", "lm", "unilm")
    knows_hf_names = True
    hf_absent: Optional[str] = None
    hf_model_type = "bert"
    hf_class = "Bert"
    hf_prefix = "bert"
    hf_prefix_aliases: tuple = ()
    hf_head_scopes = ("cls.",)
    # The config key named when an embedding's width does not fit a checkpoint.
    embedding_axis = H
    default_application = "encoder"
    takes_segments = True
    lm_output = naming.MLM_ACTIVATION
    conditional_norms = True
    residual_scores = True
    model_type_aliases: tuple = ()
    positions_after_padding = False
    google_absent: Optional[str] = None
    position_types: tuple = ()
    hf_classes: Dict[str, str] = {}
    layout_difference: Optional[str] = None
    classifier_hidden = naming.POOLER_DENSE
    classifier_activation = "tanh"
    hf_sequence_classifier = True
    causal_lm = False
    own_tokenizer = False
    reads_segments = True
    task_lora_layers = False
    mlm_activation: Optional[str] = None

    # --- structure -----------------------------------------------------------------
    def sequence_head(self, config: BertConfig) -> SequenceHead:
        """The sequence classifier's head (`[CLS]`, then `classifier_hidden` with `classifier_activation`)."""
        return SequenceHead(activation=self.classifier_activation)

    def config_to_train(self, config: BertConfig, initialised: bool) -> BertConfig:
        """The config of a model kbert trains; `initialised`: kbert draws its weights (no checkpoint).

        The same config here; a family whose bert4keras graph is kept for its checkpoints but
        trains badly from random weights changes it (T5.1.1).
        """
        return config

    def block_indices(self, config: BertConfig) -> List[Optional[int]]:
        """The index in each block's layer names, one per application (None: the shared block)."""
        if self.shared_blocks:
            return [None] * config.num_hidden_layers
        return list(range(config.num_hidden_layers))

    def has_position_table(self, config: BertConfig) -> bool:
        """Whether positions are rows of a learned table (`Embedding-Position`), which bounds the length.

        RoFormer's rotations, NEZHA's and T5's relative positions take any length.
        """
        return any(row.name == naming.EMBEDDING_POSITION for row in self.layer_params(config))

    def segment_input_size(self, config: BertConfig) -> int:
        """The segment ids `Input-Segment` takes unless the caller says (0: no segment input)."""
        return config.type_vocab_size

    def segment_table(self, config: BertConfig) -> bool:
        """Whether the graph has `Embedding-Segment` (`reads_segments`; a family whose configs may have no
        table says so per config)."""
        return self.reads_segments

    def has_mapping(self, config: BertConfig) -> bool:
        """Whether `Embedding-Mapping` (E -> H) exists: when `embedding_size` differs from H."""
        return config.embedding_width != config.hidden_size

    # --- analytic parameter counts ---------------------------------------------------
    def layer_params(self, config: BertConfig, *, with_pool=False, with_nsp=False, with_mlm=False,
                     with_discriminator=False) -> List[LayerParams]:
        """Every layer with parameters, in the model's order, with its formula."""
        return (self.embedding_params(config, with_mlm) + self.block_params(config)
                + self.head_params(config, with_pool=with_pool, with_nsp=with_nsp, with_mlm=with_mlm,
                                   with_discriminator=with_discriminator))

    def embedding_params(self, config: BertConfig, with_mlm: bool) -> List[LayerParams]:
        e, width = self._width(config)
        rows = [
            LayerParams(naming.EMBEDDING_TOKEN, "embeddings", f"V·{e}", config.vocab_size * width,
                        "shared with the MLM output" if with_mlm else ""),
            *([LayerParams(naming.EMBEDDING_SEGMENT, "embeddings", f"T·{e}", config.type_vocab_size * width)]
              if self.segment_table(config) else []),
            *self.position_params(config),
            LayerParams(naming.EMBEDDING_NORM, "embeddings", f"2·{e}", 2 * width),
        ]
        if self.has_mapping(config):
            rows.append(LayerParams(naming.EMBEDDING_MAPPING, "embeddings", "E·H + H",
                                    width * config.hidden_size + config.hidden_size,
                                    "maps the E-wide embeddings to the H-wide blocks"))
        return rows

    def position_params(self, config: BertConfig) -> List[LayerParams]:
        e, width = self._width(config)
        return [LayerParams(naming.EMBEDDING_POSITION, "embeddings", f"P·{e}",
                            config.max_position_embeddings * width)]

    def block_params(self, config: BertConfig) -> List[LayerParams]:
        h, i = config.hidden_size, config.intermediate_size
        shared = "the one block (attention, FeedForward, norms), shared by all L layers: counted once" \
            if self.shared_blocks else ""
        rows = []
        for index in dict.fromkeys(self.block_indices(config)):
            attention = naming.block(index, naming.ATTENTION)
            ffn = naming.block(index, naming.FEED_FORWARD)
            rows += [
                LayerParams(attention, "encoder", "4·(H·H + H)", 4 * (h * h + h),
                            shared or "query, key, value and output projections"),
                LayerParams(f"{attention}-Norm", "encoder", "2·H", 2 * h),
                LayerParams(ffn, "encoder", "H·I + I + I·H + H", 2 * h * i + i + h),
                LayerParams(f"{ffn}-Norm", "encoder", "2·H", 2 * h),
            ]
        return rows

    def head_params(self, config: BertConfig, *, with_pool, with_nsp, with_mlm,
                    with_discriminator) -> List[LayerParams]:
        h, v = config.hidden_size, config.vocab_size
        e, width = self._width(config)
        rows = []
        if with_pool or with_nsp:
            rows.append(LayerParams(naming.POOLER_DENSE, "pooler", "H·H + H", h * h + h))
        if with_nsp:
            rows.append(LayerParams(naming.NSP_PROBA, "heads", "2·H + 2", 2 * h + 2))
        if with_mlm:
            rows += [
                LayerParams(naming.MLM_DENSE, "heads", f"H·{e} + {e}", h * width + width),
                LayerParams(naming.MLM_NORM, "heads", f"2·{e}", 2 * width),
                LayerParams(naming.MLM_BIAS, "heads", "V", v,
                            "output weights are Embedding-Token's, counted there"),
            ]
        return rows

    def _width(self, config: BertConfig):
        """The embeddings' symbol and width: E where it differs from H."""
        return ("E", config.embedding_width) if self.has_mapping(config) else ("H", config.hidden_size)

    # --- Hugging Face's classes and config ------------------------------------------------
    def hf_architecture(self, heads: Heads) -> str:
        """The Hugging Face class that holds a model with `heads` (config.json's `architectures`)."""
        if heads.mlm and heads.nsp:
            return f"{self.hf_class}ForPreTraining"
        if heads.mlm:
            return f"{self.hf_class}ForMaskedLM"
        if heads.nsp:
            return f"{self.hf_class}ForNextSentencePrediction"
        return f"{self.hf_class}Model"

    def hf_with_heads(self, names: List[str]) -> bool:
        """Whether tensors `names` are written as the task model (the backbone under `hf_prefix`)."""
        return any(name.startswith(self.hf_head_scopes) for name in names)

    def hf_differences(self, config: BertConfig) -> List[str]:
        """How `transformers` would compute otherwise than this model, for a warning (T5's)."""
        return []

    def hf_computed_tensors(self, config: BertConfig) -> Dict[str, np.ndarray]:
        """Tensors Hugging Face stores that kbert computes (RoFormer's sinusoids), by backbone name."""
        return {}

    def hf_config(self, config: BertConfig, heads: Heads) -> dict:
        """A Hugging Face config.json for `config` and `heads`, in the config's Hugging Face keys: the config's own
        model_type where transformers has a class of its own for it (`hf_classes`), else the family's."""
        architecture = self.hf_architecture(heads)
        if config.model_type in self.hf_classes:
            model_type = config.model_type
            architecture = self.hf_classes[model_type] + architecture.removeprefix(self.hf_class)
        else:
            model_type = self.hf_model_type
        return {**config.to_hf_dict(), "model_type": model_type, "architectures": [architecture]}

    # --- checkpoint variable names ---------------------------------------------------
    @staticmethod
    def named_in(names: List[str]) -> Optional[str]:
        """The family (this one, or one of its variants) whose own checkpoint names `names` holds, in either
        layout; None: none of them (BERT's names are every family's default, `family_named_by`)."""
        return None

    def weight_layers(self, num_blocks: int) -> List[str]:
        """Every layer that can hold stored weights, for a checkpoint of `num_blocks` blocks."""
        layers = [naming.EMBEDDING_TOKEN, naming.EMBEDDING_SEGMENT, naming.EMBEDDING_POSITION,
                  naming.EMBEDDING_NORM, naming.EMBEDDING_MAPPING]
        indices = [None] if self.shared_blocks else range(num_blocks)
        for index in indices:
            for sublayer in (naming.ATTENTION, naming.FEED_FORWARD):
                layers += [naming.block(index, sublayer), naming.block(index, sublayer, "Norm")]
        return layers + [naming.POOLER_DENSE, naming.NSP_PROBA, naming.MLM_DENSE, naming.MLM_NORM,
                         naming.MLM_BIAS, naming.CLASSIFIER_DENSE]

    def layer_weights(self, layer: str) -> List[WeightName]:
        """The table rows of one layer (empty for layers without stored weights): a layer outside the blocks
        (`outside_weights`), else a block's (`block_weights`)."""
        fixed = self.outside_weights(layer)
        if layer in fixed:
            return fixed[layer]
        parsed = naming.parse_block(layer)
        return [] if parsed is None else self.block_weights(layer, *parsed)

    def outside_weights(self, layer: str) -> Dict[str, List[WeightName]]:
        """The table rows of the layers outside the blocks (embeddings, heads), by layer, named for `layer`."""
        e = self.embedding_axis
        return {
            naming.EMBEDDING_TOKEN: [embedding(layer, "bert/embeddings/word_embeddings",
                                               "embeddings.word_embeddings", V, e)],
            naming.EMBEDDING_SEGMENT: [embedding(layer, "bert/embeddings/token_type_embeddings",
                                                 "embeddings.token_type_embeddings", "type_vocab_size", e)],
            naming.EMBEDDING_POSITION: [embedding(layer, "bert/embeddings/position_embeddings",
                                                  "embeddings.position_embeddings",
                                                  "max_position_embeddings", e)],
            naming.EMBEDDING_NORM: norm(layer, "bert/embeddings/LayerNorm", "embeddings.LayerNorm", e),
            naming.EMBEDDING_MAPPING: dense(layer, "bert/encoder/embedding_hidden_mapping_in", None, (e, H)),
            naming.POOLER_DENSE: dense(layer, "bert/pooler/dense", "pooler.dense", (H, H)),
            naming.MLM_DENSE: dense(layer, "cls/predictions/transform/dense",
                                    "cls.predictions.transform.dense", (H, e)),
            naming.MLM_NORM: norm(layer, "cls/predictions/transform/LayerNorm",
                                  "cls.predictions.transform.LayerNorm", e),
            naming.MLM_BIAS: [WeightName(f"{layer}/bias", "cls/predictions/output_bias",
                                         "cls.predictions.bias", False, False, (V,))],
            naming.NSP_PROBA: output_weights(layer, "cls/seq_relationship/", "cls.seq_relationship",
                                             (H, "2")),
            naming.CLASSIFIER_DENSE: output_weights(layer, "", "classifier", (H, "num_labels")),
        }

    def block_weights(self, layer: str, index: Optional[int], sublayer: str, is_norm: bool) -> List[WeightName]:
        """Rows of a block's attention, feed-forward or norm layer, under Google BERT's names."""
        index = index or 0
        google, hf = f"bert/encoder/layer_{index}", f"encoder.layer.{index}"
        if sublayer == naming.ATTENTION and is_norm:
            return norm(layer, f"{google}/attention/output/LayerNorm", f"{hf}.attention.output.LayerNorm")
        if sublayer == naming.FEED_FORWARD and is_norm:
            return norm(layer, f"{google}/output/LayerNorm", f"{hf}.output.LayerNorm")
        if sublayer == naming.ATTENTION:
            rows = []
            for part in ("query", "key", "value"):
                rows += dense(f"{layer}/{part}", f"{google}/attention/self/{part}",
                              f"{hf}.attention.self.{part}", (H, H))
            return rows + dense(f"{layer}/output", f"{google}/attention/output/dense",
                                f"{hf}.attention.output.dense", (H, H))
        return (dense(f"{layer}/intermediate", f"{google}/intermediate/dense",
                      f"{hf}.intermediate.dense", (H, I))
                + dense(f"{layer}/output", f"{google}/output/dense", f"{hf}.output.dense", (I, H)))


class RobertaFamily(BertFamily):
    """RoBERTa as bert4keras builds it (`model="roberta"`): BERT's layout and checkpoint names.

    Chinese RoBERTa releases (e.g. `chinese_roberta_wwm_ext`) are BERT checkpoints,
    and are written as such for Hugging Face (`model_type` "bert"), so a
    config with `model_type` "bert" builds it. A config with `model_type`
    "roberta" is Hugging Face's RoBERTa, which computes otherwise: `hf_roberta`.
    """

    name = "roberta"
    model_type = "bert"
