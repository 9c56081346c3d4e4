"""`K`: the Keras 2 backend functions bert4keras scripts call, on Keras 3's `keras.ops`.

bert4keras scripts import `K` from `bert4keras.backend` (Keras 2's
`keras.backend`, which Keras 3 no longer has) and write losses and `Lambda`
layers with it: `K.sum(loss * mask) / K.sum(mask)`,
`K.sparse_categorical_crossentropy(y_true, y_pred)`. This module keeps those
names and Keras 2's argument conventions (`axis=None, keepdims=False`, the
target first in the losses, integer targets given as floats), so such code
runs unchanged. `gradients` works where Keras 2's did, inside a TensorFlow graph
(a layer's call under `model.predict`); `function`, `learning_phase` and
`placeholder` have no Keras 3 equivalent: calling one raises an error that says
what to use instead.

Example:
>>> from kbert.compat.keras2 import K
>>> float(K.sum(K.cast(K.not_equal(K.arange(4), 2), K.floatx())))
3.0
>>> K.int_shape(K.zeros_like(K.ones((2, 3))))
(2, 3)
"""

from __future__ import annotations

import string
import sys

import keras
import numpy as np
from keras import ops

from kbert.errors import KbertError

# Keras 2's reductions and element-wise functions that keras.ops has under the same name and arguments.
_SAME_NAME = ("sum mean max min prod std var any all abs square sqrt exp log tanh sigmoid sign round cos sin "
              "maximum minimum equal not_equal greater greater_equal less less_equal stack squeeze reshape tile "
              "zeros ones zeros_like ones_like logsumexp softmax relu softplus transpose stop_gradient dot").split()


def floatx() -> str:
    return keras.config.floatx()


def epsilon() -> float:
    return keras.config.epsilon()


def cast(x, dtype):
    return ops.cast(x, dtype)


def dtype(x) -> str:
    """The dtype's name, as Keras 2's `K.dtype` (`"float32"`, `"int32"`, `"bool"`)."""
    return keras.backend.standardize_dtype(x.dtype)


def ndim(x) -> int:
    return len(x.shape)


def int_shape(x) -> tuple:
    """The static shape, `None` for an axis known only when run (Keras 2's `K.int_shape`)."""
    return tuple(x.shape)


def shape(x):
    """The shape when run, as a tensor one can index (`K.shape(x)[0]`) and compute with."""
    return ops.shape(x) if isinstance(x, keras.KerasTensor) else _tf().shape(x)


def concatenate(tensors, axis: int = -1):
    return ops.concatenate(tensors, axis=axis)


def expand_dims(x, axis: int = -1):
    return ops.expand_dims(x, axis)


def argmax(x, axis: int = -1):
    return ops.argmax(x, axis=axis)


def argmin(x, axis: int = -1):
    return ops.argmin(x, axis=axis)


def cumsum(x, axis: int = 0):
    return ops.cumsum(x, axis=axis)


def cumprod(x, axis: int = 0):
    return ops.cumprod(x, axis=axis)


def where(condition, x, y):
    return ops.where(ops.cast(condition, "bool"), x, y)


def clip(x, min_value, max_value):
    return ops.clip(x, min_value, max_value)


def pow(x, a):  # noqa: A001 (Keras 2's name)
    return ops.power(x, a)


def one_hot(indices, num_classes: int):
    return ops.one_hot(ops.cast(indices, "int32"), num_classes)


def permute_dimensions(x, pattern):
    return ops.transpose(x, pattern)


def repeat_elements(x, rep: int, axis: int):
    return ops.repeat(x, rep, axis=axis)


def arange(start, stop=None, step=1, dtype="int32"):  # noqa: A002 (Keras 2's name)
    return ops.arange(start, stop, step, dtype=dtype)


def l2_normalize(x, axis=None):
    return keras.utils.normalize(x, axis=-1 if axis is None else axis, order=2)


def sparse_categorical_crossentropy(target, output, from_logits: bool = False, axis: int = -1):
    """Keras 2's: integer targets (float ones are cast, as bert4keras's inputs were floats)."""
    return ops.sparse_categorical_crossentropy(ops.cast(target, "int32"), output, from_logits=from_logits, axis=axis)


def categorical_crossentropy(target, output, from_logits: bool = False, axis: int = -1):
    return ops.categorical_crossentropy(ops.cast(target, output.dtype), output, from_logits=from_logits, axis=axis)


def binary_crossentropy(target, output, from_logits: bool = False):
    return ops.binary_crossentropy(ops.cast(target, output.dtype), output, from_logits=from_logits)


def random_binomial(shape, p: float = 0.0, dtype=None, seed=None):  # noqa: A002
    """Ones with probability `p`, else zeros (Keras 2's `K.random_binomial`)."""
    return ops.cast(keras.random.uniform(shape, seed=seed) < p, dtype or floatx())


def random_uniform(shape, minval=0.0, maxval=1.0, dtype=None, seed=None):  # noqa: A002
    return keras.random.uniform(shape, minval, maxval, dtype=dtype, seed=seed)


def random_normal(shape, mean=0.0, stddev=1.0, dtype=None, seed=None):  # noqa: A002
    return keras.random.normal(shape, mean, stddev, dtype=dtype, seed=seed)


def in_train_phase(x, alt, training=None):
    """`x` when training, else `alt`.

    Keras 3 has no global learning phase; without `training`, the phase is
    that of the layer call this runs in (Keras passes `fit`'s training=True
    down to every layer it calls, also to one whose `call` takes no
    `training`), as Keras 2's learning phase was. Outside any layer call,
    `training` must be given.
    """
    if training is None:
        training = _training_of_the_current_call()
    if training is None:
        raise KbertError("K.in_train_phase: Keras 3 has no global learning phase; call it inside a layer's "
                         "call (the phase is the call's), or pass training=...")
    if isinstance(training, bool):
        return (x() if callable(x) else x) if training else (alt() if callable(alt) else alt)
    return ops.cond(ops.cast(training, "bool"), lambda: x() if callable(x) else x,
                    lambda: alt() if callable(alt) else alt)


def _training_of_the_current_call():
    """The `training` of the layer call running now: None outside any call, False in one without it."""
    from keras.src.backend.common import global_state  # Keras 3 keeps the call context there, not publicly

    context = global_state.get_global_attribute("current_call_ctx")
    if context is None:
        return None
    return False if context.training is None else context.training


def in_test_phase(x, alt, training=None):
    return in_train_phase(alt, x, training=training)


def variable(value, dtype=None, name=None):  # noqa: A002
    return keras.Variable(value, dtype=dtype or floatx(), name=name)


def constant(value, dtype=None, shape=None, name=None):  # noqa: A002
    value = np.full(shape, value) if shape is not None else value
    return ops.convert_to_tensor(value, dtype=dtype or floatx())


def eval(x) -> np.ndarray:  # noqa: A001 (Keras 2's name)
    """The value of a variable or tensor as a NumPy array (Keras 2's `K.eval`)."""
    return ops.convert_to_numpy(x.value if isinstance(x, keras.Variable) else x)


get_value = eval


def batch_get_value(tensors) -> list:
    return [eval(tensor) for tensor in tensors]


def set_value(x, value) -> None:
    """Assigns to a variable (Keras 2's `K.set_value`)."""
    x.assign(value)


def batch_set_value(pairs) -> None:
    for x, value in pairs:
        set_value(x, value)


def count_params(x) -> int:
    return int(np.prod(x.shape))


def batch_dot(x, y, axes=None):
    """Keras 2's `K.batch_dot`: a dot product over `axes` for each pair of rows of the batch axis 0.

    `axes` (default: x's last and y's second-to-last axis, or y's last for a
    2-D y) are summed over; the result holds x's other axes, then y's. A
    result of rank 1 gets a trailing axis, as Keras 2's.
    """
    x_rank, y_rank = len(x.shape), len(y.shape)
    if axes is None:
        axes = (x_rank - 1, y_rank - 1 if y_rank == 2 else y_rank - 2)
    elif isinstance(axes, int):
        axes = (axes, axes)
    x_axis, y_axis = (axis % rank for axis, rank in zip(axes, (x_rank, y_rank)))
    letters = iter(string.ascii_lowercase[2:])
    x_letters = ["b"] + [next(letters) for _ in range(x_rank - 1)]
    y_letters = ["b"] + [next(letters) for _ in range(y_rank - 1)]
    y_letters[y_axis] = x_letters[x_axis] = "a"
    kept = [letter for letter in x_letters[1:] + y_letters[1:] if letter != "a"]
    result = ops.einsum(f"{''.join(x_letters)},{''.join(y_letters)}->b{''.join(kept)}", x, y)
    return ops.expand_dims(result, -1) if len(result.shape) == 1 else result


def clear_session() -> None:
    keras.backend.clear_session()


def set_floatx(value: str) -> None:
    keras.config.set_floatx(value)


def _graph_mode_only(name: str, instead: str):
    def unavailable(*args, **kwargs):
        raise KbertError(f"K.{name}: Keras 2 graph-mode code has no Keras 3 equivalent; {instead}")
    unavailable.__name__ = name
    return unavailable


def gradients(loss, variables):
    """Keras 2's `K.gradients` (`tf.gradients`): where Keras 2 had it, inside a TensorFlow graph.

    A layer's `call` runs in one when the model's `predict`, `fit` or `evaluate`
    compiles it (Keras 3's default on TensorFlow), so bert4keras's gradient layers
    (integrated gradients: `K.gradients(output, [input])[0] * input`) run unchanged.
    Outside a graph (eager code, a symbolic build, JAX or PyTorch) there is nothing
    to differentiate, and the error says what to use instead.
    """
    if keras.backend.backend() == "tensorflow" and not _tf().executing_eagerly():
        return _tf().gradients(loss, variables)
    raise KbertError(
        "K.gradients: Keras 2's graph-mode gradients exist only inside a TensorFlow graph (a layer's call() "
        "under model.predict or fit on the TensorFlow backend); here compute gradients in a train_step with the "
        "backend's autodiff. For adversarial training use kbert.compat.adversarial.adversarial_training(model, "
        "'Embedding-Token', epsilon) (what `kbert migrate` writes), for a gradient penalty "
        "kbert.compat.adversarial.gradient_penalty(model, 'Embedding-Token', epsilon), for VAT "
        "kbert.compat.adversarial.virtual_adversarial_training(model, 'Embedding-Token')")


function = _graph_mode_only(
    "function", "call the model (model.predict or model(inputs)), or build a keras.Model on the tensors you need")
learning_phase = _graph_mode_only(
    "learning_phase", "Keras 3 passes `training` to each layer's call(); read it there")
placeholder = _graph_mode_only("placeholder", "use keras.Input(shape=..., dtype=...)")


def _tf():
    import tensorflow as tf  # kbert runs on the TensorFlow backend; imported where a tensor needs it
    return tf


def _install_same_name_functions() -> None:
    module = sys.modules[__name__]
    for name in _SAME_NAME:
        setattr(module, name, getattr(ops, name))


_install_same_name_functions()
K = sys.modules[__name__]
