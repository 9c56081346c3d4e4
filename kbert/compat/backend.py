"""`bert4keras.backend` on Keras 3: `keras`, `K`, `set_gelu` and bert4keras's tensor helpers.

`from kbert.compat.backend import keras, K` gives Keras 3 and the Keras 2
backend namespace of `kbert.compat.keras2`. The helpers have bert4keras's
names, arguments and results.

Example:
>>> import numpy as np
>>> from kbert.compat.backend import K, sequence_masking
>>> scores = K.ones((1, 3, 2))
>>> mask = np.array([[1, 1, 0]])
>>> K.eval(sequence_masking(scores, mask, value=-100, axis=1))[0, :, 0].tolist()
[1.0, 1.0, -100.0]
"""

from __future__ import annotations

import keras
from keras import ops

from kbert.compat.keras2 import K
from kbert.errors import KbertError
from kbert.layers.common import gelu_tanh
from kbert.layers.rotary import apply_rotary
from kbert.training.losses import INFINITY, multilabel_categorical_crossentropy
from kbert.training.schedules import PiecewiseLinear

__all__ = ["K", "apply_rotary_position_embeddings", "batch_gather", "gelu_erf", "gelu_tanh", "gelu_version",
           "get_input_at", "get_output_at",
           "keras", "multilabel_categorical_crossentropy", "piecewise_linear", "recompute_grad", "root_mean_square",
           "search_layer", "sequence_masking", "set_gelu", "sparse_multilabel_categorical_crossentropy", "symbolic"]

_GELU = {"version": "erf"}


def set_gelu(version: str) -> None:
    """Which GELU the models built afterwards use for a config's `"gelu"`: `"erf"` (exact) or `"tanh"`.

    As bert4keras's `set_gelu`; kbert's compat `build_transformer_model`
    writes the choice into the model (its layers say `gelu_tanh`), so a saved
    model keeps it.
    """
    version = version.lower()
    if version not in ("erf", "tanh"):
        raise KbertError(f"set_gelu: expected 'erf' or 'tanh', got {version!r}")
    _GELU["version"] = version


def gelu_version() -> str:
    """The GELU chosen by `set_gelu` (`"erf"` unless it was called)."""
    return _GELU["version"]


def gelu_erf(x):
    return keras.activations.gelu(x, approximate=False)


def root_mean_square(x, axis=None, keepdims: bool = False):
    return ops.sqrt(ops.mean(ops.square(x), axis=axis, keepdims=keepdims))


def _aligned(mask, axis: int, rank: int):
    """A `[batch, seq]` mask broadcastable against a tensor of `rank` axes along `axis`."""
    shape = [1] * rank
    shape[0], shape[axis] = -1, ops.shape(mask)[1]
    return ops.reshape(mask, shape)


def sequence_masking(x, mask=None, value=0, axis=None, bias=None, return_mask: bool = False):
    """Sets the padded positions of `x` (mask 0) to `value`, as bert4keras's `sequence_masking`.

    Args:
        x: the tensor.
        mask: `[batch, seq]`, true (or 1) at real tokens; None leaves `x`.
        value: what padded positions get: a number, or `"-inf"` / `"inf"`
            (bert4keras's 1e12, so that sums stay finite).
        axis: the sequence axis of `x` (default 1), or a list of axes, each
            masked by the same mask (a `[batch, seq, seq]` score matrix).
        bias: added to `x` where unmasked; a boolean `bias` is one more mask.
        return_mask: also return the broadcast mask.
    """
    value = {"-inf": -INFINITY, "inf": INFINITY}.get(value, value) if isinstance(value, str) else value
    full_mask = None
    if mask is not None:
        rank = len(x.shape)
        axes = [1] if axis is None else list(axis) if isinstance(axis, (list, tuple)) else [axis]
        mask = ops.cast(mask, "bool")
        for one_axis in axes:
            one = _aligned(mask, one_axis % rank, rank)
            full_mask = one if full_mask is None else ops.logical_and(full_mask, one)
    if bias is not None and keras.backend.standardize_dtype(bias.dtype) == "bool":
        full_mask, bias = (bias if full_mask is None else ops.logical_and(full_mask, bias)), None
    if bias is not None:
        x = x + bias
    if full_mask is not None:
        x = ops.where(full_mask, x, ops.cast(value, x.dtype))
    return (x, full_mask) if return_mask else x


def batch_gather(params, indices):
    """For each batch row, `params[row][indices[row]]` over the leading axes indices shares with params."""
    import tensorflow as tf  # tf.gather's batch_dims has no keras.ops form
    indices = ops.cast(indices, "int32")
    return tf.gather(params, indices, batch_dims=len(indices.shape) - 1)


def sparse_multilabel_categorical_crossentropy(y_true, y_pred, mask_zero: bool = False):
    """`multilabel_categorical_crossentropy` with the positives given as class ids, `[..., num_positive]`.

    The loss is log(1 + Σ_pos e^−s) + log(Σ_all e^s − Σ_pos e^s + 1), the
    negatives' term computed from all classes minus the positives (bert4keras's
    formula, which never builds the dense target). With `mask_zero`, class 0
    is padding: positive id 0 adds nothing.
    """
    zeros = ops.zeros_like(y_pred[..., :1])
    y_pred = ops.concatenate([y_pred, zeros], axis=-1)
    if mask_zero:
        infinities = zeros + INFINITY
        y_pred = ops.concatenate([infinities, y_pred[..., 1:]], axis=-1)
    positives = batch_gather(y_pred, y_true)
    positive_loss = ops.logsumexp(-ops.concatenate([positives, zeros], axis=-1), axis=-1)
    if mask_zero:
        y_pred = ops.concatenate([-infinities, y_pred[..., 1:]], axis=-1)
        positives = batch_gather(y_pred, y_true)
    all_loss = ops.logsumexp(y_pred, axis=-1)
    share_of_positives = ops.logsumexp(positives, axis=-1) - all_loss
    rest = ops.clip(1 - ops.exp(share_of_positives), keras.config.epsilon(), 1)
    return positive_loss + all_loss + ops.log(rest)


def apply_rotary_position_embeddings(sinusoidal, *tensors):
    """RoPE on each `[batch, seq, ..., d]` tensor, from `[batch or 1, seq, d]` interleaved sin/cos.

    bert4keras's layout: `sinusoidal[..., ::2]` are the sines and `[..., 1::2]`
    the cosines, as `SinusoidalPositionEmbedding(merge_mode="zero")` gives.
    """
    if not tensors:
        raise KbertError("apply_rotary_position_embeddings: give at least one tensor")
    outputs = [apply_rotary(tensor, sinusoidal) for tensor in tensors]
    return outputs[0] if len(outputs) == 1 else outputs


def search_layer(inputs, name: str, exclude_from=None):
    """The layer called `name` that `inputs` (a layer, or a layer's output) was computed from, or None.

    Walks the graph backwards from `inputs`, as bert4keras's `search_layer`
    (adversarial training finds `Embedding-Token` this way).
    """
    seen = set() if exclude_from is None else exclude_from
    pending = [inputs if isinstance(inputs, keras.layers.Layer) else inputs._keras_history[0]]
    while pending:
        layer = pending.pop()
        if layer.name == name:
            return layer
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        if isinstance(layer, keras.Model):
            found = [inner for inner in layer.layers if inner.name == name]
            if found:
                return found[0]
        for node in layer._inbound_nodes:
            pending.extend(parent.operation for parent in
                           (tensor._keras_history for tensor in node.input_tensors))
    return None


def piecewise_linear(t, schedule: dict, from_zero: bool = True):
    """bert4keras's piecewise-linear function of the step `t` (`{1000: 1, 2000: 0.1}`: up to 1, down to 0.1).

    With `from_zero` (and no entry for 0) it starts at 0; without, it holds
    the first entry's value before that step.
    """
    points = dict(schedule)
    if not from_zero and 0 not in points:
        points[0] = points[min(points)]
    return PiecewiseLinear(1.0, points)(t)


def get_output_at(layer, node_index: int):
    """The output of `layer`'s `node_index`-th call: Keras 2's `layer.get_output_at(node_index)`, which
    Keras 3 removed (`kbert migrate` rewrites the method call to this). ALBERT's shared layers are called
    once per block, so node i is block i's."""
    outputs = layer._inbound_nodes[node_index].output_tensors
    return outputs[0] if len(outputs) == 1 else list(outputs)


def get_input_at(layer, node_index: int):
    """The input of `layer`'s `node_index`-th call (Keras 2's `layer.get_input_at`)."""
    inputs = layer._inbound_nodes[node_index].input_tensors
    return inputs[0] if len(inputs) == 1 else list(inputs)


def symbolic(function):
    """bert4keras's identity decorator for old Keras versions; kept so decorated code runs."""
    return function


def recompute_grad(call):
    """bert4keras's recomputation decorator: kbert does not recompute; the call runs as written.

    bert4keras recomputed only with the environment variable `RECOMPUTE=1`;
    without it this decorator returned `call` itself, as this one does. For
    memory, kbert's training has mixed precision and gradient accumulation.
    """
    return call
