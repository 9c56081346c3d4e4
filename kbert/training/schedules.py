"""Learning-rate schedules: kbert's warm-up then linear decay (or a constant rate), and bert4keras's piecewise-linear one.

All three are Keras `LearningRateSchedule`s: pass them as an optimizer's
`learning_rate`; they are saved with the optimizer.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

import keras


@keras.saving.register_keras_serializable(package="kbert")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to `peak`, then linear decay to 0 at `total_steps`.

    Example:
    >>> schedule = WarmupLinearDecay(2e-5, warmup_steps=100, total_steps=1000)
    >>> [round(float(schedule(step)), 9) for step in (0, 50, 100, 550, 1000)]  # float32 inside
    [0.0, 1e-05, 2e-05, 1e-05, 0.0]
    """

    def __init__(self, peak: float, warmup_steps: int, total_steps: int):
        self.peak, self.warmup_steps, self.total_steps = peak, warmup_steps, total_steps

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        falling = (self.total_steps - step) / keras.ops.maximum(float(self.total_steps - self.warmup_steps), 1.0)
        return self.peak * keras.ops.clip(keras.ops.minimum(_rising(step, self.warmup_steps), falling), 0.0, 1.0)

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps, "total_steps": self.total_steps}


@keras.saving.register_keras_serializable(package="kbert")
class WarmupConstant(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to `peak`, then `peak` to the end (`kbert train --schedule constant`).

    Under Keras's `Adafactor`, which caps each step's rate at 1/sqrt(step), a constant
    1e-2 is T5's own inverse-square-root schedule (1e-2 for 10,000 steps, then 1/sqrt(step)).

    Example:
    >>> schedule = WarmupConstant(1e-2, warmup_steps=100)
    >>> [round(float(schedule(step)), 9) for step in (0, 50, 100, 10_000)]
    [0.0, 0.005, 0.01, 0.01]
    """

    def __init__(self, peak: float, warmup_steps: int):
        self.peak, self.warmup_steps = peak, warmup_steps

    def __call__(self, step):
        return self.peak * keras.ops.clip(_rising(keras.ops.cast(step, "float32"), self.warmup_steps), 0.0, 1.0)

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps}


def _rising(step, warmup_steps: int):
    """The warm-up's share of the peak at `step` (a float32 tensor), past 1 after it. No warm-up: 1, the
    first step at the peak already (step 0 / 0 would give it no step at all)."""
    return step / float(warmup_steps) if warmup_steps else keras.ops.ones_like(step)


@keras.saving.register_keras_serializable(package="kbert")
class PiecewiseLinear(keras.optimizers.schedules.LearningRateSchedule):
    """bert4keras's piecewise-linear schedule: `learning_rate` times a multiplier of the step.

    `schedule` maps steps to multipliers; between two of them the multiplier
    changes linearly, after the last it stays. Without an entry for step 0
    the multiplier starts from 0 (a warm-up), as in bert4keras's
    `extend_with_piecewise_linear_lr`.

    Args:
        learning_rate: the base learning rate.
        schedule: `{step: multiplier}`, e.g. `{1000: 1, 2000: 0.1}`.

    Example:
    >>> schedule = PiecewiseLinear(1e-3, {1000: 1, 2000: 0.1})
    >>> [round(float(schedule(step)), 6) for step in (0, 500, 1000, 1500, 2000, 5000)]
    [0.0, 0.0005, 0.001, 0.00055, 0.0001, 0.0001]
    """

    def __init__(self, learning_rate: float, schedule: Dict[int, float]):
        points = sorted((int(step), float(multiplier)) for step, multiplier in dict(schedule).items())
        if not points:
            raise ValueError("schedule: expected at least one {step: multiplier} entry")
        if points[0][0] != 0:
            points.insert(0, (0, 0.0))
        self.learning_rate = learning_rate
        self.points = points

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        multiplier = keras.ops.convert_to_tensor(self.points[-1][1], "float32")
        # From the last segment back, each one replaces the value where the step lies before its end.
        for (start, begin), (end, finish) in reversed(list(zip(self.points, self.points[1:]))):
            inside = begin + (finish - begin) * (step - start) / (end - start)
            multiplier = keras.ops.where(step < end, inside, multiplier)
        return self.learning_rate * multiplier

    def get_config(self):
        return {"learning_rate": self.learning_rate, "schedule": {str(k): v for k, v in self.points}}


def extend_with_piecewise_linear_lr(optimizer_class, name: Optional[str] = None) -> Callable:
    """bert4keras's optimizer extension on Keras 3: `optimizer_class` on a `PiecewiseLinear` rate.

    Returns a factory used as bert4keras's extended class is:
    `AdamLR = extend_with_piecewise_linear_lr(Adam, name="AdamLR")`, then
    `AdamLR(learning_rate=1e-4, lr_schedule={1000: 1, 2000: 0.1})` gives a
    Keras `Adam` whose learning rate is `PiecewiseLinear(1e-4, lr_schedule)`.

    Example:
    >>> AdamLR = extend_with_piecewise_linear_lr(keras.optimizers.Adam, name="AdamLR")
    >>> optimizer = AdamLR(learning_rate=1e-4, lr_schedule={1000: 1, 2000: 0.1})
    >>> type(optimizer).__name__, optimizer.name, round(float(optimizer.learning_rate), 9)
    ('Adam', 'AdamLR', 0.0)
    """

    def build(learning_rate: float = 0.001, lr_schedule: Optional[Dict[int, float]] = None, **kwargs):
        schedule = PiecewiseLinear(learning_rate, lr_schedule or {0: 1})
        return optimizer_class(learning_rate=schedule, name=name or optimizer_class.__name__.lower(), **kwargs)

    build.__name__ = build.__qualname__ = name or f"{optimizer_class.__name__}PiecewiseLinearLR"
    return build
