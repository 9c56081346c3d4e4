"""DistilBERT's checkpoint names and parameter formulas (`model="distilbert"`).

Pure Python (no TensorFlow). The Keras graph is BERT's (`kbert.models.bert.graph`).
"""

from __future__ import annotations

from typing import List, Optional

from kbert.models import naming
from kbert.models.hub_family import HubFamily
from kbert.models.distilbert.config import DistilBertConfig
from kbert.models.tables import H, I, V, WeightName, dense, embedding, norm

ATTENTION_NAMES = {"query": "q_lin", "key": "k_lin", "value": "v_lin", "output": "out_lin"}  # kbert's: transformers'


def _dense(path: str, hf: str, axes) -> List[WeightName]:
    """A Linear under its Hugging Face name (the Google-style name, for inspection only, is the same with `/`)."""
    return dense(path, hf.replace(".", "/"), hf, axes)


def _norm(path: str, hf: str) -> List[WeightName]:
    return norm(path, hf.replace(".", "/"), hf)


def _embedding(path: str, hf: str, rows: str) -> WeightName:
    return embedding(path, hf.replace(".", "/"), hf, rows)


class DistilBertFamily(HubFamily):
    """DistilBERT as transformers builds it (`DistilBertModel`, `DistilBertForMaskedLM`,
    `DistilBertForSequenceClassification`); a config with `model_type` distilbert gets it.

    BERT's post-norm blocks and learned positions, with three differences:
    no segment table (the model keeps `Input-Segment`, so that kbert's
    tasks feed it as any other, and ignores it, as transformers ignores
    `token_type_ids`), no pooler, and a sequence classifier whose hidden
    dense (`pre_classifier`) is ReLU, not tanh. An encoder only (no `lm` or
    `unilm` mask) with the MLM head; no original TF checkpoint.

    Example:
    >>> family = DistilBertFamily()
    >>> config = family.config_class.from_dict({"vocab_size": 30522, "dim": 768, "n_layers": 6, "n_heads": 12,
    ...                                         "hidden_dim": 3072, "max_position_embeddings": 512})
    >>> sum(row.params for row in family.layer_params(config))  # distilbert-base-uncased
    66362880
    """

    name = "distilbert"
    released_by, released_for = "DistilBERT", "transformers"
    model_type = "distilbert"
    config_class = DistilBertConfig
    hf_class = "DistilBert"
    hf_prefix = "distilbert"
    hf_head_scopes = ("vocab_transform.", "vocab_layer_norm.", "vocab_projector.", "pre_classifier.")
    reads_segments = False
    own_tokenizer = False  # BERT's vocab.txt
    classifier_hidden = naming.CLASSIFIER_HIDDEN
    classifier_activation = "relu"

    @staticmethod
    def named_in(names: List[str]) -> Optional[str]:
        """DistilBERT's Hugging Face names (`q_lin`)."""
        return "distilbert" if any(".attention.q_lin." in name for name in names) else None

    def weight_layers(self, num_blocks: int) -> List[str]:
        return super().weight_layers(num_blocks) + [naming.CLASSIFIER_HIDDEN]

    def layer_weights(self, layer: str) -> List[WeightName]:
        heads = {
            naming.EMBEDDING_TOKEN: [_embedding(layer, "embeddings.word_embeddings", V)],
            naming.EMBEDDING_POSITION: [_embedding(layer, "embeddings.position_embeddings",
                                                  "max_position_embeddings")],
            naming.EMBEDDING_NORM: _norm(layer, "embeddings.LayerNorm"),
            naming.CLASSIFIER_HIDDEN: _dense(layer, "pre_classifier", (H, H)),
            naming.MLM_DENSE: _dense(layer, "vocab_transform", (H, H)),
            naming.MLM_NORM: _norm(layer, "vocab_layer_norm"),
            naming.MLM_BIAS: [WeightName(f"{layer}/bias", "vocab_projector/bias", "vocab_projector.bias", False, False, (V,))],
        }
        if layer in heads:
            return heads[layer]
        if layer in (naming.EMBEDDING_SEGMENT, naming.EMBEDDING_MAPPING, naming.POOLER_DENSE, naming.NSP_PROBA):
            return []
        return super().layer_weights(layer)

    def block_weights(self, layer: str, index: Optional[int], sublayer: str, is_norm: bool) -> List[WeightName]:
        hf = f"transformer.layer.{index or 0}"
        if is_norm:
            return _norm(layer, f"{hf}.{'sa' if sublayer == naming.ATTENTION else 'output'}_layer_norm")
        if sublayer == naming.ATTENTION:
            return [row for part, name in ATTENTION_NAMES.items()
                    for row in _dense(f"{layer}/{part}", f"{hf}.attention.{name}", (H, H))]
        return (_dense(f"{layer}/intermediate", f"{hf}.ffn.lin1", (H, I))
                + _dense(f"{layer}/output", f"{hf}.ffn.lin2", (I, H)))
