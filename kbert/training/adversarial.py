"""Adversarial training on the token embeddings: FGM and the gradient penalty, as Keras 3 train steps.

bert4keras's recipes (`task_iflytek_adversarial_training.py`,
`task_iflytek_gradient_penalty.py`) built these from Keras 2's graph-mode
`K.gradients` and `model._make_train_function`, which Keras 3 no longer has.
Here each replaces the compiled model's `train_step` with one that computes
the same thing under `tf.GradientTape`:

- `adversarial_training` (FGM, Miyato et al.): each step first takes the
  loss's gradient g with respect to the embedding table, adds
  ε·g/‖g‖ to the table, takes the ordinary training step on the perturbed
  table, and removes the perturbation again.
- `gradient_penalty`: each step minimises loss + ½·ε·‖∂loss/∂E‖², the
  gradient's squared norm over the embedding table (a second-order gradient).

Call either after `model.compile(...)`, before `fit`. The gradients are the
backend's own: `tf.GradientTape` on TensorFlow, `torch.autograd` on PyTorch.
On JAX, whose train step is a pure function of the weights, they raise
`KbertError` saying so (not written yet).

Example:
>>> import numpy as np, keras
>>> tokens = keras.Input((3,), dtype="int32")
>>> pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(10, 4, name="Embedding-Token")(tokens))
>>> model = keras.Model(tokens, keras.layers.Dense(2)(pooled))
>>> model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
>>> adversarial_training(model, "Embedding-Token", epsilon=0.5)
>>> history = model.fit(np.array([[1, 2, 3], [4, 5, 6]]), np.array([0, 1]), epochs=2, verbose=0)
>>> len(history.history["loss"])
2
"""

from __future__ import annotations

import contextlib
import types

import keras

from kbert.errors import ConfigError, KbertError
from kbert.models.naming import EMBEDDING_TOKEN


def embedding_table(model: keras.Model, embedding_name: str = EMBEDDING_TOKEN):
    """The weight matrix of the layer `embedding_name` in `model` (or in a model nested in it)."""
    for layer in model._flatten_layers(include_self=False):
        if layer.name == embedding_name and hasattr(layer, "embeddings"):
            return layer.embeddings
    raise ConfigError(f"adversarial training: the model has no embedding layer named {embedding_name!r} "
                      f"(kbert's and bert4keras's token embedding is {EMBEDDING_TOKEN!r})")


def _loss_gradient(model, x, y, sample_weight, variable):
    """The loss's gradient with respect to `variable`, taken by the backend."""
    if keras.backend.backend() == "torch":
        import torch

        return torch.autograd.grad(_loss(model, x, y, sample_weight)[0], variable.value)[0]
    import tensorflow as tf

    with tf.GradientTape() as tape:
        loss, _ = _loss(model, x, y, sample_weight)
    return tf.convert_to_tensor(tape.gradient(loss, variable))  # an embedding's gradient is sparse


def _loss(model, x, y, sample_weight):
    y_pred = model(x, training=True)
    return model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight), y_pred


def _replace_train_step(model: keras.Model, train_step) -> None:
    backend = keras.backend.backend()
    if backend not in ("tensorflow", "torch"):
        raise KbertError(f"adversarial training (FGM, gradient penalty) has a train step for TensorFlow and "
                         f"PyTorch, and Keras runs on {backend}: set KERAS_BACKEND=tensorflow or torch, or train "
                         "without --adversarial")
    if model.optimizer is None:
        raise ConfigError("adversarial training changes the compiled model's training step: "
                          "call model.compile(...) first")
    model.train_step = types.MethodType(train_step, model)
    model.train_function = None  # made again from the new step by the next fit


def adversarial_training(model: keras.Model, embedding_name: str = EMBEDDING_TOKEN, epsilon: float = 1.0) -> None:
    """Makes `model.fit` train with FGM perturbations of the embedding table (bert4keras's `adversarial_training`).

    Args:
        model: a compiled Keras model.
        embedding_name: the embedding layer to perturb.
        epsilon: the perturbation's norm (bert4keras's examples: 0.5 to 1).
    """
    table = embedding_table(model, embedding_name)
    ordinary_step = model.train_step

    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        gradient = _loss_gradient(self, x, y, sample_weight, table)
        delta = epsilon * gradient / (keras.ops.sqrt(keras.ops.sum(keras.ops.square(gradient))) + 1e-8)
        table.assign_add(delta)
        logs = ordinary_step(data)
        table.assign_sub(delta)
        return logs

    _replace_train_step(model, train_step)


def gradient_penalty(model: keras.Model, embedding_name: str = EMBEDDING_TOKEN, epsilon: float = 1.0) -> None:
    """Makes `model.fit` minimise loss + ½·epsilon·‖∂loss/∂embeddings‖² (bert4keras's `loss_with_gradient_penalty`).

    The reported `loss` includes the penalty, as in bert4keras.
    """
    table = embedding_table(model, embedding_name)

    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        loss, y_pred, gradients = _penalised(self, x, y, sample_weight, table, epsilon)
        with _outside_autograd():
            self.optimizer.apply(gradients, self.trainable_variables)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
        return self.compute_metrics(x, y, y_pred, sample_weight)

    _replace_train_step(model, train_step)


def _penalised(model, x, y, sample_weight, table, epsilon: float):
    """loss + ½·epsilon·‖∂loss/∂table‖², the prediction, and the total's gradients for the trainable weights
    (a second-order gradient: the penalty's own gradient goes through the first)."""
    variables = model.trainable_variables
    if keras.backend.backend() == "torch":
        import torch

        loss, y_pred = _loss(model, x, y, sample_weight)
        gradient = torch.autograd.grad(loss, table.value, create_graph=True)[0]
        loss = loss + 0.5 * epsilon * torch.sum(gradient ** 2)
        return loss, y_pred, torch.autograd.grad(loss, [variable.value for variable in variables], allow_unused=True)
    import tensorflow as tf

    with tf.GradientTape() as tape:
        with tf.GradientTape() as inner:
            loss, y_pred = _loss(model, x, y, sample_weight)
        gradient = tf.convert_to_tensor(inner.gradient(loss, table))
        loss = loss + 0.5 * epsilon * tf.reduce_sum(tf.square(gradient))
    return loss, y_pred, tape.gradient(loss, variables)


def _outside_autograd():
    """PyTorch updates weights outside its autograd graph (as Keras's own torch step does)."""
    if keras.backend.backend() == "torch":
        import torch

        return torch.no_grad()
    return contextlib.nullcontext()
