"""The optimizers of `kbert train` and `kbert pretrain`: Keras's AdamW, LAMB and Adafactor, with one fix and one
option.

On TensorFlow the gradient of an embedding lookup is a `tf.IndexedSlices`
with one slice per occurrence of a token, and Keras 3's moment updates
square those slices before adding them up: the second moment of a token
seen n times in a batch gets the sum of n squares, not the square of the
sum, so its Adam step is up to √n times too large ([CLS], the segment ids
and frequent characters move fastest). JAX and PyTorch hand a dense
gradient, summed first. `SummedSparseGradients` sums the slices before the
optimizer sees them, so a step is Adam's step on every backend (and the
one bert4keras's Keras 2 Adam took). `learning_rate_multipliers` gives some
weights (by path) a multiple of the learning rate (`WeightLearningRates`).

Example:
>>> import numpy as np
>>> embedding = keras.layers.Embedding(3, 2, embeddings_initializer="ones")
>>> ids = keras.Input((3,), dtype="int32")
>>> model = keras.Model(ids, keras.ops.sum(embedding(ids), axis=(1, 2)))
>>> model.compile(AdamW(0.1, weight_decay=0.0), loss="mse")
>>> _ = model.train_on_batch(np.array([[1, 1, 2]]), np.array([0.0]))
>>> [round(float(x), 4) for x in keras.ops.convert_to_numpy(embedding.embeddings)[:, 0]]  # Adam's first step
[1.0, 0.9, 0.9]
"""

from __future__ import annotations

from typing import Optional

import keras

from kbert.layers import ConditionalLayerNormalization, RMSNormalization
from kbert.training.options import TrainingOptions
from kbert.training.schedules import WarmupConstant, WarmupLinearDecay


class SummedSparseGradients:
    """A mixin for a Keras optimizer: sparse (`tf.IndexedSlices`) gradients are summed into dense ones first."""

    def apply(self, grads, trainable_variables=None):
        return super().apply([_summed(gradient) for gradient in grads], trainable_variables)


def _summed(gradient):
    if type(gradient).__name__ != "IndexedSlices":  # only TensorFlow makes them
        return gradient
    import tensorflow as tf

    return tf.convert_to_tensor(gradient)  # adds the slices of a repeated row


class WeightLearningRates:
    """A mixin for a Keras optimizer: the weights named in `learning_rate_multipliers` (path: multiplier) take
    their steps at that multiple of the learning rate.

    The update is split by multiplier at the backend's own collective step, so it holds on every backend
    (PyTorch's Adam updates all weights in one fused call, never through `update_step`).
    """

    learning_rate_multipliers: dict = {}

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        groups: dict = {}
        for gradient, variable in zip(grads, trainable_variables):
            groups.setdefault(self.learning_rate_multipliers.get(variable.path, 1), []).append((gradient, variable))
        for multiplier, pairs in groups.items():
            gradients, variables = zip(*pairs)
            super()._backend_update_step(list(gradients), list(variables),
                                         learning_rate if multiplier == 1 else learning_rate * multiplier)


class InPlaceTorchAdam:
    """A mixin for Keras's `Adam` and `AdamW`: on PyTorch, every weight's step in one pass of in-place
    `torch._foreach_*` calls, as PyTorch's own AdamW takes it.

    Keras gives its fused PyTorch update to its own classes only (a subclass, as kbert's, takes one weight at a
    time), and that update allocates a new tensor for each of `g²`, `α·m`, `√v + ε` and their quotient: on
    DeBERTa-v3-base's embedding (128,100 × 768 float32) each is a pass over 390 MB. Here the moments move in
    place (`lerp_`, `addcmul_`) and only `√v + ε` is allocated. The same step, to float rounding; AMSGrad takes
    Keras's own.
    """

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        if keras.backend.backend() != "torch" or self.amsgrad:
            return super()._backend_update_step(grads, trainable_variables, learning_rate)
        import torch

        with torch.no_grad():
            self._in_place_step(torch, grads, trainable_variables, learning_rate)

    def _in_place_step(self, torch, grads, trainable_variables, learning_rate) -> None:
        values = [variable.value for variable in trainable_variables]
        indices = [self._get_variable_index(variable) for variable in trainable_variables]
        momenta = [self._momentums[index].value for index in indices]
        velocities = [self._velocities[index].value for index in indices]
        dtype = values[0].dtype
        step = keras.ops.cast(self.iterations + 1, dtype)
        alpha = (keras.ops.cast(learning_rate, dtype) * keras.ops.sqrt(1 - keras.ops.power(self.beta_2, step))
                 / (1 - keras.ops.power(self.beta_1, step)))
        grads = [keras.ops.cast(gradient, dtype) for gradient in grads]
        torch._foreach_lerp_(momenta, grads, 1 - self.beta_1)  # m ← β1·m + (1 − β1)·g
        torch._foreach_mul_(velocities, self.beta_2)
        torch._foreach_addcmul_(velocities, grads, grads, value=1 - self.beta_2)  # v ← β2·v + (1 − β2)·g²
        denominators = torch._foreach_sqrt(velocities)
        torch._foreach_add_(denominators, self.epsilon)
        torch._foreach_div_(denominators, alpha)  # (√v + ε) / α, so that one addcdiv_ takes the step
        torch._foreach_addcdiv_(values, momenta, denominators, value=-1.0)


@keras.saving.register_keras_serializable(package="kbert")
class AdamW(WeightLearningRates, InPlaceTorchAdam, SummedSparseGradients, keras.optimizers.AdamW):
    """Keras's `AdamW`, taking Adam's step for repeated tokens on TensorFlow too (see the module), and in place
    on PyTorch (`InPlaceTorchAdam`)."""


@keras.saving.register_keras_serializable(package="kbert")
class Lamb(WeightLearningRates, SummedSparseGradients, keras.optimizers.Lamb):
    """Keras's `Lamb`, taking LAMB's step for repeated tokens on TensorFlow too (see the module)."""


@keras.saving.register_keras_serializable(package="kbert")
class Adafactor(WeightLearningRates, SummedSparseGradients, keras.optimizers.Adafactor):
    """Keras's `Adafactor` (T5's optimizer), with the sparse gradients summed first on TensorFlow (see the module).

    Its step is the learning rate times the weight's root mean square (at least 1e-3), so every weight moves by
    the same share of its scale: T5's initialisation draws weights from std 1 (the token embedding) to
    (H · head size)^(-1/2) (the queries), which an Adam step of one size for all moves at very different paces.
    """


def make_optimizer(options: TrainingOptions, steps_per_epoch: int, model: Optional[keras.Model] = None,
                   learning_rate_multipliers: Optional[dict] = None) -> keras.optimizers.Optimizer:
    """AdamW (LAMB, Adafactor) with warm-up and linear decay (or a constant rate); EMA and accumulation as asked.

    No decay on biases, nor on any weight of `model`'s normalisation layers, whatever its name
    (LayerNorm's `gamma`/`beta`, the RMS norms' `scale`, the conditional norms' dense maps).
    `learning_rate_multipliers`: `{weight path: multiplier}` (`WeightLearningRates`).
    """
    steps = options.epochs * steps_per_epoch
    warmup_steps = int(options.warmup_ratio * steps)
    schedule = (WarmupConstant(options.learning_rate, warmup_steps) if options.schedule == "constant"
                else WarmupLinearDecay(options.learning_rate, warmup_steps, steps))
    optimizer_class = {"lamb": Lamb, "adafactor": Adafactor}.get(options.optimizer, AdamW)
    optimizer = optimizer_class(
        schedule, weight_decay=options.weight_decay, use_ema=options.ema,
        gradient_accumulation_steps=options.grad_accum if options.grad_accum > 1 else None,
        **({} if optimizer_class is Adafactor else {"epsilon": 1e-6}))
    optimizer.exclude_from_weight_decay(var_list=normalization_weights(model) if model is not None else None,
                                        var_names=["gamma", "beta", "bias", "trans"])
    optimizer.learning_rate_multipliers = dict(learning_rate_multipliers or {})
    return optimizer


def normalization_weights(model: keras.Model) -> list:
    """The weights of every normalisation layer of `model` (nested models included)."""
    norms = (keras.layers.LayerNormalization, keras.layers.BatchNormalization, RMSNormalization,
             ConditionalLayerNormalization)
    return [weight for layer in model._flatten_layers(include_self=False) if isinstance(layer, norms)
            for weight in layer.weights]
