"""Adversarial training on the token embeddings: FGM, the gradient penalty and VAT, as Keras 3 train steps.

bert4keras's recipes (`task_iflytek_adversarial_training.py`,
`task_iflytek_gradient_penalty.py`,
`task_sentiment_virtual_adversarial_training.py`) built these from Keras 2's
graph-mode `K.gradients` and `model._make_train_function`, which Keras 3 no
longer has. Here each replaces the compiled model's `train_step` with one that
computes the same thing with the backend's own gradients (`tf.GradientTape`,
`torch.autograd`, `jax.grad`):

- `adversarial_training` (FGM, Miyato et al.): each step first takes the
  loss's gradient g with respect to the embedding table, adds
  ε·g/‖g‖ to the table, takes the ordinary training step on the perturbed
  table, and removes the perturbation again.
- `gradient_penalty`: each step minimises loss + ½·ε·‖∂loss/∂E‖², the
  gradient's squared norm over the embedding table (a second-order gradient).
- `virtual_adversarial_training` (VAT, for unlabelled batches): the targets are
  the model's own predictions; the perturbation is the direction that changes
  them most, found by power iteration from a random direction of norm ξ, and
  scaled to norm ε.

Call one after `model.compile(...)`, before `fit`. On JAX the step is a pure
function of the weights: the perturbed table is passed in, never assigned.

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
from keras import ops

from kbert.errors import ConfigError
from kbert.models.naming import EMBEDDING_TOKEN


def embedding_table(model: keras.Model, embedding_name: str = EMBEDDING_TOKEN):
    """The weight matrix of the layer `embedding_name` in `model` (or in a model nested in it)."""
    for layer in model._flatten_layers(include_self=False):
        if layer.name == embedding_name and hasattr(layer, "embeddings"):
            return layer.embeddings
    raise ConfigError(f"adversarial training: the model has no embedding layer named {embedding_name!r} "
                      f"(kbert's and bert4keras's token embedding is {EMBEDDING_TOKEN!r})")


def adversarial_training(model: keras.Model, embedding_name: str = EMBEDDING_TOKEN, epsilon: float = 1.0) -> None:
    """Makes `model.fit` train with FGM perturbations of the embedding table (bert4keras's `adversarial_training`).

    Args:
        model: a compiled Keras model.
        embedding_name: the embedding layer to perturb.
        epsilon: the perturbation's norm (bert4keras's examples: 0.5 to 1).
    """
    table = _trainable_table(model, embedding_name)
    _replace_train_step(model, _JaxSteps(model, table).fgm(epsilon) if _on_jax() else _fgm_step(table, epsilon))


def gradient_penalty(model: keras.Model, embedding_name: str = EMBEDDING_TOKEN, epsilon: float = 1.0) -> None:
    """Makes `model.fit` minimise loss + ½·epsilon·‖∂loss/∂embeddings‖² (bert4keras's `loss_with_gradient_penalty`).

    The reported `loss` includes the penalty, as in bert4keras.

    Args:
        model: a compiled Keras model (not with a loss-scale optimizer: the
            penalty's gradients are not loss-scaled).
        embedding_name: the embedding layer whose gradient is penalised.
        epsilon: the penalty's weight.
    """
    table = _trainable_table(model, embedding_name)
    if isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer):
        raise ConfigError("gradient_penalty: the model's optimizer is a LossScaleOptimizer (float16 mixed "
                          "precision), which would divide the penalty's unscaled gradients by the loss scale; "
                          "use bfloat16 or float32, or FGM (adversarial_training)")
    _replace_train_step(model, _JaxSteps(model, table).penalty(epsilon) if _on_jax() else _penalty_step(table, epsilon))


def virtual_adversarial_training(model: keras.Model, embedding_name: str = EMBEDDING_TOKEN, epsilon: float = 1.0,
                                 xi: float = 10.0, iters: int = 1, seed: int | None = None) -> None:
    """Makes `model.fit` train on virtual adversarial perturbations (bert4keras's `virtual_adversarial_training`).

    Each step ignores the batch's labels: the targets are the model's own
    predictions (inference mode) on the clean inputs, the table is perturbed by
    ε·d/‖d‖, where d comes from `iters` steps of power iteration (a random
    direction of norm ξ, then the loss's gradient at the table perturbed by
    it), and the ordinary step is taken on the perturbed table. Norms are over
    the whole table, as in bert4keras.

    Args:
        model: a compiled Keras model whose loss compares two predictions
            (bert4keras's example: `"kld"`).
        embedding_name: the embedding layer to perturb.
        epsilon: the perturbation's norm.
        xi: the norm of the probe in the power iteration.
        iters: power-iteration steps (at least 1).
        seed: seeds the random starting directions.
    """
    if not isinstance(iters, int) or iters < 1:
        raise ConfigError(f"virtual_adversarial_training: iters must be a whole number of at least 1, got {iters!r}")
    table = _trainable_table(model, embedding_name)
    steps = _JaxSteps(model, table).vat(epsilon, xi, iters, seed) if _on_jax() else _vat_step(table, epsilon, xi,
                                                                                               iters, seed)
    _replace_train_step(model, steps)


def _on_jax() -> bool:
    return keras.backend.backend() == "jax"


def _trainable_table(model: keras.Model, embedding_name: str):
    table = embedding_table(model, embedding_name)
    if not any(variable is table for variable in model.trainable_variables):
        raise ConfigError(f"adversarial training: the embedding table of {embedding_name!r} is frozen "
                          "(trainable=False), and these methods take the loss's gradient with respect to it: "
                          "unfreeze the layer")
    return table


def _replace_train_step(model: keras.Model, train_step) -> None:
    if model.optimizer is None:
        raise ConfigError("adversarial training changes the compiled model's training step: "
                          "call model.compile(...) first")
    model.train_step = types.MethodType(train_step, model)
    model.train_function = None  # made again from the new step by the next fit


def _normalized(vector, norm: float):
    """`vector` scaled to the given norm over all its entries (bert4keras's `l2_normalize`, times the norm)."""
    return norm * vector / (ops.sqrt(ops.sum(ops.square(vector))) + 1e-8)


# TensorFlow and PyTorch: the table is a variable the step assigns to.


def _fgm_step(table, epsilon: float):
    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        delta = _normalized(_loss_gradient(self, x, y, sample_weight, table), epsilon)
        return _step_on_perturbed_table(self, table, delta, data)

    return train_step


def _penalty_step(table, epsilon: float):
    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        loss, y_pred, gradients = _penalised(self, x, y, sample_weight, table, epsilon)
        with _outside_autograd():
            self.optimizer.apply(gradients, self.trainable_variables)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
        return self.compute_metrics(x, y, y_pred, sample_weight)

    return train_step


def _vat_step(table, epsilon: float, xi: float, iters: int, seed: int | None):
    seeds = keras.random.SeedGenerator(seed)  # held here: an attribute of the model would become one of its weights

    def train_step(self, data):
        x, _, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with _outside_autograd():
            y = ops.stop_gradient(self(x, training=False))
        probe = keras.random.normal(ops.shape(table), seed=seeds)
        applied = ops.zeros_like(table)
        for _ in range(iters):
            probe = _normalized(probe, xi)
            table.assign_add(probe - applied)
            applied = probe
            probe = _loss_gradient(self, x, y, sample_weight, table)
        table.assign_sub(applied)
        return _step_on_perturbed_table(self, table, _normalized(probe, epsilon), (x, y, sample_weight))

    return train_step


def _step_on_perturbed_table(model, table, delta, data):
    table.assign_add(delta)
    logs = type(model).train_step(model, data)  # the class's own step, not the replaced one
    table.assign_sub(delta)
    return logs


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


class _JaxSteps:
    """The same steps on JAX, where `train_step(state, data)` is a pure function of the weights' values.

    The perturbed table is a value put in the table's place in the trainable
    values handed to Keras's own step; its gradients come from `jax.grad` of
    `compute_loss_and_updates`, unscaled.
    """

    def __init__(self, model: keras.Model, table):
        self.index = next(i for i, variable in enumerate(model.trainable_variables) if variable is table)

    def with_table(self, trainable: list, value) -> list:
        return [value if i == self.index else weight for i, weight in enumerate(trainable)]

    def loss_gradient(self, model, state, x, y, sample_weight):
        """The loss, the prediction and ∂loss/∂table at the state's values, and the state after the forward
        pass (dropout's seeds moved on)."""
        import jax

        trainable, non_trainable, optimizer_values, metric_values = state

        def loss_of_table(value):
            _, (loss, y_pred, moved, _) = model.compute_loss_and_updates(
                self.with_table(trainable, value), non_trainable, metric_values, x, y, sample_weight,
                training=True, optimizer_variables=optimizer_values)
            return loss, (y_pred, moved)

        (loss, (y_pred, moved)), gradient = jax.value_and_grad(loss_of_table, has_aux=True)(trainable[self.index])
        return loss, y_pred, gradient, (trainable, moved, optimizer_values, metric_values)

    def step_on_perturbed_table(self, model, state, delta, data):
        trainable, *rest = state
        logs, (trainable, *rest) = type(model).train_step(model, (self.with_table(trainable, trainable[self.index]
                                                                                   + delta), *rest), data)
        return logs, (self.with_table(trainable, trainable[self.index] - delta), *rest)

    def fgm(self, epsilon: float):
        def train_step(model, state, data):
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
            _, _, gradient, state = self.loss_gradient(model, state, x, y, sample_weight)
            return self.step_on_perturbed_table(model, state, _normalized(gradient, epsilon), data)

        return train_step

    def penalty(self, epsilon: float):
        import jax

        def train_step(model, state, data):
            trainable, _, optimizer_values, metric_values = state
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)

            def penalised(values):
                loss, y_pred, gradient, (_, moved, _, _) = self.loss_gradient(model, (values, *state[1:]), x, y,
                                                                              sample_weight)
                return loss + 0.5 * epsilon * jax.numpy.sum(gradient ** 2), (y_pred, moved)

            (loss, (y_pred, moved)), gradients = jax.value_and_grad(penalised, has_aux=True)(trainable)
            trainable, optimizer_values = model.optimizer.stateless_apply(optimizer_values, gradients, trainable)
            logs, metric_values = model._update_metrics_variables(metric_values, loss, x, y, y_pred, sample_weight)
            return logs, (trainable, moved, optimizer_values, metric_values)

        return train_step

    def vat(self, epsilon: float, xi: float, iters: int, seed: int | None):
        import jax

        key = jax.random.key(0 if seed is None else seed)

        def train_step(model, state, data):
            trainable, non_trainable, optimizer_values, metric_values = state
            x, _, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
            y, _ = model.stateless_call(trainable, non_trainable, x, training=False)
            y = jax.lax.stop_gradient(y)
            table = trainable[self.index]
            step = next(value for variable, value in zip(model.optimizer.variables, optimizer_values)
                        if variable is model.optimizer.iterations)
            probe = jax.random.normal(jax.random.fold_in(key, step), table.shape, table.dtype)
            for _ in range(iters):
                probed = (self.with_table(trainable, table + _normalized(probe, xi)), *state[1:])
                _, _, probe, state = self.loss_gradient(model, probed, x, y, sample_weight)
                state = (trainable, *state[1:])
            return self.step_on_perturbed_table(model, state, _normalized(probe, epsilon), (x, y, sample_weight))

        return train_step
