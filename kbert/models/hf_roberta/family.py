"""Hugging Face's RoBERTa and XLM-RoBERTa (`model="hf_roberta"`): BERT's blocks, RoBERTa's positions and names.

bert4keras's `model="roberta"` is BERT's layout, which the Chinese RoBERTa
releases use (`hfl/chinese-roberta-wwm-ext` is a BERT checkpoint). The
RoBERTa that Hugging Face's `RobertaModel` and `XLMRobertaModel` compute
(fairseq's, and the multilingual embedding models built on XLM-R) differs in
three ways, all of them here: `<pad>` is id 1 and `<s>` id 0, so the mask
hides id 1; positions are numbered over the real tokens from
`pad_token_id + 1`; the task models keep the backbone under `roberta.` and
the MLM head under `lm_head.`.
"""

from __future__ import annotations

from typing import List

from kbert.models import naming
from kbert.models.hub_family import HubFamily
from kbert.models.hf_roberta.config import RobertaConfig
from kbert.models.tables import H, WeightName, dense, norm

# Hugging Face's model_type -> the stem of its class names; all three are RobertaModel's computation.
HF_CLASSES = {"roberta": "Roberta", "xlm-roberta": "XLMRoberta", "camembert": "Camembert"}


class HfRobertaFamily(HubFamily):
    """RoBERTa as transformers builds it; a config with `model_type` roberta, xlm-roberta or camembert gets it.

    Layer names, order and parameter counts are BERT's (bert4keras's names);
    only the positions (`PositionEmbedding(padding_idx=pad_token_id)`), the
    padding id and the checkpoint names differ. An encoder only (no `lm` or
    `unilm` mask: RoBERTa reads no segments to tell source from target), with
    the pooler and the MLM head; there is no original TF checkpoint.
    """

    name = "hf_roberta"
    released_by, released_for = "RoBERTa in Hugging Face's layout", "fairseq and transformers"
    model_type = "roberta"
    model_type_aliases = ("xlm-roberta", "camembert")
    config_class = RobertaConfig
    heads = ("with_pool", "with_mlm")
    positions_after_padding = True
    layout_difference = ("Hugging Face's RoBERTa (model='hf_roberta') numbers positions from 2, after its padding id 1, "
                         "and its <s> is id 0; bert4keras's model='roberta' is BERT's layout (positions from 0, "
                         "padding id 0), for RoBERTa released as BERT checkpoints such as Chinese RoBERTa-wwm")
    hf_class = "Roberta"
    hf_prefix = "roberta"
    hf_head_scopes = ("lm_head.",)
    hf_classes = HF_CLASSES
    classifier_hidden = naming.CLASSIFIER_HIDDEN  # RobertaForSequenceClassification: classifier.dense

    def weight_layers(self, num_blocks: int) -> List[str]:
        return super().weight_layers(num_blocks) + [naming.CLASSIFIER_HIDDEN]

    def layer_weights(self, layer: str) -> List[WeightName]:
        heads = {
            # RobertaClassificationHead: [CLS] (`<s>`), dense and tanh, then out_proj to the labels.
            naming.CLASSIFIER_HIDDEN: dense(layer, "classifier/dense", "classifier.dense", (H, H)),
            naming.CLASSIFIER_DENSE: dense(layer, "classifier/out_proj", "classifier.out_proj", (H, "num_labels")),
            naming.MLM_DENSE: dense(layer, "cls/predictions/transform/dense", "lm_head.dense", (H, H)),
            naming.MLM_NORM: norm(layer, "cls/predictions/transform/LayerNorm", "lm_head.layer_norm"),
            naming.MLM_BIAS: [WeightName(f"{layer}/bias", "cls/predictions/output_bias", "lm_head.bias", False,
                                         False, ("vocab_size",))],
        }
        return heads.get(layer) or super().layer_weights(layer)
