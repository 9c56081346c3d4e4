"""ALBERT's checkpoint names and parameter formulas (`model="albert"` and `"albert_unshared"`).

The graph is BERT's (`kbert.models.bert.graph`): with `embedding_size` it
adds `Embedding-Mapping`, and with `shared_blocks` its one block is named
without an index and called L times.
"""

from __future__ import annotations

import re
from typing import List, Optional

from kbert.models.bert.family import BertFamily
from kbert.models.tables import E, WeightName

# Google BERT's names inside a block -> Google ALBERT's names inside its one block.
_BLOCK_SCOPE = "bert/encoder/transformer/group_0/inner_group_0"
_ALBERT_NAMES = (
    (r"attention/self/", "attention_1/self/"),
    (r"attention/output/dense/", "attention_1/output/dense/"),
    (r"attention/output/LayerNorm/", "LayerNorm/"),
    (r"intermediate/dense/", "ffn_1/intermediate/dense/"),
    (r"output/dense/", "ffn_1/intermediate/output/dense/"),
    (r"output/LayerNorm/", "LayerNorm_1/"),
)


class AlbertFamily(BertFamily):
    """ALBERT as bert4keras builds it: E-wide embeddings, one block shared by the L layers.

    Loads Google's ALBERT checkpoints (and brightmart's Chinese `albert_*_zh`
    releases in Google's layout): `bert/encoder/embedding_hidden_mapping_in`
    and `bert/encoder/transformer/group_0/inner_group_0/…`.
    """

    name = "albert"
    model_type = "albert"
    shared_blocks = True
    knows_hf_names = False
    embedding_axis = E

    def block_weights(self, layer: str, index: Optional[int], sublayer: str, is_norm: bool) -> List[WeightName]:
        return [row.renamed(_albert_name(row.google)) for row in super().block_weights(layer, 0, sublayer, is_norm)]


class AlbertUnsharedFamily(AlbertFamily):
    """ALBERT with L separate blocks (`model="albert_unshared"`), each loaded from the checkpoint's one block.

    As in bert4keras, every block starts from the same checkpoint weights and
    is fine-tuned on its own. A model of this family cannot be saved in
    ALBERT's layout (one block), which has no room for L different blocks.
    """

    name = "albert_unshared"
    shared_blocks = False


def _albert_name(bert_name: str) -> str:
    rest = re.match(r"bert/encoder/layer_\d+/(.*)", bert_name).group(1)
    for bert_part, albert_part in _ALBERT_NAMES:
        if rest.startswith(bert_part):
            return f"{_BLOCK_SCOPE}/{albert_part}{rest[len(bert_part):]}"
    raise ValueError(f"no ALBERT name for {bert_name}")  # every BERT block name is listed above
