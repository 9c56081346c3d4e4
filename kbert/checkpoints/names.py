"""Lookups in the weight tables through a model's family: which checkpoint name each variable has.

Each family writes its table (`WeightName` rows, `kbert.models.tables`) in
its own folder (`kbert.models.<family>.family`); loading, saving, inspecting
and converting read it through the functions here: the rows of a built
model, the names a checkpoint of L blocks can hold, the family a
checkpoint's names belong to.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

import numpy as np

from kbert.errors import CheckpointError
from kbert.models.registry import FAMILIES, get_family
from kbert.models.tables import HF, WeightName


def weight_names(model) -> List[WeightName]:
    """The table rows for every stored variable of `model`, in the model's order.

    The model's family (`family_of`) gives the table. Variables that the
    family computes from the config (NEZHA's sinusoidal relative positions)
    are in no checkpoint and have no row; nor, in a model built with
    `layer_norm_cond`, are the condition's layers and the norms' condition
    projections (as in bert4keras); nor task LoRA pairs (`task_lora`), which
    sit beside the weights they update (`kbert.checkpoints.task_adapters.task_pairs`
    reads them); nor Keras's LoRA pairs (`enable_lora`), which `values_for`
    merges into their kernels. Raises `ValueError` for another variable
    the table does not know (a layer that kbert's builders do not make).
    """
    family = family_of(model)
    rows = {row.path: row for layer in model.layers for row in family.layer_weights(layer.name)}
    conditional = bool((getattr(model, "build_spec", None) or {}).get("layer_norm_cond"))
    names = []
    for variable in model.weights:
        if layer_of(variable.path) in family.derived_layers or (conditional and variable.path not in rows) \
                or variable.path.endswith(("/task_lora_a", "/task_lora_b", "/lora_kernel_a", "/lora_kernel_b",
                                           "/lora_embeddings_a", "/lora_embeddings_b")):
            continue
        if variable.path not in rows:
            raise ValueError(f"no checkpoint name for the model variable {variable.path!r}")
        names.append(rows[variable.path])
    return names


def hf_families() -> List[str]:
    """The families whose Hugging Face safetensors kbert reads and writes.

    >>> [name for name in ("albert", "gpt2", "gpt2_ml", "mt5.1.1", "mt5.1.1_decoder") if name in hf_families()]
    ['albert', 'gpt2', 'mt5.1.1']
    """
    return [name for name in FAMILIES if get_family(name).knows_hf_names]


def hf_prefixes() -> Tuple[str, ...]:
    """The backbones' scopes in Hugging Face's task models (`bert.`, `albert.`, ...; GTE's `new.` too)."""
    return tuple(dict.fromkeys(f"{prefix}." for name in hf_families()
                               for prefix in (get_family(name).hf_prefix, *get_family(name).hf_prefix_aliases)
                               if prefix))


def check_hf_names(family, context: str, outcome: str) -> None:
    """Raises `CheckpointError` (starting with `context`, ending with `outcome`) unless kbert knows
    the family's Hugging Face names."""
    if family.knows_hf_names:
        return
    why = f"{family.hf_absent}, so kbert" if family.hf_absent else "kbert"
    raise CheckpointError(f"{context}: {why} knows Hugging Face safetensors names for model="
                          f"{', '.join(hf_families())} only; for model={family.name!r} use its original TF "
                          f"checkpoint. {outcome}")


def weight_names_in(model, fmt: str) -> List[WeightName]:
    """`weight_names(model)`, after checking that format `fmt` can hold every one of them.

    Raises `CheckpointError` when kbert does not know the family's Hugging
    Face names, or when two variables would share one name (ALBERT's layout
    holds one block; `albert_unshared` has one per layer).
    """
    family = family_of(model)
    rows = weight_names(model)
    if fmt == HF:
        check_hf_names(family, f"model={family.name!r}", "Nothing was written")
    elif family.google_absent:
        raise CheckpointError(f"model={family.name!r}: {family.google_absent}, so kbert writes no Google "
                              "checkpoint of it (it would be read back as BERT). Nothing was written. Save it as "
                              "Hugging Face safetensors (save_hf_weights): its own layout, which it came in")
    seen: Dict[Tuple[str, Tuple[int, int]], str] = {}
    for row in rows:
        name = row.name(fmt)
        if (name, row.part(fmt)) in seen:
            raise CheckpointError(
                f"model={family.name!r}: {seen[name, row.part(fmt)]} and {row.path} would both be {name}: the "
                f"checkpoint layout holds one block, this model one per layer; nothing was written. "
                "Save it with model.save_weights or as a .keras file instead")
        seen[name, row.part(fmt)] = row.path
    return rows


def values_for(model, fmt: str) -> List[Tuple[WeightName, np.ndarray]]:
    """Each variable's table row and value, in the layout `fmt` stores (transposed or not); a kernel or table of
    Keras's LoRA as Keras itself saves it, its adapter merged (`kernel + A·B · alpha / rank`)."""
    variables = {variable.path: variable for variable in model.weights}
    merged = _lora_merged(model)
    values = []
    for row in weight_names_in(model, fmt):
        value = merged[row.path] if row.path in merged else variables[row.path].numpy()
        values.append((row, value.T if row.transposed(fmt) else value))
    return values


def _lora_merged(model) -> Dict[str, np.ndarray]:
    """Keras's LoRA layers' kernels (a `Dense`'s) and tables (an `Embedding`'s) by path, their adapters merged:
    each layer's own property gives them so."""
    import keras

    merged = {}
    for layer in model._flatten_layers():
        for own, attribute in (("_kernel", "kernel"), ("_embeddings", "embeddings")):
            if getattr(layer, "lora_enabled", False) and getattr(layer, own, None) is not None:
                merged[getattr(layer, own).path] = keras.ops.convert_to_numpy(getattr(layer, attribute))
    return merged


def layer_of(path: str) -> str:
    """The layer a Keras variable path belongs to."""
    return path.split("/", 1)[0]


def family_of(model):
    """The family (`kbert.models.registry`) of a model from kbert's builders; BERT for other models."""
    return get_family(getattr(model, "family", "bert"))


def known_names(fmt: str, num_layers: int, family=None) -> Dict[str, str]:
    """Checkpoint name -> Keras path for a model of `num_layers` blocks with every head.

    Used to say which kbert layer a checkpoint variable would feed (for
    `kbert inspect`), without building a model. `family` defaults to BERT.
    """
    if family is None:
        family = get_family("bert")
    paths: Dict[str, str] = {}
    for layer in family.weight_layers(num_layers):
        for row in family.layer_weights(layer):
            name = row.name(fmt)
            if name and row.part(fmt)[0] > 0:  # a slice of a tensor (GPT-2's c_attn): it names them all
                paths[name] = f"{paths[name]} + {row.path}"
            elif name:
                paths[name] = row.path
    return paths


def family_named_by(names) -> str:
    """The family whose own checkpoint names appear in `names`, else BERT: the first family, in the registry's
    order, that knows them as its own (`named_in`: ELECTRA's `electra/…`, ALBERT's `…/transformer/group_0/…`,
    GPT-2's `wte`, T5's `shared/embedding`, ...). NEZHA and RoFormer use BERT's Google names.

    >>> family_named_by(["shared/embedding", "decoder/logits/kernel", "encoder/rms_norm/scale"])
    'mt5.1.1'
    """
    names = list(names)
    return next((found for found in (get_family(name).named_in(names) for name in FAMILIES) if found), "bert")


def block_count(names) -> int:
    """Number of Transformer blocks a checkpoint's names mention (`layer_3/`, `layer.3.`, T5's
    `block_003/`, GPT2-ML's `layer03/`; ALBERT's shared block: 1)."""
    blocks = [int(m.group(1)) for name in names
              for m in [re.search(r"(?:layers?[._]|block_|newslm/layer)(\d+)[./]", name)] if m]
    if blocks:
        return max(blocks) + 1
    return 1 if any("/transformer/group_0/" in name or "albert_layer_groups." in name for name in names) else 0


def config_key_for(row: WeightName, model_shape, source_shape) -> Optional[str]:
    """The config key whose value probably explains a shape mismatch."""
    for axis, key in enumerate(row.axes):
        if axis < len(model_shape) and axis < len(source_shape) \
                and model_shape[axis] != source_shape[axis]:
            return key
    return None
