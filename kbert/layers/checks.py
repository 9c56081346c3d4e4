"""Run-time checks on a layer's inputs that name what is wrong, on every Keras backend.

TensorFlow raises from inside a graph: a check there is an assertion the
graph runs (`tf.debugging.Assert`), in eager and `tf.function` alike, and
XLA (`jit_compile=True`) compiles it away as it does every assertion. JAX
and PyTorch run a check only on concrete values (eager calls, the torch
trainer); while JAX traces a function (`jit`, as Keras's `fit` and
`predict` do) or torch builds a symbolic graph the check is skipped, and
`IdModel` checks the arrays before they go in (`kbert.models.transformer`).
"""

from __future__ import annotations

import keras
from keras import ops

from kbert.errors import InputError


def is_concrete(tensor) -> bool:
    """Whether `tensor` holds values a check can read now (not a JAX tracer or a symbolic tensor).

    >>> is_concrete(ops.convert_to_tensor([1, 2]))
    True
    """
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return not isinstance(tensor, jax.core.Tracer)
    if backend == "torch":
        import torch

        return not torch.compiler.is_compiling() and getattr(tensor, "device", None) is not None \
            and tensor.device.type != "meta"
    return not isinstance(tensor, keras.KerasTensor)


def checked(value, condition, message: str):
    """`value`, once the boolean tensor `condition` holds; an error with `message` otherwise.

    On TensorFlow the error is `InvalidArgumentError` (raised by the graph);
    on the other backends it is `kbert.errors.InputError`.

    Example:
    >>> ids = ops.convert_to_tensor([3, 4])
    >>> tuple(checked(ids, ops.all(ids < 5), "ids must be below 5").shape)
    (2,)
    """
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        with tf.control_dependencies([tf.debugging.Assert(condition, [message])]):
            return tf.identity(value)
    if is_concrete(condition) and not bool(ops.convert_to_numpy(condition)):
        raise InputError(message)
    return value


def traced_once(function, signature=None, variables=None):
    """`function` compiled once where its backend compiles: a `tf.function` on TensorFlow (`signature(tf)`
    gives its input signature), `jax.jit` on JAX (retraced per input shape); as is on PyTorch.

    Decoding loops (generation's step, a tagger's decoder) call it once per
    token. On JAX the layers' weights are arguments of the compiled function,
    not constants baked into it: `variables` lists them (the model's
    `weights`), and they are read in a `keras.StatelessScope`. Without
    `variables`, JAX runs it eagerly, op by op.

    >>> int(traced_once(lambda x: x + 1)(ops.convert_to_tensor(1)))
    2
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(function, input_signature=None if signature is None else signature(tf))
    if backend == "jax" and variables is not None:
        return _jax_compiled(function, list(variables))
    return function


def _jax_compiled(function, variables: list):
    import jax

    def stateless(values, args):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return function(*args)

    compiled = jax.jit(stateless)
    return lambda *args: compiled([variable.value for variable in variables], args)
