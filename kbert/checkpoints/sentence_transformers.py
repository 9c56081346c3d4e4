"""Sentence-transformers model folders: what their modules say, read without sentence-transformers itself.

A sentence-transformers folder lists its modules in `modules.json`, in order:
the transformer (the folder itself, or a sub-folder), a `Pooling` (its
`config.json` names the mode), optionally a `Dense` projection (its
`config.json` and `model.safetensors`) and a `Normalize`; its
`sentence_bert_config.json` gives the longest input (`max_seq_length`), and
`config_sentence_transformers.json` the prompts put before texts (`prompts`,
by name, and the one used when none is asked for, `default_prompt_name`).
Versions 2 to 6 of sentence-transformers wrote the module types under
different names (`sentence_transformers.models.Pooling`,
`sentence_transformers.models.pooling.Pooling.Pooling`, ...): a type is
recognised by its last name. Weights are read from safetensors only; a
pickled `pytorch_model.bin` is refused, as everywhere in kbert.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, Optional, Sequence, Tuple

from kbert.errors import CheckpointError

MODULES_FILE = "modules.json"
# sentence-transformers' pooling flags, in its order of precedence, and kbert's names for them
_POOLING_FLAGS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
                  "pooling_mode_max_tokens": "max", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
                  "pooling_mode_lasttoken": "lasttoken"}
# torch activations a Dense module names, and Keras's
_ACTIVATIONS = {"Tanh": "tanh", "Identity": None, "ReLU": "relu", "GELU": "gelu", "Sigmoid": "sigmoid"}


@dataclasses.dataclass
class DenseSpec:
    """A `Dense` module: its folder, sizes, bias and activation (a Keras name, or None)."""

    path: str
    in_features: int
    out_features: int
    bias: bool
    activation: Optional[str]


@dataclasses.dataclass
class SentenceTransformerSpec:
    """What a sentence-transformers folder holds.

    Args:
        transformer: the folder of the transformer's `config.json` and weights.
        pooling: the pooling mode (`kbert.layers.pooling.POOLING_MODES`).
        dense: the projections after the pooling, in order.
        normalize: whether the vectors are scaled to unit length last.
        max_seq_length: the longest input in tokens (None: the model's own limit).
        do_lower_case: sentence-transformers' own lower-casing of the text before tokenizing.
        prompts: texts put before the inputs, by name (e5's `{"query": "query: ", "document": "passage: "}`).
        default_prompt_name: the prompt used when none is asked for (None: no prompt).
        include_prompt: whether the pooling counts the prompt's tokens (the Pooling's `include_prompt`).
    """

    transformer: str
    pooling: str
    dense: list
    normalize: bool
    max_seq_length: Optional[int]
    do_lower_case: bool = False
    prompts: Dict[str, str] = dataclasses.field(default_factory=dict)
    default_prompt_name: Optional[str] = None
    include_prompt: bool = True


def is_sentence_transformer(path: "str | os.PathLike[str]") -> bool:
    """Whether `path` is a sentence-transformers folder (it has `modules.json`)."""
    return os.path.isfile(os.path.join(os.fspath(path), MODULES_FILE))


def read_sentence_transformer(folder: "str | os.PathLike[str]") -> SentenceTransformerSpec:
    """The modules of the sentence-transformers folder `folder`, checked; a `CheckpointError` names the file
    and what was expected."""
    folder = os.fspath(folder)
    modules = _json(os.path.join(folder, MODULES_FILE))
    if not isinstance(modules, list) or not modules:
        raise CheckpointError(f"{os.path.join(folder, MODULES_FILE)}: expected a list of modules")
    transformer, pooling, include_prompt, dense, normalize = None, None, True, [], False
    for module in sorted(modules, key=lambda entry: entry.get("idx", 0)):
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        path = os.path.join(folder, module.get("path", ""))
        if kind in ("Transformer", "MLMTransformer"):
            transformer = path
        elif kind == "Pooling":
            pooling, include_prompt = _pooling(os.path.join(path, "config.json"))
        elif kind == "Dense":
            dense.append(_dense(path))
        elif kind == "Normalize":
            normalize = True
        else:
            raise CheckpointError(f"{os.path.join(folder, MODULES_FILE)}: module {module.get('name')!r} of type "
                                  f"{module.get('type')!r} is not one kbert reads (Transformer, Pooling, Dense, "
                                  "Normalize)")
    if transformer is None or pooling is None:
        raise CheckpointError(f"{os.path.join(folder, MODULES_FILE)}: expected a Transformer and a Pooling module")
    config = _optional_json(os.path.join(transformer, "sentence_bert_config.json")) or \
        _optional_json(os.path.join(folder, "sentence_bert_config.json")) or {}
    prompts, default_prompt_name = _prompts(os.path.join(folder, "config_sentence_transformers.json"))
    return SentenceTransformerSpec(transformer, pooling, dense, normalize, config.get("max_seq_length"),
                                   bool(config.get("do_lower_case", False)), prompts, default_prompt_name,
                                   include_prompt)


def _prompts(path: str) -> Tuple[Dict[str, str], Optional[str]]:
    """The prompts by name and the default one's name, checked as sentence-transformers checks them."""
    config = _optional_json(path) or {}
    prompts, default = config.get("prompts") or {}, config.get("default_prompt_name")
    if not isinstance(prompts, dict) or not all(isinstance(text, str) for text in prompts.values()):
        raise CheckpointError(f"{path}: prompts: expected an object of prompt names and their texts, got {prompts!r}")
    if default is not None and default not in prompts:
        raise CheckpointError(f"{path}: default_prompt_name {default!r} is not one of its prompts "
                              f"({', '.join(map(repr, prompts)) or 'none'})")
    return prompts, default


def write_modules(folder: str, pooling: str, dimensions: int, dense: Sequence[Tuple[list, Optional[str]]],
                  normalize: bool, max_seq_length: int, prompts: Optional[Dict[str, str]] = None,
                  default_prompt_name: Optional[str] = None) -> None:
    """A sentence-transformers folder's module files beside the transformer's, in the names every version from 2
    on reads: `modules.json`, `1_Pooling/config.json`, a `N_Dense` folder per projection (`(weights, Keras
    activation)`: its `config.json` and `model.safetensors`), `Normalize` where asked,
    `sentence_bert_config.json`, and `config_sentence_transformers.json` where there are `prompts`."""
    from safetensors.numpy import save_file

    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    flags = {flag: mode == pooling for flag, mode in _POOLING_FLAGS.items()}
    _write_json(os.path.join(folder, "1_Pooling", "config.json"), {"word_embedding_dimension": dimensions, **flags})
    torch_names = {keras: torch for torch, keras in _ACTIVATIONS.items()}
    for weights, activation in dense:
        index = len(modules)
        path = f"{index}_Dense"
        kernel = weights[0]
        _write_json(os.path.join(folder, path, "config.json"), {
            "in_features": int(kernel.shape[0]), "out_features": int(kernel.shape[1]), "bias": len(weights) > 1,
            "activation_function": f"torch.nn.modules.{'linear' if activation is None else 'activation'}."
                                   f"{torch_names.get(activation if activation != 'linear' else None)}"})
        tensors = {"linear.weight": kernel.T.copy(), **({"linear.bias": weights[1]} if len(weights) > 1 else {})}
        save_file(tensors, os.path.join(folder, path, "model.safetensors"))
        modules.append({"idx": index, "name": str(index), "path": path, "type": "sentence_transformers.models.Dense"})
    if normalize:
        index = len(modules)
        modules.append({"idx": index, "name": str(index), "path": f"{index}_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
    _write_json(os.path.join(folder, MODULES_FILE), modules)
    _write_json(os.path.join(folder, "sentence_bert_config.json"), {"max_seq_length": max_seq_length,
                                                                   "do_lower_case": False})
    if prompts:
        _write_json(os.path.join(folder, "config_sentence_transformers.json"),
                    {"prompts": prompts, "default_prompt_name": default_prompt_name, "similarity_fn_name": "cosine"})


def _write_json(path: str, value) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(value, handle, indent=2)


def _pooling(path: str) -> Tuple[str, bool]:
    """The Pooling's mode, and whether it counts a prompt's tokens."""
    config = _json(path)
    if config.get("pooling_mode"):  # sentence-transformers 6 writes the mode (or a list of modes) by name
        named = config["pooling_mode"]
        chosen = [{"mean_sqrt_len_tokens": "mean_sqrt_len"}.get(mode, mode)
                  for mode in ([named] if isinstance(named, str) else named)]
    else:
        chosen = [mode for flag, mode in _POOLING_FLAGS.items() if config.get(flag)]
    if len(chosen) != 1 or chosen[0] not in _POOLING_FLAGS.values():
        raise CheckpointError(f"{path}: expected exactly one pooling mode of {', '.join(_POOLING_FLAGS)} (true), "
                              f"got {chosen or 'none'}; kbert pools one way (concatenated modes are not read)")
    return chosen[0], bool(config.get("include_prompt", True))


def _dense(path: str) -> DenseSpec:
    config = _json(os.path.join(path, "config.json"))
    activation = str(config.get("activation_function", "torch.nn.modules.linear.Identity")).rsplit(".", 1)[-1]
    if activation not in _ACTIVATIONS:
        raise CheckpointError(f"{os.path.join(path, 'config.json')}: activation {activation!r} is not one kbert "
                              f"reads ({', '.join(_ACTIVATIONS)})")
    if not os.path.isfile(os.path.join(path, "model.safetensors")):
        raise CheckpointError(f"{path}: no model.safetensors (a pickled pytorch_model.bin is never loaded); "
                              "save the model again with sentence-transformers 3 or later, which writes safetensors")
    return DenseSpec(path, int(config["in_features"]), int(config["out_features"]), bool(config.get("bias", True)),
                     _ACTIVATIONS[activation])


def _json(path: str):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing; a sentence-transformers folder needs it") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: not JSON ({error})") from None


def _optional_json(path: str):
    return _json(path) if os.path.isfile(path) else None
