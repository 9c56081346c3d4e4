"""ELECTRA's checkpoint names and parameter formulas (`model="electra"`)."""

from __future__ import annotations

from typing import List

from kbert.models import naming
from kbert.models.bert.family import BertFamily
from kbert.models.tables import E, H, LayerParams, WeightName, dense


class ElectraFamily(BertFamily):
    """ELECTRA's discriminator as bert4keras builds it: BERT with E-wide embeddings and its own head.

    No pooler or MLM head (ELECTRA's discriminator has neither);
    `with_discriminator` adds `Discriminator-Dense` and
    `Discriminator-Prediction` (one sigmoid per token: replaced or not).
    """

    name = "electra"
    model_type = "electra"
    graph = "kbert.models.electra.graph:ElectraGraph"
    heads = ("with_discriminator",)
    applications = ("encoder",)
    knows_hf_names = False
    embedding_axis = E

    def head_params(self, config, *, with_pool, with_nsp, with_mlm, with_discriminator) -> List[LayerParams]:
        h = config.hidden_size
        if not with_discriminator:
            return []
        return [LayerParams(naming.DISCRIMINATOR_DENSE, "heads", "H·H + H", h * h + h),
                LayerParams(naming.DISCRIMINATOR_PREDICTION, "heads", "H + 1", h + 1)]

    def weight_layers(self, num_blocks: int) -> List[str]:
        return super().weight_layers(num_blocks) + [naming.DISCRIMINATOR_DENSE, naming.DISCRIMINATOR_PREDICTION]

    def layer_weights(self, layer: str) -> List[WeightName]:
        if layer == naming.EMBEDDING_MAPPING:
            return dense(layer, "electra/embeddings_project", None, (E, H))
        if layer == naming.DISCRIMINATOR_DENSE:
            return dense(layer, "discriminator_predictions/dense", None, (H, H))
        if layer == naming.DISCRIMINATOR_PREDICTION:
            return dense(layer, "discriminator_predictions/dense_1", None, (H, "1"))
        # Everything else is BERT's table under the `electra/` scope, as in bert4keras.
        return [row.renamed(row.google.replace("bert/", "electra/", 1))
                for row in super().layer_weights(layer)]
