"""ELECTRA's checkpoint names and parameter formulas (`model="electra"`)."""

from __future__ import annotations

from typing import List, Optional

from kbert.models import naming
from kbert.models.bert.family import BertFamily
from kbert.models.heads import Heads
from kbert.models.tables import E, H, LayerParams, WeightName, dense


class ElectraFamily(BertFamily):
    """ELECTRA's discriminator as bert4keras builds it: BERT with E-wide embeddings and its own head.

    No pooler or MLM head (ELECTRA's discriminator has neither);
    `with_discriminator` adds `Discriminator-Dense` and
    `Discriminator-Prediction` (one sigmoid per token: replaced or not).
    """

    hf_sequence_classifier = False  # no Hugging Face sequence classifier kbert writes

    name = "electra"
    model_type = "electra"
    graph = "kbert.models.electra.graph:ElectraGraph"
    heads = ("with_discriminator",)
    applications = ("encoder",)
    embedding_axis = E
    hf_model_type = "electra"
    hf_class = "Electra"
    hf_prefix = "electra"
    hf_head_scopes = ("discriminator_predictions.",)

    @staticmethod
    def named_in(names: List[str]) -> Optional[str]:
        """ELECTRA's names: Hugging Face's `embeddings_project` or `discriminator_predictions`, Google's
        `electra/…`."""
        if "embeddings_project.weight" in names or any(name.startswith(("discriminator_predictions.", "electra/"))
                                                       for name in names):
            return "electra"
        return None

    def hf_architecture(self, heads: Heads) -> str:
        return "ElectraForPreTraining" if heads.discriminator else "ElectraModel"

    def hf_config(self, config, heads: Heads) -> dict:
        """BERT's keys, E always written (Hugging Face's default is 128)."""
        return {**super().hf_config(config, heads), "embedding_size": config.embedding_width}

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
            return dense(layer, "electra/embeddings_project", "embeddings_project", (E, H))
        if layer == naming.DISCRIMINATOR_DENSE:
            return dense(layer, "discriminator_predictions/dense", "discriminator_predictions.dense", (H, H))
        if layer == naming.DISCRIMINATOR_PREDICTION:
            return dense(layer, "discriminator_predictions/dense_1",
                         "discriminator_predictions.dense_prediction", (H, "1"))
        # Everything else is BERT's table under the `electra/` scope, as in bert4keras (Hugging
        # Face's names are BERT's).
        return [row.renamed(row.google.replace("bert/", "electra/", 1), row.hf)
                for row in super().layer_weights(layer)]
