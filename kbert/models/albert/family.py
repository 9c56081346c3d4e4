"""ALBERT's checkpoint names and parameter formulas (`model="albert"` and `"albert_unshared"`).

The graph is BERT's (`kbert.models.bert.graph`): with `embedding_size` it
adds `Embedding-Mapping`, and with `shared_blocks` its one block is named
without an index and called L times.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, ClassVar, List, Mapping, Optional

from kbert.errors import ConfigError
from kbert.models import naming
from kbert.models.config import BertConfig
from kbert.models.bert.family import BertFamily
from kbert.models.heads import Heads
from kbert.models.tables import E, WeightName, hf_suffix

# Google BERT's names inside a block -> Google ALBERT's names inside its one block.
_BLOCK_SCOPE = "bert/encoder/transformer/group_0/inner_group_0"
_ALBERT_NAMES = (
    ("attention/self/", "attention_1/self/"),
    ("attention/output/dense/", "attention_1/output/dense/"),
    ("attention/output/LayerNorm/", "LayerNorm/"),
    ("intermediate/dense/", "ffn_1/intermediate/dense/"),
    ("output/dense/", "ffn_1/intermediate/output/dense/"),
    ("output/LayerNorm/", "LayerNorm_1/"),
)
# The same for Hugging Face: BERT's `encoder.layer.0.…` -> ALBERT's one shared layer.
_HF_BLOCK_SCOPE = "encoder.albert_layer_groups.0.albert_layers.0"
_HF_ALBERT_NAMES = (
    ("attention.self.", "attention."),
    ("attention.output.dense.", "attention.dense."),
    ("attention.output.LayerNorm.", "attention.LayerNorm."),
    ("intermediate.dense.", "ffn."),
    ("output.dense.", "ffn_output."),
    ("output.LayerNorm.", "full_layer_layer_norm."),
)
# ALBERT's own Hugging Face names outside the block (the pooler, the heads).
_HF_LAYERS = {
    naming.EMBEDDING_MAPPING: "encoder.embedding_hidden_mapping_in",
    naming.POOLER_DENSE: "pooler",
    naming.MLM_DENSE: "predictions.dense",
    naming.MLM_NORM: "predictions.LayerNorm",
    naming.MLM_BIAS: "predictions",
    naming.NSP_PROBA: "sop_classifier.classifier",
}


@dataclasses.dataclass(frozen=True)
class AlbertConfig(BertConfig):
    """BERT's keys (`embedding_size` is E); Hugging Face's and Google's `num_hidden_groups` and
    `inner_group_num`, when given, must be 1: one block shared by all L layers, as bert4keras builds."""

    family: ClassVar[str] = "albert"

    @classmethod
    def check_unread_keys(cls, values: Mapping[str, Any], source: str) -> None:
        for key in ("num_hidden_groups", "inner_group_num"):
            if values.get(key, 1) != 1:
                raise ConfigError(f"{source}: key {key!r}: kbert, as bert4keras, builds ALBERT with one group "
                                  f"of one layer shared by all layers (expected 1, got {values[key]!r})")


class AlbertFamily(BertFamily):
    """ALBERT as bert4keras builds it: E-wide embeddings, one block shared by the L layers.

    Loads Google's ALBERT checkpoints (and brightmart's Chinese `albert_*_zh`
    releases in Google's layout): `bert/encoder/embedding_hidden_mapping_in`
    and `bert/encoder/transformer/group_0/inner_group_0/…`.
    """

    hf_sequence_classifier = False  # no Hugging Face sequence classifier kbert writes

    name = "albert"
    model_type = hf_model_type = "albert"
    config_class = AlbertConfig
    shared_blocks = True
    embedding_axis = E
    hf_class = "Albert"
    hf_prefix = "albert"
    hf_head_scopes = ("predictions.", "sop_classifier.")

    @staticmethod
    def named_in(names: List[str]) -> Optional[str]:
        """ALBERT's shared layer groups: Hugging Face's `albert_layer_groups`, Google's `…/transformer/group_0/…`."""
        if any(name.startswith("encoder.albert_layer_groups.") or "/transformer/group_0/" in name for name in names):
            return "albert"
        return None

    def block_weights(self, layer: str, index: Optional[int], sublayer: str, is_norm: bool) -> List[WeightName]:
        return [row.renamed(_renamed(row.google, _BLOCK_SCOPE, _ALBERT_NAMES, "/"),
                            _renamed(row.hf, _HF_BLOCK_SCOPE, _HF_ALBERT_NAMES, "."))
                for row in super().block_weights(layer, 0, sublayer, is_norm)]

    def layer_weights(self, layer: str) -> List[WeightName]:
        rows = super().layer_weights(layer)
        if layer not in _HF_LAYERS:
            return rows
        return [row.renamed(row.google, f"{_HF_LAYERS[layer]}.{hf_suffix(row)}") for row in rows]

    def hf_config(self, config, heads: Heads) -> dict:
        """BERT's keys, E always written (Hugging Face's default is 128), one group of one layer."""
        return {**super().hf_config(config, heads), "embedding_size": config.embedding_width,
                "num_hidden_groups": 1, "inner_group_num": 1}


class AlbertUnsharedFamily(AlbertFamily):
    """ALBERT with L separate blocks (`model="albert_unshared"`), each loaded from the checkpoint's one block.

    As in bert4keras, every block starts from the same checkpoint weights and
    is fine-tuned on its own. A model of this family cannot be saved in
    ALBERT's layout (one block), which has no room for L different blocks.
    """

    name = "albert_unshared"
    shared_blocks = False


def _renamed(bert_name: str, scope: str, parts, separator: str) -> str:
    """A BERT block variable's name (Google's or Hugging Face's) in ALBERT's shared block."""
    rest = re.match(rf"(?:bert/encoder/layer_|encoder\.layer\.)\d+{re.escape(separator)}(.*)", bert_name).group(1)
    for bert_part, albert_part in parts:
        if rest.startswith(bert_part):
            return f"{scope}{separator}{albert_part}{rest[len(bert_part):]}"
    raise ValueError(f"no ALBERT name for {bert_name}")  # every BERT block name is listed above
