"""DeBERTa-v2/v3's checkpoint names and parameter formulas (`model="deberta_v2"`).

Pure Python (no TensorFlow). The Keras graph is in `graph.py`.
"""

from __future__ import annotations

from typing import List, Optional

from kbert.models import naming
from kbert.models.hub_family import HubFamily
from kbert.models.deberta_v2.config import DebertaV2Config
from kbert.models.tables import H, LayerParams, WeightName, dense, norm


class DebertaV2Family(HubFamily):
    """DeBERTa-v2 and v3 as transformers builds them (`DebertaV2Model`, `DebertaV2ForMaskedLM`,
    `DebertaV2ForSequenceClassification`); a config with `model_type` deberta-v2 gets it.

    BERT's post-norm blocks and MLM head (at `cls.predictions`, transformers' legacy layout) with
    disentangled attention (`DisentangledSelfAttention`) over one relative position table shared by every
    layer (`Embedding-Relative-Position`, `2 · span` rows, layer-normalised in v3); v3 has no absolute
    positions and no segment table (`Input-Segment` is taken and ignored then); E-wide embeddings are mapped
    to H without a bias. No pooler in the backbone: a sequence classifier's (`pooler.dense`, GELU) is its own.
    An encoder only.

    Example:
    >>> family = DebertaV2Family()
    >>> config = family.config_class.from_dict({"vocab_size": 128100, "hidden_size": 768,
    ...     "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "type_vocab_size": 0,
    ...     "position_buckets": 256, "max_relative_positions": -1, "position_biased_input": False,
    ...     "relative_attention": True, "share_att_key": True, "pos_att_type": ["p2c", "c2p"],
    ...     "norm_rel_ebd": "layer_norm"})
    >>> sum(row.params for row in family.layer_params(config))  # deberta-v3-base's backbone
    183831552
    """

    name = "deberta_v2"
    released_by, released_for = "DeBERTa", "PyTorch and transformers"
    model_type = "deberta-v2"
    config_class = DebertaV2Config
    graph = "kbert.models.deberta_v2.graph:DebertaV2Graph"
    hf_class = "DebertaV2"
    hf_prefix = "deberta"
    hf_head_scopes = ("cls.", "pooler.")
    classifier_activation = "gelu"  # ContextPooler: pooler.dense, then pooler_hidden_act

    def segment_input_size(self, config: DebertaV2Config) -> int:
        return max(config.type_vocab_size, 1)  # every task feeds segment ids: taken even without a table (v3)

    def embedding_params(self, config: DebertaV2Config, with_mlm: bool) -> List[LayerParams]:
        e, width = self._width(config)
        rows = [LayerParams(naming.EMBEDDING_TOKEN, "embeddings", f"V·{e}", config.vocab_size * width,
                            "shared with the MLM output" if with_mlm else "")]
        if config.type_vocab_size:
            rows.append(LayerParams(naming.EMBEDDING_SEGMENT, "embeddings", f"T·{e}", config.type_vocab_size * width))
        if config.position_biased_input:
            rows += self.position_params(config)
        if self.has_mapping(config):
            rows.append(LayerParams(naming.EMBEDDING_MAPPING, "embeddings", "E·H", width * config.hidden_size,
                                    "maps the E-wide embeddings to H, without a bias"))
        return rows + [LayerParams(naming.EMBEDDING_NORM, "embeddings", "2·H", 2 * config.hidden_size)]

    def block_params(self, config: DebertaV2Config) -> List[LayerParams]:
        span, h = config.span, config.hidden_size
        normed = config.norm_rel_ebd == "layer_norm"
        table = LayerParams(naming.EMBEDDING_RELATIVE_POSITION, "encoder",
                            f"{2 * span}·H" + (" + 2·H" if normed else ""), 2 * span * h + (2 * h if normed else 0),
                            "the relative position table every layer reads" + (", layer-normalised" if normed else ""))
        return [table, *super().block_params(config)]

    def weight_layers(self, num_blocks: int) -> List[str]:
        return [naming.EMBEDDING_RELATIVE_POSITION] + super().weight_layers(num_blocks)

    def layer_weights(self, layer: str) -> List[WeightName]:
        if layer == naming.EMBEDDING_RELATIVE_POSITION:
            return [WeightName(f"{layer}/embeddings", "encoder/rel_embeddings", "encoder.rel_embeddings.weight",
                               False, False, ("2·span", H)),
                    *norm(f"{layer}/norm", "encoder/LayerNorm", "encoder.LayerNorm")]
        if layer == naming.EMBEDDING_MAPPING:
            return dense(layer, "embeddings/embed_proj", "embeddings.embed_proj", ("embedding_size", H))[:1]
        if layer in (naming.NSP_PROBA,):
            return []
        return super().layer_weights(layer)

    def block_weights(self, layer: str, index: Optional[int], sublayer: str, is_norm: bool) -> List[WeightName]:
        """BERT's names, but the attention's projections are `attention.self.{query,key,value}_proj`."""
        if sublayer == naming.ATTENTION and not is_norm:
            google, hf = f"encoder/layer_{index or 0}/attention", f"encoder.layer.{index or 0}.attention"
            rows = []
            for part in ("query", "key", "value"):
                rows += dense(f"{layer}/{part}", f"{google}/self/{part}_proj", f"{hf}.self.{part}_proj", (H, H))
            return rows + dense(f"{layer}/output", f"{google}/output/dense", f"{hf}.output.dense", (H, H))
        return super().block_weights(layer, index, sublayer, is_norm)
