"""The one table from kbert's weights to Google's and Hugging Face's names.

Every Keras variable of a kbert model (by its path, e.g.
`Transformer-0-FeedForward/intermediate/kernel`) maps to a Google checkpoint
variable (`bert/encoder/layer_0/intermediate/dense/kernel`) and a Hugging Face
tensor (`encoder.layer.0.intermediate.dense.weight`, stored transposed as
PyTorch's Linear does). Loading, saving, inspecting and converting all read
this table; no other module spells these names.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Dict, List, Optional, Tuple

import numpy as np

from kbert import naming

GOOGLE, HF = "google", "hf"


@dataclasses.dataclass(frozen=True)
class WeightName:
    """Where one Keras variable lives in the two checkpoint formats.

    Attributes:
        path: the Keras variable path (`layer/.../name`).
        google: the Google checkpoint variable name.
        hf: the Hugging Face tensor name, without the `bert.` prefix.
        google_transposed: Google stores the transpose of the Keras kernel.
        hf_transposed: Hugging Face stores the transpose (every Linear weight).
        axes: for each Keras axis, the config key that sets its size.
    """

    path: str
    google: str
    hf: str
    google_transposed: bool
    hf_transposed: bool
    axes: Tuple[str, ...]

    def name(self, fmt: str) -> str:
        return self.google if fmt == GOOGLE else self.hf

    def transposed(self, fmt: str) -> bool:
        return self.google_transposed if fmt == GOOGLE else self.hf_transposed


H, V, I = "hidden_size", "vocab_size", "intermediate_size"


def _dense(path: str, google: str, hf: str, axes: Tuple[str, str]) -> List[WeightName]:
    return [
        WeightName(f"{path}/kernel", f"{google}/kernel", f"{hf}.weight", False, True, axes),
        WeightName(f"{path}/bias", f"{google}/bias", f"{hf}.bias", False, False, axes[1:]),
    ]


def _output_weights(path: str, google_scope: str, hf: str, axes: Tuple[str, str]) -> List[WeightName]:
    """Google's NSP and run_classifier heads: `[outputs, H]` output_weights and output_bias."""
    return [
        WeightName(f"{path}/kernel", f"{google_scope}output_weights", f"{hf}.weight", True, True, axes),
        WeightName(f"{path}/bias", f"{google_scope}output_bias", f"{hf}.bias", False, False, axes[1:]),
    ]


def _norm(path: str, google: str, hf: str) -> List[WeightName]:
    return [
        WeightName(f"{path}/gamma", f"{google}/gamma", f"{hf}.weight", False, False, (H,)),
        WeightName(f"{path}/beta", f"{google}/beta", f"{hf}.bias", False, False, (H,)),
    ]


def _embedding(path: str, google: str, hf: str, rows: str) -> WeightName:
    return WeightName(f"{path}/embeddings", google, f"{hf}.weight", False, False, (rows, H))


def _layer_names(layer: str) -> List[WeightName]:
    """The table rows of one kbert layer (empty for layers without weights)."""
    fixed = {
        naming.EMBEDDING_TOKEN: [_embedding(layer, "bert/embeddings/word_embeddings",
                                            "embeddings.word_embeddings", V)],
        naming.EMBEDDING_SEGMENT: [_embedding(layer, "bert/embeddings/token_type_embeddings",
                                              "embeddings.token_type_embeddings", "type_vocab_size")],
        naming.EMBEDDING_POSITION: [_embedding(layer, "bert/embeddings/position_embeddings",
                                               "embeddings.position_embeddings",
                                               "max_position_embeddings")],
        naming.EMBEDDING_NORM: _norm(layer, "bert/embeddings/LayerNorm", "embeddings.LayerNorm"),
        naming.POOLER_DENSE: _dense(layer, "bert/pooler/dense", "pooler.dense", (H, H)),
        naming.MLM_DENSE: _dense(layer, "cls/predictions/transform/dense",
                                 "cls.predictions.transform.dense", (H, H)),
        naming.MLM_NORM: _norm(layer, "cls/predictions/transform/LayerNorm",
                               "cls.predictions.transform.LayerNorm"),
        naming.MLM_BIAS: [WeightName(f"{layer}/bias", "cls/predictions/output_bias",
                                     "cls.predictions.bias", False, False, (V,))],
        naming.NSP_PROBA: _output_weights(layer, "cls/seq_relationship/", "cls.seq_relationship",
                                          (H, "2")),
        naming.CLASSIFIER_DENSE: _output_weights(layer, "", "classifier", (H, "num_labels")),
    }
    if layer in fixed:
        return fixed[layer]
    match = re.fullmatch(r"Transformer-(\d+)-(MultiHeadSelfAttention|FeedForward)(-Norm)?", layer)
    if not match:
        return []
    index, sublayer, is_norm = int(match.group(1)), match.group(2), bool(match.group(3))
    google, hf = f"bert/encoder/layer_{index}", f"encoder.layer.{index}"
    if sublayer == naming.ATTENTION and is_norm:
        return _norm(layer, f"{google}/attention/output/LayerNorm", f"{hf}.attention.output.LayerNorm")
    if sublayer == naming.FEED_FORWARD and is_norm:
        return _norm(layer, f"{google}/output/LayerNorm", f"{hf}.output.LayerNorm")
    if sublayer == naming.ATTENTION:
        rows = []
        for part in ("query", "key", "value"):
            rows += _dense(f"{layer}/{part}", f"{google}/attention/self/{part}",
                           f"{hf}.attention.self.{part}", (H, H))
        return rows + _dense(f"{layer}/output", f"{google}/attention/output/dense",
                             f"{hf}.attention.output.dense", (H, H))
    return (_dense(f"{layer}/intermediate", f"{google}/intermediate/dense",
                   f"{hf}.intermediate.dense", (H, I))
            + _dense(f"{layer}/output", f"{google}/output/dense", f"{hf}.output.dense", (I, H)))


def weight_names(model) -> List[WeightName]:
    """The table rows for every variable of `model`, in the model's order.

    Raises `ValueError` for a variable the table does not know (a layer that
    kbert's builder does not make).
    """
    rows = {row.path: row for layer in model.layers for row in _layer_names(layer.name)}
    names = []
    for variable in model.weights:
        if variable.path not in rows:
            raise ValueError(f"no checkpoint name for the model variable {variable.path!r}")
        names.append(rows[variable.path])
    return names


def values_for(model, fmt: str) -> List[Tuple[WeightName, np.ndarray]]:
    """Each variable's table row and value, in the layout `fmt` stores (transposed or not)."""
    variables = {variable.path: variable for variable in model.weights}
    values = []
    for row in weight_names(model):
        value = variables[row.path].numpy()
        values.append((row, value.T if row.transposed(fmt) else value))
    return values


def layer_of(path: str) -> str:
    """The layer a Keras variable path belongs to."""
    return path.split("/", 1)[0]


def known_names(fmt: str, num_layers: int, heads: bool = True) -> Dict[str, str]:
    """Checkpoint name -> Keras path for a model of `num_layers` blocks.

    Used to say which kbert layer a checkpoint variable would feed (for
    `kbert inspect`), without building a model.
    """
    layers = [naming.EMBEDDING_TOKEN, naming.EMBEDDING_SEGMENT, naming.EMBEDDING_POSITION,
              naming.EMBEDDING_NORM]
    for index in range(num_layers):
        for sublayer in (naming.ATTENTION, naming.FEED_FORWARD):
            layers += [naming.block(index, sublayer), naming.block(index, sublayer, "Norm")]
    if heads:
        layers += [naming.POOLER_DENSE, naming.NSP_PROBA, naming.MLM_DENSE, naming.MLM_NORM,
                   naming.MLM_BIAS, naming.CLASSIFIER_DENSE]
    return {row.name(fmt): row.path for layer in layers for row in _layer_names(layer)}


def block_count(names) -> int:
    """Number of Transformer blocks a checkpoint's names mention (`layer_3/`, `layer.3.`)."""
    blocks = [int(m.group(1)) for name in names for m in [re.search(r"layer[._](\d+)[./]", name)] if m]
    return max(blocks) + 1 if blocks else 0


def config_key_for(row: WeightName, model_shape, source_shape) -> Optional[str]:
    """The config key whose value probably explains a shape mismatch."""
    for axis, key in enumerate(row.axes):
        if axis < len(model_shape) and axis < len(source_shape) \
                and model_shape[axis] != source_shape[axis]:
            return key
    return None
