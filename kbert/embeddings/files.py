"""The files of a sentence-transformers folder read and written with errors that name them: JSON settings, a
module's tensors, a tokenizer's `model_max_length`.
"""

from __future__ import annotations

import json
import os
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from kbert.errors import CheckpointError, is_whole_number
from kbert.tokenizers.tokenizer_json import tokenizer_settings


def module_tensors(folder: str, names: Optional[Sequence[str]] = None) -> Tuple[str, Dict[str, np.ndarray]]:
    """A module's file of tensors and what it holds (only `names` of them, where given and present): its
    `model.safetensors`, else its `pytorch_model.bin` (sentence-transformers 2's pickle, read by
    `read_torch_tensors`: no code of the file runs)."""
    from safetensors import SafetensorError, safe_open

    path = os.path.join(folder, "model.safetensors")
    if not os.path.isfile(path):
        from kbert.checkpoints.torch_pickle import read_torch_tensors

        path = os.path.join(folder, "pytorch_model.bin")
        if not os.path.isfile(path):
            raise CheckpointError(f"{folder}: no model.safetensors (nor pytorch_model.bin); the module's weights "
                                  "are missing")
        tensors = read_torch_tensors(path)
        return path, tensors if names is None else {name: tensors[name] for name in names if name in tensors}
    try:
        with safe_open(path, framework="numpy") as file:
            return path, {name: file.get_tensor(name) for name in (file.keys() if names is None else names)
                          if name in file.keys()}
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"{path}: not a readable safetensors file ({str(error).splitlines()[0]})") from None


def check_tensor(path: str, name: str, value: Optional[np.ndarray], shape: tuple, meaning: str) -> None:
    """A module's tensor `name` of `path` is floats of `shape` (`meaning` says where the shape comes from), all
    finite."""
    if value is None or tuple(value.shape) != tuple(shape) or value.dtype.kind != "f":
        got = "missing" if value is None else f"{value.dtype} {list(value.shape)}"
        raise CheckpointError(f"{path}: {name}: expected floats of shape {list(shape)} ({meaning}), got {got}")
    if not np.isfinite(value).all():
        raise CheckpointError(f"{path}: {name} holds NaN or infinite values; the file is damaged or its run "
                              "diverged")


def json_file(path: str):
    """A JSON file's value; a missing or unreadable one is a `CheckpointError` naming it."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing; a sentence-transformers folder needs it") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: not JSON ({error})") from None


def json_object(path: str) -> dict:
    """A JSON file that must hold an object (a module's config)."""
    value = json_file(path)
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: expected a JSON object of settings, got {type(value).__name__}")
    return value


#: transformers' stand-in for "no limit" in a tokenizer's `model_max_length` is 1e30: anything past this is none.
_NO_LIMIT = 10 ** 9


def model_max_length(folder: "str | os.PathLike[str]") -> Optional[int]:
    """The `model_max_length` of `folder`'s `tokenizer_config.json` (the tokens a text is cut to: where
    sentence-transformers 6.3 keeps a Transformer's `max_seq_length`), None where it has none or sets no limit."""
    path = os.path.join(folder, "tokenizer_config.json")
    value = tokenizer_settings(folder).get("model_max_length")
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and value >= _NO_LIMIT):
        return None
    if not is_whole_number(value):
        raise CheckpointError(f"{path}: model_max_length {value!r}: expected a whole number of tokens, 1 or more")
    return value


def write_json(path: str, value) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(value, handle, indent=2)


def flag_setting(config: dict, key: str, default: bool, path: str) -> bool:
    """A true/false setting of a module's config: JSON's booleans only (the string "false" is not false)."""
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise CheckpointError(f"{path}: {key} {value!r}: expected true or false")
    return value
