"""MPNet's checkpoint names and parameter formulas (`model="mpnet"`).

Pure Python (no TensorFlow). The Keras graph is in `graph.py`.
"""

from __future__ import annotations

from typing import List, Optional

from kbert.models import naming
from kbert.models.hf_roberta.family import HfRobertaFamily
from kbert.models.mpnet.config import MpnetConfig
from kbert.models.tables import H, LayerParams, WeightName, dense, norm


class MpnetFamily(HfRobertaFamily):
    """MPNet as transformers builds it (`MPNetModel`, `MPNetForMaskedLM`, `MPNetForSequenceClassification`);
    a config with `model_type` mpnet gets it.

    Hugging Face's RoBERTa (positions after the padding id 1, the same
    classification head and MLM head) with two differences: no segment
    table (`Input-Segment` is taken and ignored, as transformers ignores
    `token_type_ids`), and one relative position bias
    (`Embedding-Relative-Position`: T5's buckets, 32 per direction pair, up
    to distance 128, a score per head) made once and added to every layer's
    scaled attention scores.

    Example:
    >>> family = MpnetFamily()
    >>> config = family.config_class.from_dict({"vocab_size": 30527, "hidden_size": 768, "num_hidden_layers": 12,
    ...     "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 514})
    >>> sum(row.params for row in family.layer_params(config, with_pool=True))  # all-mpnet-base-v2
    109486464
    """

    name = "mpnet"
    released_by, released_for = "MPNet", "fairseq and transformers"
    model_type = "mpnet"
    model_type_aliases = ()
    config_class = MpnetConfig
    graph = "kbert.models.mpnet.graph:MpnetGraph"
    hf_class = "MPNet"
    hf_prefix = "mpnet"
    layout_difference = None
    reads_segments = False

    @staticmethod
    def named_in(names: List[str]) -> Optional[str]:
        """MPNet's Hugging Face names (`relative_attention_bias`)."""
        return "mpnet" if "encoder.relative_attention_bias.weight" in names else None

    def block_params(self, config: MpnetConfig) -> List[LayerParams]:
        buckets = config.relative_attention_num_buckets
        return [LayerParams(naming.EMBEDDING_RELATIVE_POSITION, "encoder", f"{buckets}·A",
                            buckets * config.num_attention_heads,
                            "a bias per head for each bucket of relative distance, shared by every layer"),
                *super().block_params(config)]


    def weight_layers(self, num_blocks: int) -> List[str]:
        return [naming.EMBEDDING_RELATIVE_POSITION] + super().weight_layers(num_blocks)

    def layer_weights(self, layer: str) -> List[WeightName]:
        if layer == naming.EMBEDDING_RELATIVE_POSITION:
            return [WeightName(f"{layer}/embeddings", "encoder/relative_attention_bias",
                               "encoder.relative_attention_bias.weight", False, False,
                               ("relative_attention_num_buckets", "num_attention_heads"))]
        if layer in (naming.EMBEDDING_SEGMENT, naming.EMBEDDING_MAPPING, naming.NSP_PROBA):
            return []
        return super().layer_weights(layer)

    def block_weights(self, layer: str, index: Optional[int], sublayer: str, is_norm: bool) -> List[WeightName]:
        """BERT's names, but the attention is `attention.attn.{q,k,v,o}` and its norm `attention.LayerNorm`."""
        google, hf = f"encoder/layer_{index or 0}", f"encoder.layer.{index or 0}"
        if sublayer == naming.ATTENTION and is_norm:
            return norm(layer, f"{google}/attention/LayerNorm", f"{hf}.attention.LayerNorm")
        if sublayer == naming.ATTENTION:
            rows = []
            for part, name in (("query", "q"), ("key", "k"), ("value", "v"), ("output", "o")):
                rows += dense(f"{layer}/{part}", f"{google}/attention/attn/{name}", f"{hf}.attention.attn.{name}",
                              (H, H))
            return rows
        return super().block_weights(layer, index, sublayer, is_norm)
