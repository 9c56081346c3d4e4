"""RoFormer-v2's checkpoint names and parameter formulas (`model="roformer_v2"`)."""

from __future__ import annotations

from typing import List, Optional

from kbert.models import naming
from kbert.models.config import BertConfig
from kbert.models.roformer.family import RoformerFamily
from kbert.models.tables import LayerParams, WeightName

# The variables RoFormer-v2 drops from BERT's table (bert4keras's `variable_mapping` filter).
_DROPPED = ("/bias", "/beta", "/gamma")


class RoformerV2Family(RoformerFamily):
    """RoFormer-v2 as bert4keras builds it: RoFormer's rotary attention, no biases, a norm with no weights.

    Embeddings are token + segment, then Dropout, then the norm
    (`x / √(mean x² + ε)`: no mean, scale or offset). Every dense layer is
    bias-free, and weights start from bert4keras's depth-scaled initializer.
    The MLM head is the tied embedding alone (`Output-MLM-Activation`). The
    checkpoint names are BERT's without the biases and norms.
    """

    name = "roformer_v2"
    model_type = "roformer_v2"
    graph = "kbert.models.roformer_v2.graph:RoformerV2Graph"
    heads = ("with_mlm",)
    lm_output = naming.OUTPUT_MLM_ACTIVATION
    conditional_norms = False
    knows_hf_names = False
    hf_absent = ("Hugging Face's transformers has no RoFormer-v2 class (its RoFormer is v1, with biases and "
                 "LayerNorm weights)")

    @staticmethod
    def named_in(names: List[str]) -> Optional[str]:
        """RoFormer-v2's Google names: BERT's without biases."""
        if "bert/encoder/layer_0/attention/self/query/kernel" in names \
                and "bert/encoder/layer_0/attention/self/query/bias" not in names:
            return "roformer_v2"
        return RoformerFamily.named_in(names)

    def embedding_params(self, config: BertConfig, with_mlm: bool) -> List[LayerParams]:
        # BERT's token and segment rows; the norm has no weights and the mapping no bias.
        rows = [row for row in super().embedding_params(config, with_mlm)
                if row.name not in (naming.EMBEDDING_NORM, naming.EMBEDDING_MAPPING)]
        if self.has_mapping(config):
            rows.append(LayerParams(naming.EMBEDDING_MAPPING, "embeddings", "E·H",
                                    config.embedding_width * config.hidden_size,
                                    "maps the E-wide embeddings to the H-wide blocks; no bias"))
        return rows

    def block_params(self, config: BertConfig) -> List[LayerParams]:
        h, i = config.hidden_size, config.intermediate_size
        rows = []
        for index in self.block_indices(config):
            rows += [
                LayerParams(naming.block(index, naming.ATTENTION), "encoder", "4·H·H", 4 * h * h,
                            "query, key, value and output projections, no biases"),
                LayerParams(naming.block(index, naming.FEED_FORWARD), "encoder", "2·H·I", 2 * h * i,
                            "no biases; the norms have no weights"),
            ]
        return rows

    def head_params(self, config: BertConfig, *, with_pool, with_nsp, with_mlm,
                    with_discriminator) -> List[LayerParams]:
        if not (with_mlm and self.has_mapping(config)):
            return []  # the MLM output is Embedding-Token's transpose: no weights of its own
        return [LayerParams(naming.OUTPUT_MAPPING, "heads", "H·E", config.hidden_size * config.embedding_width)]

    def weight_layers(self, num_blocks: int) -> List[str]:
        return [layer for layer in super().weight_layers(num_blocks) if not layer.endswith("-Norm")]

    def layer_weights(self, layer: str) -> List[WeightName]:
        return [row for row in super().layer_weights(layer) if not row.google.endswith(_DROPPED)]
