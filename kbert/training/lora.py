"""LoRA fine-tuning: low-rank adapters on the transformer blocks' kernels (Keras's `enable_lora`).

`enable_lora(model, rank)` gives every `Dense` of the transformer blocks
(attention's query, key, value and output; the feed-forward's two layers)
Keras's LoRA: its kernel frozen, a trainable `A·B` of rank `rank` added,
scaled by `alpha / rank`. The embedding tables are frozen too, or, with
`embeddings_rank=r`, the token table gets an adapter of rank `r` (a
`vocab × r` and an `r × hidden` matrix, scaled by `alpha / r`: each token a
few trained coordinates); biases, layer norms and the task's head stay
trainable. What trains is then a few per cent of the model.

Keras writes a LoRA layer's kernel merged (`kernel + A·B·scale`), so the
`model.weights.h5` of a LoRA run is an ordinary model directory's: it loads
and predicts like any other. `save_adapters` writes only what was trained
(`lora.safetensors`, small); `load_adapters` puts it on the model it was
trained from, for another task's head or a second adapter on one base.
"""

from __future__ import annotations

import json
import os
from typing import List, Optional

import keras
import numpy as np

from kbert.errors import KbertError
from kbert.io import atomic_path
from kbert.models import naming

ADAPTERS_FILE = "lora.safetensors"
BLOCK_PREFIX = "Transformer-"  # bert4keras's names of the blocks' layers (kbert.models.naming)
FROZEN_TABLES = (naming.EMBEDDING_TOKEN, naming.EMBEDDING_SEGMENT, naming.EMBEDDING_POSITION,
                 naming.EMBEDDING_RELATIVE_POSITION)


def block_kernels(model: keras.Model) -> List[keras.layers.Dense]:
    """The `Dense` layers of the transformer blocks, in the model's order."""
    return [layer for layer in model._flatten_layers(include_self=False)
            if isinstance(layer, keras.layers.Dense) and layer.weights
            and layer.weights[0].path.startswith(BLOCK_PREFIX)]  # the kernel (with LoRA, `kernel` is merged)


def enable_lora(model: keras.Model, rank: int, alpha: Optional[float] = None,
                embeddings_rank: Optional[int] = None) -> None:
    """Adds rank-`rank` adapters to the blocks' kernels and freezes them and the embeddings.

    With `embeddings_rank` the token table gets an adapter of that rank (the
    other tables stay frozen); `alpha` defaults to `rank` for both.

    Example:
    >>> from kbert import build_transformer_model, bundled_config_path
    >>> from kbert.builder import build_classifier
    >>> model = build_classifier(build_transformer_model(bundled_config_path("bert_tiny"), with_pool=True), 2)
    >>> enable_lora(model, rank=4)
    >>> trainable = sum(int(np.prod(v.shape)) for v in model.trainable_weights)
    >>> trainable < 0.1 * model.count_params()
    True
    >>> model = build_classifier(build_transformer_model(bundled_config_path("bert_tiny"), with_pool=True), 2)
    >>> enable_lora(model, rank=4, embeddings_rank=2)
    >>> sum(int(np.prod(v.shape)) for v in model.trainable_weights) - trainable  # 2 x (vocab + hidden)
    42320
    """
    layers = block_kernels(model)
    if not layers:
        raise KbertError("LoRA: the model has no transformer block kernels (layers named Transformer-*)")
    # A rank as wide as a kernel's narrower side adapts nothing less than the kernel itself (and costs more).
    narrowest = min(min(int(layer.kernel.shape[0]), int(np.prod(layer.kernel.shape[1:]))) for layer in layers)
    for option, value in (("--lora-rank", rank), ("--lora-embeddings", embeddings_rank)):
        if value and value >= narrowest:
            raise KbertError(f"LoRA rank {value} ({option}) is not below the narrowest adapted kernel's side "
                             f"({narrowest}, the model's hidden size or a head's width): a low-rank adapter must be "
                             f"narrower than what it adapts; ranks of 4 to 16 are usual")
    for layer in model._flatten_layers(include_self=False):
        if layer.name == naming.EMBEDDING_TOKEN and embeddings_rank:
            layer.enable_lora(embeddings_rank, lora_alpha=alpha or rank)  # freezes the table, trains its adapter
        elif layer.name in FROZEN_TABLES:
            layer.trainable = False
    for layer in layers:
        layer.enable_lora(rank, lora_alpha=alpha)


def token_table_rank(model: keras.Model) -> Optional[int]:
    """The rank of the token embedding table's LoRA adapter (`enable_lora(..., embeddings_rank=r)`); None: none."""
    return next((layer.lora_rank for layer in model._flatten_layers(include_self=False)
                 if layer.name == naming.EMBEDDING_TOKEN and getattr(layer, "lora_enabled", False)), None)


def lora_enabled(model: keras.Model) -> bool:
    return any(layer.lora_enabled for layer in block_kernels(model))


def save_adapters(model: keras.Model, path: str) -> str:
    """Writes what a LoRA run trains (the adapters, biases, norms and head), by variable path; atomic."""
    from safetensors.numpy import save_file

    layers = [layer for layer in block_kernels(model) if layer.lora_enabled]
    if not layers:
        raise KbertError("save_adapters: the model has no LoRA adapters (enable_lora first)")
    tensors = {variable.path: np.ascontiguousarray(keras.ops.convert_to_numpy(variable))
               for variable in model.trainable_weights}
    settings = {"rank": layers[0].lora_rank, "alpha": layers[0].lora_alpha, "embeddings_rank": token_table_rank(model)}
    with atomic_path(path) as temporary:
        save_file(tensors, temporary, metadata={"kbert_lora": json.dumps(settings)})
    return path


def load_adapters(model: keras.Model, path: str) -> None:
    """Enables LoRA with the file's rank and alpha and assigns its tensors; every one is checked first.

    `model` is the model the adapters were trained on, as it was before
    (the same family, config and head).
    """
    from safetensors import safe_open

    if not os.path.exists(path):
        raise KbertError(f"{path}: no such adapters file ({ADAPTERS_FILE} of a kbert train --lora-rank run)")
    with safe_open(path, framework="numpy") as handle:
        settings = json.loads((handle.metadata() or {}).get("kbert_lora") or "null")
        if not settings:
            raise KbertError(f"{path}: not a kbert LoRA adapters file (no kbert_lora metadata)")
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    if not lora_enabled(model):
        enable_lora(model, settings["rank"], settings["alpha"], settings.get("embeddings_rank"))
    variables = {variable.path: variable for variable in model.trainable_weights}
    missing = sorted(set(variables) - set(tensors))
    unknown = sorted(set(tensors) - set(variables))
    wrong = [name for name in set(tensors) & set(variables) if tuple(tensors[name].shape) != tuple(variables[name].shape)]
    if missing or unknown or wrong:
        raise KbertError(f"{path}: the adapters do not fit this model (missing {missing[:3]}, unknown {unknown[:3]}, "
                         f"other shapes {wrong[:3]}); load them on the model they were trained on")
    for name, value in tensors.items():
        variables[name].assign(value)
