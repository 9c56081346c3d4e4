"""Task LoRA: one low-rank update per task stacked beside a weight, the task chosen when the layer is called
(Jina's jina-embeddings-v3, whose every Linear and Embedding carries five).

A layer built with `task_lora={"tasks": n, "rank": r, "scale": s}` holds, beside its weight, `task_lora_a`
`[n, rows, r]` and `task_lora_b` `[n, r, columns]`; called with `task=t` (a Python int, fixed in the graph) it
adds `s · (x @ A[t]) @ B[t]` (an embedding: `s · A[t][ids] @ B[t]`) to what the weight gives; with `task=None`
the weight alone. One set of weights then serves every task: each task is a graph over the same layers
(`task_graph`; `kbert.embeddings.embedder.Embedder.for_adapter`), at the cost of two rank-r products per weight.
"""

from __future__ import annotations

from typing import Optional

import keras
from keras import ops

from kbert.layers.common import _PACKAGE

#: The task LoRA settings' keys: how many tasks, the pairs' rank, the update's scale (alpha / rank).
SETTINGS = ("tasks", "rank", "scale")


def check_task_lora(settings: Optional[dict]) -> Optional[dict]:
    """`settings` as a layer keeps them (None: no task adapters), after checking their keys and values."""
    if settings is None:
        return None
    if sorted(settings) != sorted(SETTINGS):
        raise ValueError(f"task_lora: expected the keys {', '.join(SETTINGS)}, got {sorted(settings)}")
    tasks, rank, scale = (settings[key] for key in SETTINGS)
    if not (isinstance(tasks, int) and tasks > 0 and isinstance(rank, int) and rank > 0):
        raise ValueError(f"task_lora: tasks and rank must be positive integers, got {tasks!r} and {rank!r}")
    return {"tasks": tasks, "rank": rank, "scale": float(scale)}


def add_task_weights(layer: keras.layers.Layer, settings: dict, rows: int, columns: int) -> tuple:
    """`layer`'s stacked pairs for a `[rows, columns]` weight: `task_lora_a` and `task_lora_b`, zeros (no
    update) until a checkpoint's are assigned."""
    tasks, rank = settings["tasks"], settings["rank"]
    return (layer.add_weight(name="task_lora_a", shape=(tasks, rows, rank), initializer="zeros"),
            layer.add_weight(name="task_lora_b", shape=(tasks, rank, columns), initializer="zeros"))


def task_update(inputs, a, b, task: int, scale: float, lookup: bool = False):
    """Task `task`'s update of a weight's output: `scale · (inputs @ a[task]) @ b[task]`, or with `lookup`
    (an embedding's ids) `scale · a[task][inputs] @ b[task]`."""
    low = ops.take(a[task], inputs, axis=0) if lookup else ops.matmul(inputs, ops.cast(a[task], inputs.dtype))
    # scaled at rank r, before the product widens it back to the weight's width
    return ops.matmul(low * ops.cast(scale, low.dtype), ops.cast(b[task], low.dtype))


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TaskLoRADense(keras.layers.Dense):
    """`keras.layers.Dense` with a low-rank update per task beside its kernel (see the module).

    Args:
        units: as for `Dense`.
        task_lora: `{"tasks": n, "rank": r, "scale": s}`.
        **kwargs: as for `Dense`; the activation applies after the task's update.

    Called on `[..., in]` with `task` (an int below `tasks`, or None: the kernel alone).

    Example:
    >>> dense = TaskLoRADense(3, task_lora={"tasks": 2, "rank": 1, "scale": 0.5}, name="qkv")
    >>> x = ops.ones((1, 4))
    >>> _ = dense(x)
    >>> [w.path for w in dense.weights]
    ['qkv/kernel', 'qkv/bias', 'qkv/task_lora_a', 'qkv/task_lora_b']
    >>> _ = dense.task_lora_a.assign(ops.ones((2, 4, 1))), dense.task_lora_b.assign(ops.ones((2, 1, 3)))
    >>> ops.convert_to_numpy(dense(x, task=1) - dense(x)).tolist()  # 0.5 · (1·4) · 1
    [[2.0, 2.0, 2.0]]
    """

    def __init__(self, units: int, task_lora: dict, **kwargs):
        super().__init__(units, **kwargs)
        self.task_lora = check_task_lora(task_lora)

    def build(self, input_shape):
        super().build(input_shape)
        self.task_lora_a, self.task_lora_b = add_task_weights(self, self.task_lora, input_shape[-1], self.units)

    def call(self, inputs, task: Optional[int] = None):
        if task is None:
            return super().call(inputs)
        x = ops.matmul(inputs, self.kernel)
        if self.use_bias:
            x = ops.add(x, self.bias)
        x = x + task_update(inputs, self.task_lora_a, self.task_lora_b, task, self.task_lora["scale"])
        return self.activation(x) if self.activation is not None else x

    def save_own_variables(self, store):
        # Dense writes its kernel and bias alone (its own LoRA merged in); the pairs follow them.
        super().save_own_variables(store)
        if self.built:
            count = len(store.keys())
            store[str(count)], store[str(count + 1)] = self.task_lora_a, self.task_lora_b

    def load_own_variables(self, store):
        super().load_own_variables(store)
        if self.built:
            count = len(store.keys())
            self.task_lora_a.assign(store[str(count - 2)])
            self.task_lora_b.assign(store[str(count - 1)])

    def get_config(self):
        return {**super().get_config(), "task_lora": self.task_lora}


def dense_with_tasks(units: int, task_lora: Optional[dict], **kwargs) -> keras.layers.Dense:
    """A `keras.layers.Dense`, or with `task_lora` a `TaskLoRADense` (same weight paths, the pairs beside)."""
    return keras.layers.Dense(units, **kwargs) if task_lora is None else TaskLoRADense(units, task_lora, **kwargs)


def project(dense: keras.layers.Dense, inputs, task: Optional[int]):
    """`dense` on `inputs`, with `task`'s update where one is chosen."""
    return dense(inputs) if task is None else dense(inputs, task=task)


def task_graph(model: keras.Model, task: int) -> keras.Model:
    """`model` (a functional model whose layers hold task LoRA pairs) computing task `task`: the same layers,
    and so the same weights, each one with pairs called with `task=task` (Keras's `clone_model` with the
    layers themselves and a `call_function`). No memory beyond the graph.

    Example:
    >>> inputs = keras.Input((4,))
    >>> dense = TaskLoRADense(2, task_lora={"tasks": 2, "rank": 1, "scale": 1.0})
    >>> model = keras.Model(inputs, dense(inputs))
    >>> _ = dense.task_lora_a.assign(ops.ones((2, 4, 1))), dense.task_lora_b.assign(ops.ones((2, 1, 2)))
    >>> second = task_graph(model, 1)
    >>> x = ops.ones((1, 4))
    >>> ops.convert_to_numpy(second(x) - model(x)).tolist(), second.weights[0] is model.weights[0]
    ([[4.0, 4.0]], True)
    """
    def call(layer, *args, **kwargs):
        if getattr(layer, "task_lora", None) is not None:
            return layer(*args, task=task, **kwargs)
        return layer(*args, **kwargs)

    return keras.models.clone_model(model, clone_function=lambda layer: layer, call_function=call)
