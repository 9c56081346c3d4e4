"""`bert4keras.optimizers` on Keras 3: `Adam`, `AdaFactor` and every `extend_with_*`.

Each `extend_with_X(BaseOptimizer, name=None)` returns a subclass of
`BaseOptimizer` taking the extra keywords bert4keras's did, so extensions
compose as in bert4keras scripts:

    AdamW = extend_with_weight_decay(Adam, "AdamW")
    AdamWLR = extend_with_piecewise_linear_lr(AdamW, "AdamWLR")
    optimizer = AdamWLR(learning_rate=1e-4, weight_decay_rate=0.01,
                        exclude_from_weight_decay=["Norm", "bias"], lr_schedule={1000: 1})

Where Keras 3 has the feature (weight decay, EMA, gradient accumulation,
schedules) the extension sets Keras's option; the others (layer adaptation,
lookahead, lazy optimization, parameter-wise rates) wrap each variable's
`update_step`. Variable names are matched, as bert4keras matched them,
against the variable's full path (`Transformer-0-FeedForward-Norm/gamma`),
by regular-expression search (substring for parameter-wise rates).

Example:
>>> import keras
>>> AdamEMA = extend_with_exponential_moving_average(Adam, name="AdamEMA")
>>> optimizer = AdamEMA(learning_rate=1e-3, ema_momentum=0.9)
>>> type(optimizer).__name__, optimizer.use_ema, optimizer.epsilon
('AdamEMA', True, 1e-06)
"""

from __future__ import annotations

import re
from typing import Dict, Optional, Sequence

import keras
import numpy as np
from keras import ops

from kbert.errors import KbertError
from kbert.training.optimizers import SummedSparseGradients
from kbert.training.schedules import PiecewiseLinear

__all__ = ["AdaFactor", "Adam", "extend_with_exponential_moving_average", "extend_with_gradient_accumulation",
           "extend_with_layer_adaptation", "extend_with_lazy_optimization", "extend_with_lookahead",
           "extend_with_parameter_wise_lr", "extend_with_piecewise_linear_lr", "extend_with_weight_decay"]


class Adam(SummedSparseGradients, keras.optimizers.Adam):
    """Keras's Adam with bert4keras's defaults: `epsilon=1e-6`, and `bias_correction`; a token repeated in a
    batch takes Adam's step on TensorFlow too, as in bert4keras (`kbert.training.optimizers`).

    Args:
        bias_correction: divide the moments by (1 − β^t) as Adam does (True),
            or not (False: the step is `learning_rate · m / (√v + ε)`).
    """

    def __init__(self, learning_rate=0.001, beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-6,
                 bias_correction: bool = True, **kwargs):
        super().__init__(learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon, **kwargs)
        self.bias_correction = bias_correction

    def update_step(self, gradient, variable, learning_rate):
        if not self.bias_correction:  # undo the factor Keras's step multiplies the rate by
            step = ops.cast(self.iterations + 1, variable.dtype)
            learning_rate = (ops.cast(learning_rate, variable.dtype) * (1 - ops.power(self.beta_1, step))
                             / ops.sqrt(1 - ops.power(self.beta_2, step)))
        super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        return {**super().get_config(), "bias_correction": self.bias_correction}


def AdaFactor(learning_rate=1e-3, beta1: float = 0.0, beta2=None, epsilon1: float = 1e-30, epsilon2: float = 1e-3,
              multiply_by_parameter_scale: bool = True, clipping_threshold: Optional[float] = 1.0,
              min_dim_size_to_factor: int = 128, **kwargs) -> keras.optimizers.Adafactor:
    """bert4keras's `AdaFactor` as Keras 3's `Adafactor` (its rate `learning_rate`, β₂ = 1 − t^−0.8).

    Keras's Adafactor has no first moment and always scales by the
    parameter's RMS, so `beta1` other than 0 and
    `multiply_by_parameter_scale=False` are errors; it factors every matrix,
    where bert4keras factored those with both sides ≥ `min_dim_size_to_factor`.
    """
    if beta1:
        raise KbertError(f"AdaFactor(beta1={beta1}): Keras 3's Adafactor keeps no first moment; use beta1=0.0, "
                         "or keras.optimizers.Adam")
    if beta2 is not None:
        raise KbertError("AdaFactor(beta2=...): Keras 3's Adafactor uses bert4keras's default, 1 - t^-0.8; "
                         "leave beta2 out")
    if not multiply_by_parameter_scale:
        raise KbertError("AdaFactor(multiply_by_parameter_scale=False): Keras 3's Adafactor always scales by the "
                         "parameter's RMS")
    return keras.optimizers.Adafactor(learning_rate=learning_rate, epsilon_1=epsilon1, epsilon_2=epsilon2,
                                      clip_threshold=clipping_threshold or float("inf"), relative_step=False,
                                      **kwargs)


def _extend(base, name: Optional[str], suffix: str, namespace: dict):
    new = type(name or f"{base.__name__}{suffix}", (base,), namespace)
    new.__qualname__ = new.__name__
    return new


def _matches(variable, patterns: Sequence[str]) -> bool:
    return any(re.search(pattern, variable.path) for pattern in patterns)


def _adjusting_step(base, name, suffix, init, after_step, build):
    """A subclass of `base` whose `after_step(self, gradient, variable, before, learning_rate)` adjusts each
    variable after `base`'s own step, knowing its value `before` it; `build` makes its per-variable state."""

    def update_step(self, gradient, variable, learning_rate):
        before = ops.copy(variable)  # a read of the value (convert_to_tensor would give the variable itself)
        base.update_step(self, gradient, variable, learning_rate)
        after_step(self, gradient, variable, before, learning_rate)

    return _extend(base, name, suffix, {"__init__": init, "build": build, "update_step": update_step})


def _flag_matching(variables, patterns: Sequence[str]) -> list:
    """Per variable index, whether its path matches: the optimizer's steps see the backend's variables,
    which have no Keras path, so the match is made once, in `build`, on Keras's."""
    return [_matches(variable, patterns) for variable in variables]


def extend_with_weight_decay(base, name: Optional[str] = None):
    """Decoupled weight decay: each step also subtracts `learning_rate · weight_decay_rate · w` (Keras's
    `weight_decay`), except for variables matching `exclude_from_weight_decay`."""

    def __init__(self, *args, weight_decay_rate: float = 0.01, exclude_from_weight_decay=(), **kwargs):
        base.__init__(self, *args, weight_decay=weight_decay_rate, **kwargs)
        self.exclude_patterns = list(exclude_from_weight_decay)

    def build(self, variables):
        base.build(self, variables)  # Keras's own exclusion list, which knows its variables however wrapped
        self.exclude_from_weight_decay(var_list=[v for v in variables if _matches(v, self.exclude_patterns)])

    return _extend(base, name, "W", {"__init__": __init__, "build": build})


def extend_with_layer_adaptation(base, name: Optional[str] = None):
    """Layer-wise adaptation (LAMB's trust ratio): each variable's step is rescaled to ‖w‖ / ‖step / rate‖,
    except for variables matching `exclude_from_layer_adaptation`. (Keras's weight decay, applied before
    the step, is not part of the rescaled step.)"""

    def __init__(self, *args, exclude_from_layer_adaptation=(), **kwargs):
        base.__init__(self, *args, **kwargs)
        self.exclude_from_adaptation = list(exclude_from_layer_adaptation)

    def build(self, variables):
        base.build(self, variables)
        self.excluded = _flag_matching(variables, self.exclude_from_adaptation)

    def after_step(self, gradient, variable, before, learning_rate):
        if self.excluded[self._get_variable_index(variable)]:
            return
        step = ops.convert_to_tensor(variable) - before
        weight_norm = ops.norm(before)
        step_norm = ops.norm(step / ops.cast(learning_rate, variable.dtype))
        ratio = ops.where((weight_norm > 0) & (step_norm > keras.config.epsilon()), weight_norm / step_norm, 1.0)
        variable.assign(before + step * ratio)

    return _adjusting_step(base, name, "LA", __init__, after_step, build)


def extend_with_lazy_optimization(base, name: Optional[str] = None):
    """Lazy updates: in variables matching `include_in_lazy_optimization` (an embedding table), rows whose
    gradient is zero in this step keep their values, as bert4keras's lazy optimizer."""

    def __init__(self, *args, include_in_lazy_optimization=(), **kwargs):
        base.__init__(self, *args, **kwargs)
        self.include_in_lazy = list(include_in_lazy_optimization)

    def build(self, variables):
        base.build(self, variables)
        self.lazy = _flag_matching(variables, self.include_in_lazy)

    def after_step(self, gradient, variable, before, learning_rate):
        if not self.lazy[self._get_variable_index(variable)]:
            return
        gradient = ops.convert_to_tensor(gradient)  # an embedding's sparse gradient, densified
        touched = ops.any(ops.not_equal(gradient, 0), axis=tuple(range(1, len(variable.shape))), keepdims=True)
        variable.assign(ops.where(touched, variable, before))

    return _adjusting_step(base, name, "Lazy", __init__, after_step, build)


def extend_with_lookahead(base, name: Optional[str] = None):
    """Lookahead: slow weights move `slow_step_size` of the way to the fast ones every
    `steps_per_slow_update` steps, and the fast weights restart from them."""

    def __init__(self, *args, steps_per_slow_update: int = 5, slow_step_size: float = 0.5, **kwargs):
        base.__init__(self, *args, **kwargs)
        self.steps_per_slow_update = steps_per_slow_update
        self.slow_step_size = slow_step_size

    def build(self, variables):
        base.build(self, variables)
        self.slow_weights = [self.add_variable_from_reference(variable, "slow") for variable in variables]

    def after_step(self, gradient, variable, before, learning_rate):
        slow = self.slow_weights[self._get_variable_index(variable)]
        start = ops.where(ops.equal(self.iterations, 0), before, slow)  # the slow weights start as the fast
        synchronise = ops.equal((self.iterations + 1) % self.steps_per_slow_update, 0)
        moved = start + self.slow_step_size * (ops.convert_to_tensor(variable) - start)
        slow.assign(ops.where(synchronise, moved, start))
        variable.assign(ops.where(synchronise, moved, variable))

    return _adjusting_step(base, name, "Lookahead", __init__, after_step, build)


def extend_with_parameter_wise_lr(base, name: Optional[str] = None):
    """Per-variable rates: `paramwise_lr_schedule` maps name substrings to multipliers of the rate
    (a variable matching several gets their product)."""

    def __init__(self, *args, paramwise_lr_schedule: Optional[Dict[str, float]] = None, **kwargs):
        base.__init__(self, *args, **kwargs)
        self.paramwise_lr_schedule = dict(paramwise_lr_schedule or {})

    def build(self, variables):
        base.build(self, variables)
        self.multipliers = [float(np.prod([value for key, value in self.paramwise_lr_schedule.items()
                                           if key in variable.path])) for variable in variables]

    def update_step(self, gradient, variable, learning_rate):
        base.update_step(self, gradient, variable, learning_rate * self.multipliers[self._get_variable_index(variable)])

    return _extend(base, name, "PLR", {"__init__": __init__, "build": build, "update_step": update_step})


def extend_with_piecewise_linear_lr(base, name: Optional[str] = None):
    """The rate times bert4keras's piecewise-linear multiplier of the step (`lr_schedule={1000: 1, 2000: 0.1}`:
    warm up to the full rate by step 1000, then down to a tenth by 2000); see `kbert.PiecewiseLinear`."""

    def __init__(self, learning_rate=0.001, *args, lr_schedule: Optional[Dict[int, float]] = None, **kwargs):
        base.__init__(self, PiecewiseLinear(learning_rate, lr_schedule or {0: 1}), *args, **kwargs)

    return _extend(base, name, "LR", {"__init__": __init__})


def extend_with_gradient_accumulation(base, name: Optional[str] = None):
    """Updates every `grad_accum_steps` steps with the mean of their gradients (Keras's
    `gradient_accumulation_steps`)."""

    def __init__(self, *args, grad_accum_steps: int = 2, **kwargs):
        base.__init__(self, *args, gradient_accumulation_steps=grad_accum_steps, **kwargs)

    return _extend(base, name, "GA", {"__init__": __init__})


def extend_with_exponential_moving_average(base, name: Optional[str] = None):
    """An exponential moving average of the weights (Keras's `use_ema`), with bert4keras's
    `apply_ema_weights()` (put the averages into the model, keeping the weights) and `reset_old_weights()`.

    Keras starts the average at the weights' first values, so it has no bias
    toward zero to correct; `apply_ema_weights(bias_correction=...)` is
    accepted for bert4keras's calls and changes nothing. Keras's `fit` also
    puts the averages into the model when it ends.
    """

    def __init__(self, *args, ema_momentum: float = 0.999, **kwargs):
        base.__init__(self, *args, use_ema=True, ema_momentum=ema_momentum, **kwargs)
        self.old_weights = None

    def apply_ema_weights(self, bias_correction: bool = True):
        variables = self._trainable_variables
        self.old_weights = [ops.convert_to_numpy(variable) for variable in variables]
        for variable, average in zip(variables, self._model_variables_moving_average):
            variable.assign(average)

    def reset_old_weights(self):
        if self.old_weights is None:
            raise KbertError("reset_old_weights: call apply_ema_weights() first")
        for variable, value in zip(self._trainable_variables, self.old_weights):
            variable.assign(value)
        self.old_weights = None

    return _extend(base, name, "EMA", {"__init__": __init__, "apply_ema_weights": apply_ema_weights,
                                       "reset_old_weights": reset_old_weights})


def _install_v2_names() -> None:
    """bert4keras's `extend_with_*_v2` were its tf.keras variants; on Keras 3 they are the same."""
    for extension in [name for name in __all__ if name.startswith("extend_with_")]:
        globals()[f"{extension}_v2"] = globals()[extension]
        __all__.append(f"{extension}_v2")


_install_v2_names()
