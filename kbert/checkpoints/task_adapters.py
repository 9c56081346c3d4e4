"""Task LoRA adapters stored beside the weights they adapt, as Jina's jina-embeddings-v3 files hold them.

Jina's remote code wraps each Linear and Embedding in torch's `parametrize`, so a weight `X.weight` is stored as
`X.parametrizations.weight.original` and every task's low-rank pair beside it, stacked on a first axis in the
order of the config's `lora_adaptations`: `X.parametrizations.weight.0.lora_A` and `...lora_B`. A task's weight
is the original plus `lora_alpha / lora_rank` times `B[t] @ A[t]` (a Linear's `[out, in]`), or `A[t] @ B[t]`
(an Embedding's `[vocabulary, width]`), as its `LoRAParametrization.lora_forward` computes it (its
modeling_lora.py, read by hand). No task: the original weights, as its `encode` without `task=`.

Chosen at load, a task's weights are merged once: the model runs at the backbone's cost, and `kbert` writes it
back as transformers 5 lays out a jina-embeddings-v3 (one set of weights). To serve several tasks from one set of
weights, a model built with `task_lora` (`task_lora_settings`) holds every task's pair beside its weight
(`kbert.layers.task_lora`), read here in Keras's layout (`task_pairs`); each task is then a graph over it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from kbert.errors import CheckpointError, first_line

logger = logging.getLogger("kbert")
ORIGINAL = ".parametrizations.weight.original"
LORA_A, LORA_B = ".parametrizations.weight.0.lora_A", ".parametrizations.weight.0.lora_B"
#: `open_safetensors`'s adapter that reads the base weights and leaves the pairs to `task_pairs`.
EVERY_TASK = "*"


@dataclasses.dataclass(frozen=True)
class TaskAdapters:
    """The tasks a config's `lora_adaptations` names, in their stacked order, and the update's scale.

    Example:
    >>> adapters = TaskAdapters(("retrieval.query", "retrieval.passage"), scaling=0.25, rank=4)
    >>> adapters.index("retrieval.passage", "model.safetensors"), adapters.settings()
    (1, {'tasks': 2, 'rank': 4, 'scale': 0.25})
    """

    tasks: Tuple[str, ...]
    scaling: float
    rank: int = 4

    def settings(self) -> dict:
        """The layers' `task_lora` for these adapters (`build_transformer_model(..., task_lora=)`)."""
        return {"tasks": len(self.tasks), "rank": self.rank, "scale": self.scaling}

    def index(self, task: str, path: str) -> int:
        if task not in self.tasks:
            raise CheckpointError(f"{path}: no task adapter {task!r}; this file's are {', '.join(self.tasks)} "
                                  "(lora_adaptations of its config.json)")
        return self.tasks.index(task)


def is_adapter_tensor(name: str) -> bool:
    return name.endswith((LORA_A, LORA_B))


def unwrapped_name(name: str) -> str:
    """`X.weight` for a parametrized weight's stored `X.parametrizations.weight.original`; other names as they are."""
    return name[:-len(ORIGINAL)] + ".weight" if name.endswith(ORIGINAL) else name


def read_adapters(path: str) -> TaskAdapters:
    """The task adapters of the safetensors file `path`, from the config.json beside it (`lora_adaptations`,
    `lora_rank`, `lora_alpha`); `merged_reader` checks the stored pairs against them."""
    config_path = os.path.join(os.path.dirname(path), "config.json")
    try:
        with open(config_path, encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path}: holds task LoRA adapters, whose names and scale its config.json gives; "
                              f"{config_path} is not readable JSON ({error})") from None
    tasks, rank, alpha = config.get("lora_adaptations"), config.get("lora_rank", 4), config.get("lora_alpha", 1)
    if not (isinstance(tasks, list) and tasks and all(isinstance(task, str) for task in tasks)):
        raise CheckpointError(f"{config_path}: key 'lora_adaptations': expected the list of task names that "
                              f"{os.path.basename(path)}'s adapters are stacked by, got {tasks!r}")
    for key, value in (("lora_rank", rank), ("lora_alpha", alpha)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise CheckpointError(f"{config_path}: key {key!r}: expected a positive number, got {value!r}")
    if not float(rank).is_integer():
        raise CheckpointError(f"{config_path}: key 'lora_rank': expected a whole number, got {rank!r}")
    return TaskAdapters(tuple(tasks), float(alpha) / float(rank), int(rank))


def merged_reader(path: str, shapes: Mapping[str, tuple], read: Callable[[str], np.ndarray],
                  adapters: TaskAdapters, task: str) -> Callable[[str], np.ndarray]:
    """`read` (stored name -> array) with `task`'s update added to every parametrized weight that has a pair.
    Every pair's shapes are checked first: a damaged file fails before anything is read."""
    index = adapters.index(task, path)
    pairs = {name[:-len(LORA_A)]: (name, name[:-len(LORA_A)] + LORA_B) for name in shapes if name.endswith(LORA_A)}
    for scope, (a_name, b_name) in pairs.items():
        _check_pair(path, scope, shapes, a_name, b_name, len(adapters.tasks))

    def read_merged(name: str) -> np.ndarray:
        value = read(name)
        scope = name[:-len(ORIGINAL)] if name.endswith(ORIGINAL) else None
        if scope not in pairs:
            return value
        a, b = (read(part)[index].astype(np.float32) for part in pairs[scope])
        update = b @ a if (b.shape[0], a.shape[1]) == value.shape else a @ b
        return (value.astype(np.float32) + adapters.scaling * update).astype(value.dtype)

    return read_merged


def _check_pair(path: str, scope: str, shapes: Mapping[str, tuple], a_name: str, b_name: str, tasks: int) -> None:
    weight, a, b = shapes.get(scope + ORIGINAL), shapes.get(a_name), shapes.get(b_name)
    fits = (weight is not None and b is not None and len(weight) == 2 and len(a) == len(b) == 3
            and a[0] == b[0] == tasks
            and ((b[1], a[2]) == weight and a[1] == b[2] or (a[1], b[2]) == weight and a[2] == b[1]))
    if not fits:
        raise CheckpointError(f"{path}: the task adapter of {scope}: lora_A {a}, lora_B {b} and the weight {weight} "
                              f"do not fit (expected {tasks} tasks of a low-rank pair whose product has the "
                              "weight's shape)")


def adapted_source(path: str, shapes: Dict[str, tuple], read: Callable[[str], np.ndarray],
                   task: Optional[str]) -> Callable[[str], np.ndarray]:
    """The reader of a file whose `shapes` may hold task adapters: `task`'s merged in, or the original weights
    (said in the log, naming the tasks left out). A `task` for a file without adapters is a `CheckpointError`."""
    if not any(is_adapter_tensor(name) for name in shapes):
        if task == EVERY_TASK:
            raise CheckpointError(f"{path}: no task LoRA adapters in this file (tensors named *{LORA_A}), so a "
                                  "model that holds every task's cannot take its weights; build it without task_lora")
        if task is not None:
            raise CheckpointError(f"{path}: no task LoRA adapters in this file (tensors named "
                                  f"*{LORA_A}), so adapter {task!r} cannot be applied; load it without one")
        return read
    adapters = read_adapters(path)
    if task == EVERY_TASK:
        return read
    if task is None:
        logger.warning("%s: its task LoRA adapters (%s) are left out: the base weights are loaded, as Jina's encode "
                       "without task=; choose one with adapter= (kbert embed/serve --adapter)",
                       path, ", ".join(adapters.tasks))
        return read
    return merged_reader(path, shapes, read, adapters, task)


def has_task_lora(model) -> bool:
    """Whether `model` was built with `task_lora` (its layers hold task LoRA pairs)."""
    return any(variable.path.endswith("/task_lora_a") for variable in model.weights)


def task_pairs(model, source) -> List[Tuple[object, np.ndarray]]:
    """`(variable, value)` for every task LoRA pair of `model` (built with `task_lora`), read from the
    safetensors `source` (`open_safetensors(path, EVERY_TASK)`) in Keras's layout: a Linear's `A [tasks, rank,
    in]` and `B [tasks, out, rank]` become `[tasks, in, rank]` and `[tasks, rank, out]`; an Embedding's are
    Keras's already. A weight of the model without its pair in the file, or a pair that does not fit, is a
    `CheckpointError` naming the tensor: nothing is assigned."""
    from kbert.checkpoints.names import weight_names

    variables = {variable.path: variable for variable in model.weights}
    wanted = {path for path in variables if path.endswith(("/task_lora_a", "/task_lora_b"))}
    values = []
    for row in weight_names(model):
        owner, weight = row.path.rsplit("/", 1)
        if f"{owner}/task_lora_a" not in variables or weight not in ("kernel", "embeddings"):
            continue
        stored = source.stored_names.get(row.hf, row.hf)
        if not stored.endswith(ORIGINAL) or row.hf_part != (0, 1):
            raise CheckpointError(f"{source.path}: {stored} has no task LoRA pair beside it (expected "
                                  f"{row.hf[:-len('.weight')]}{ORIGINAL} and its lora_A, lora_B), which the model "
                                  f"built with task_lora takes for {row.path}")
        for suffix, stored_name in (("a", stored[:-len(ORIGINAL)] + LORA_A), ("b", stored[:-len(ORIGINAL)] + LORA_B)):
            variable = variables[f"{owner}/task_lora_{suffix}"]
            value = _read_pair(source, stored_name)
            value = np.swapaxes(value, 1, 2) if row.hf_transposed and value.ndim == 3 else value
            if tuple(value.shape) != tuple(variable.shape):
                raise CheckpointError(f"{source.path}: {stored_name} {tuple(value.shape)} does not fit "
                                      f"{variable.path} {tuple(variable.shape)} (tasks, rows, rank in Keras's "
                                      "layout): the file's lora_adaptations or lora_rank differ from the model's")
            values.append((variable, value))
            wanted.discard(variable.path)
    if wanted:
        raise CheckpointError(f"{source.path}: no tensors for the model's task LoRA pairs {sorted(wanted)[:3]}")
    return values


def _read_pair(source, name: str) -> np.ndarray:
    try:
        value = source.read_stored(name)
    except KeyError:
        raise CheckpointError(f"{source.path}: no tensor {name}: the pair of a parametrized weight is incomplete "
                              "(expected its lora_A and lora_B beside it)") from None
    except Exception as error:  # safetensors' own error names no file
        raise CheckpointError(f"{source.path}: {name}: not readable ({first_line(error)})") from None
    if not np.all(np.isfinite(value)):
        raise CheckpointError(f"{source.path}: {name} holds NaN or infinite values")
    return value


def assign_task_pairs(values: List[Tuple[object, np.ndarray]]) -> None:
    """Assigns what `task_pairs` read."""
    for variable, value in values:
        variable.assign(value.astype(np.float32))
