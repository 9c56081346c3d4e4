"""Kbert's weights and their names in checkpoints: the table rows, and lookups through a model's family.

Every Keras variable of a kbert model (by its path, e.g.
`Transformer-0-FeedForward/intermediate/kernel`) maps to a variable of the
family's original TF checkpoint (`bert/encoder/layer_0/intermediate/dense/kernel`)
and, where kbert knows the family's Hugging Face layout, a Hugging Face tensor
(`encoder.layer.0.intermediate.dense.weight`, stored transposed as PyTorch's
Linear does). Each family owns its table (`kbert.models.<family>.family`);
loading, saving, inspecting and converting all read it through the functions
here, and no other module spells these names.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Dict, List, Optional, Tuple

import numpy as np


GOOGLE, HF = "google", "hf"


@dataclasses.dataclass(frozen=True)
class WeightName:
    """Where one Keras variable lives in the two checkpoint formats.

    Attributes:
        path: the Keras variable path (`layer/.../name`).
        google: the Google checkpoint variable name.
        hf: the Hugging Face tensor name, without the `bert.` prefix (None:
            kbert does not know this family's Hugging Face layout).
        google_transposed: Google stores the transpose of the Keras kernel.
        hf_transposed: Hugging Face stores the transpose (every Linear weight).
        axes: for each Keras axis, the config key that sets its size.
    """

    path: str
    google: str
    hf: Optional[str]
    google_transposed: bool
    hf_transposed: bool
    axes: Tuple[str, ...]

    def name(self, fmt: str) -> Optional[str]:
        return self.google if fmt == GOOGLE else self.hf

    def renamed(self, google: str) -> "WeightName":
        """The same variable under another family's checkpoint name (no Hugging Face name)."""
        return dataclasses.replace(self, google=google, hf=None)

    def transposed(self, fmt: str) -> bool:
        return self.google_transposed if fmt == GOOGLE else self.hf_transposed


H, V, I, E = "hidden_size", "vocab_size", "intermediate_size", "embedding_size"


def dense(path: str, google: str, hf: Optional[str], axes: Tuple[str, str]) -> List[WeightName]:
    return [
        WeightName(f"{path}/kernel", f"{google}/kernel", hf and f"{hf}.weight", False, True, axes),
        WeightName(f"{path}/bias", f"{google}/bias", hf and f"{hf}.bias", False, False, axes[1:]),
    ]


def output_weights(path: str, google_scope: str, hf: str, axes: Tuple[str, str]) -> List[WeightName]:
    """Google's NSP and run_classifier heads: `[outputs, H]` output_weights and output_bias."""
    return [
        WeightName(f"{path}/kernel", f"{google_scope}output_weights", f"{hf}.weight", True, True, axes),
        WeightName(f"{path}/bias", f"{google_scope}output_bias", f"{hf}.bias", False, False, axes[1:]),
    ]


def norm(path: str, google: str, hf: str, width: str = H) -> List[WeightName]:
    return [
        WeightName(f"{path}/gamma", f"{google}/gamma", f"{hf}.weight", False, False, (width,)),
        WeightName(f"{path}/beta", f"{google}/beta", f"{hf}.bias", False, False, (width,)),
    ]


def embedding(path: str, google: str, hf: str, rows: str, width: str = H) -> WeightName:
    return WeightName(f"{path}/embeddings", google, f"{hf}.weight", False, False, (rows, width))


def weight_names(model) -> List[WeightName]:
    """The table rows for every stored variable of `model`, in the model's order.

    The model's family (`family_of`) gives the table. Variables that the
    family computes from the config (NEZHA's sinusoidal relative positions)
    are in no checkpoint and have no row. Raises `ValueError` for a variable
    the table does not know (a layer that kbert's builders do not make).
    """
    family = family_of(model)
    rows = {row.path: row for layer in model.layers for row in family.layer_weights(layer.name)}
    names = []
    for variable in model.weights:
        if layer_of(variable.path) in family.derived_layers:
            continue
        if variable.path not in rows:
            raise ValueError(f"no checkpoint name for the model variable {variable.path!r}")
        names.append(rows[variable.path])
    return names


def check_hf_names(family, context: str, outcome: str) -> None:
    """Raises `CheckpointError` (starting with `context`, ending with `outcome`) unless kbert knows
    the family's Hugging Face names (BERT and RoBERTa so far)."""
    from kbert.errors import CheckpointError

    if not family.knows_hf_names:
        raise CheckpointError(f"{context}: kbert knows Hugging Face safetensors names for BERT and RoBERTa "
                              f"only; for model={family.name!r} use its original TF checkpoint. {outcome}")


def weight_names_in(model, fmt: str) -> List[WeightName]:
    """`weight_names(model)`, after checking that format `fmt` can hold every one of them.

    Raises `CheckpointError` when kbert does not know the family's Hugging
    Face names, or when two variables would share one name (ALBERT's layout
    holds one block; `albert_unshared` has one per layer).
    """
    from kbert.errors import CheckpointError

    family = family_of(model)
    rows = weight_names(model)
    if fmt == HF:
        check_hf_names(family, f"model={family.name!r}", "Nothing was written")
    seen: Dict[str, str] = {}
    for row in rows:
        name = row.name(fmt)
        if name in seen:
            raise CheckpointError(
                f"model={family.name!r}: {seen[name]} and {row.path} would both be {name}: the "
                f"checkpoint layout holds one block, this model one per layer; nothing was written. "
                "Save it with model.save_weights or as a .keras file instead")
        seen[name] = row.path
    return rows


def values_for(model, fmt: str) -> List[Tuple[WeightName, np.ndarray]]:
    """Each variable's table row and value, in the layout `fmt` stores (transposed or not)."""
    variables = {variable.path: variable for variable in model.weights}
    values = []
    for row in weight_names_in(model, fmt):
        value = variables[row.path].numpy()
        values.append((row, value.T if row.transposed(fmt) else value))
    return values


def layer_of(path: str) -> str:
    """The layer a Keras variable path belongs to."""
    return path.split("/", 1)[0]


def family_of(model):
    """The family (`kbert.models.registry`) of a model from kbert's builders; BERT for other models."""
    from kbert.models.registry import get_family

    return get_family(getattr(model, "family", "bert"))


def known_names(fmt: str, num_layers: int, family=None) -> Dict[str, str]:
    """Checkpoint name -> Keras path for a model of `num_layers` blocks with every head.

    Used to say which kbert layer a checkpoint variable would feed (for
    `kbert inspect`), without building a model. `family` defaults to BERT.
    """
    if family is None:
        from kbert.models.registry import get_family

        family = get_family("bert")
    return {row.name(fmt): row.path for layer in family.weight_layers(num_layers)
            for row in family.layer_weights(layer) if row.name(fmt)}


def family_named_by(names) -> str:
    """The family whose own checkpoint names appear in `names`: ELECTRA's `electra/…`,
    ALBERT's `…/transformer/group_0/…`, else BERT (NEZHA and RoFormer use BERT's names).
    """
    names = list(names)
    if any(name.startswith("electra/") for name in names):
        return "electra"
    if any("/transformer/group_0/" in name for name in names):
        return "albert"
    return "bert"


def block_count(names) -> int:
    """Number of Transformer blocks a checkpoint's names mention (`layer_3/`, `layer.3.`; ALBERT's shared block: 1)."""
    blocks = [int(m.group(1)) for name in names for m in [re.search(r"layer[._](\d+)[./]", name)] if m]
    if blocks:
        return max(blocks) + 1
    return 1 if any("/transformer/group_0/" in name for name in names) else 0


def config_key_for(row: WeightName, model_shape, source_shape) -> Optional[str]:
    """The config key whose value probably explains a shape mismatch."""
    for axis, key in enumerate(row.axes):
        if axis < len(model_shape) and axis < len(source_shape) \
                and model_shape[axis] != source_shape[axis]:
            return key
    return None
