"""BERT's position-wise feed-forward network, and T5.1.1's gated variant.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import keras
from keras import ops  # noqa: F401 (the docstring examples use it)

from kbert.layers.common import _PACKAGE, clone_initializer
from kbert.layers.task_lora import check_task_lora, dense_with_tasks, project


@keras.saving.register_keras_serializable(package=_PACKAGE)
class FeedForward(keras.layers.Layer):
    """BERT's position-wise feed-forward network: Dense(I, act) then Dense(H).

    Given two activations (T5.1.1's `["gelu", "linear"]`), the inner layer is
    gated, as bert4keras's `FeedForward` with a list: `Dense(I, act₀)(x) ·
    Dense(I, act₁)(x)`, then Dense(H) (a gated linear unit, GEGLU for T5.1.1).

    Args:
        intermediate_size: width of the inner layer I.
        activation: activation of the inner layer (a Keras identifier), or two
            for the gated form.
        kernel_initializer: initializer of the kernels.
        use_bias: biases in the dense layers (False: RoFormer-v2, T5).
        task_lora: `{"tasks": n, "rank": r, "scale": s}`: a low-rank update per task beside each dense layer
            (`kbert.layers.task_lora`: Jina-v3's adapters), applied when called with `task=t`; None: none.

    Example:
    >>> ffn = FeedForward(intermediate_size=16, activation="gelu")
    >>> tuple(ffn(ops.ones((1, 3, 4))).shape)
    (1, 3, 4)
    >>> gated = FeedForward(intermediate_size=16, activation=["gelu", "linear"], use_bias=False, name="ffn")
    >>> _ = gated(ops.ones((1, 3, 4)))
    >>> [weight.path for weight in gated.weights]
    ['ffn/intermediate/kernel', 'ffn/gate/kernel', 'ffn/output/kernel']
    """

    def __init__(self, intermediate_size: int, activation: Union[str, Sequence[str]] = "gelu",
                 kernel_initializer="glorot_uniform", use_bias: bool = True, task_lora: Optional[dict] = None,
                 **kwargs):
        super().__init__(**kwargs)
        self.intermediate_size = intermediate_size
        self.task_lora = check_task_lora(task_lora)
        # A list or tuple is the gated form; anything else (a name, a function, its serialized dict) is one.
        activations = list(activation) if isinstance(activation, (list, tuple)) else [activation]
        if len(activations) not in (1, 2):
            raise ValueError(f"activation: expected one activation or two (gated), got {activation!r}")
        self.activations = [keras.activations.get(name) for name in activations]
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.use_bias = use_bias
        self.supports_masking = True
        self.intermediate = self._dense(intermediate_size, self.activations[0], "intermediate")
        # The gate's weights are T5.1.1's `wi_1` (the intermediate's are `wi_0`).
        self.gate = self._dense(intermediate_size, self.activations[1], "gate") if len(self.activations) == 2 \
            else None
        self.output_dense = None

    @property
    def activation(self):
        """The inner activation (the first, for the gated form)."""
        return self.activations[0]

    def _dense(self, units: int, activation, name: str):
        return dense_with_tasks(units, self.task_lora, activation=activation, use_bias=self.use_bias, name=name,
                                kernel_initializer=clone_initializer(self.kernel_initializer),
                                dtype=self.dtype_policy)

    def build(self, input_shape):
        self.intermediate.build(input_shape)
        if self.gate is not None:
            self.gate.build(input_shape)
        self.output_dense = self._dense(input_shape[-1], None, "output")
        self.output_dense.build((*input_shape[:-1], self.intermediate_size))

    def call(self, inputs, task=None):
        x = project(self.intermediate, inputs, task)
        if self.gate is not None:
            x = x * project(self.gate, inputs, task)
        return project(self.output_dense, x, task)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        activations = [keras.activations.serialize(activation) for activation in self.activations]
        return {
            **super().get_config(),
            "intermediate_size": self.intermediate_size,
            "activation": activations[0] if len(activations) == 1 else activations,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "use_bias": self.use_bias,
            "task_lora": self.task_lora,
        }


@keras.saving.register_keras_serializable(package=_PACKAGE)
class GatedFeedForward(keras.layers.Layer):
    """A gated linear unit feed-forward (GeGLU, SwiGLU): `output(act(a) · b)`.

    ModernBERT stores a and b fused in one `input` projection to `2 · intermediate_size` (a, then b), as its
    `Wi`; GTE, NomicBERT and EuroBERT keep them apart as `gate` (a, activated) and `up` (b), as Llama's MLP.
    Then `output` back to the input's width.

    Args:
        intermediate_size: the width of a and of b.
        activation: applied to a (ModernBERT, GTE: GELU; NomicBERT, EuroBERT: SiLU).
        use_bias: biases in the projections.
        output_bias: a bias in `output` (None: as `use_bias`; GTE has one there only).
        fused: one `input` projection for a and b.
        kernel_initializer: their initializer.

    Example:
    >>> layer = GatedFeedForward(6, activation="gelu")
    >>> tuple(layer(ops.ones((2, 3, 4))).shape), [tuple(w.shape) for w in layer.weights]
    ((2, 3, 4), [(4, 12), (6, 4)])
    >>> layer = GatedFeedForward(6, activation="silu", fused=False, output_bias=True, name="ffn")
    >>> _ = layer(ops.ones((1, 4)))
    >>> [w.path for w in layer.weights]
    ['ffn/gate/kernel', 'ffn/up/kernel', 'ffn/output/kernel', 'ffn/output/bias']
    """

    def __init__(self, intermediate_size: int, activation="gelu", use_bias: bool = False,
                 kernel_initializer="glorot_uniform", fused: bool = True, output_bias: Optional[bool] = None,
                 **kwargs):
        super().__init__(**kwargs)
        self.intermediate_size = intermediate_size
        self.activation = keras.activations.get(activation)
        self.use_bias = use_bias
        self.output_bias = use_bias if output_bias is None else output_bias
        self.fused = fused
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True
        # Attributes named as the sublayers: a `.keras` file's weights are stored by attribute.
        if fused:
            self.input_dense = self._dense(2 * intermediate_size, use_bias, "input")
        else:
            self.gate = self._dense(intermediate_size, use_bias, "gate")
            self.up = self._dense(intermediate_size, use_bias, "up")
        self.output_dense = None  # made in build: its width is the input's

    def _dense(self, units: int, bias: bool, name: str):
        return keras.layers.Dense(units, use_bias=bias, name=name, dtype=self.dtype_policy,
                                  kernel_initializer=clone_initializer(self.kernel_initializer))

    def build(self, input_shape):
        for projection in ((self.input_dense,) if self.fused else (self.gate, self.up)):
            projection.build(input_shape)
        self.output_dense = self._dense(input_shape[-1], self.output_bias, "output")
        self.output_dense.build((*input_shape[:-1], self.intermediate_size))

    def call(self, x):
        if self.fused:
            projected = self.input_dense(x)
            value, gate = projected[..., :self.intermediate_size], projected[..., self.intermediate_size:]
        else:
            value, gate = self.gate(x), self.up(x)
        return self.output_dense(self.activation(value) * gate)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "intermediate_size": self.intermediate_size,
                "activation": keras.activations.serialize(self.activation), "use_bias": self.use_bias,
                "output_bias": self.output_bias, "fused": self.fused,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer)}
