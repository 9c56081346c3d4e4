"""Small pieces of the heads: taking the [CLS] state or the masked positions, the MLM output bias,
T5's output scale.
"""

from __future__ import annotations

from typing import Optional

import keras
from keras import ops

from kbert.layers.common import _PACKAGE


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TakeToken(keras.layers.Layer):
    """Takes the hidden state at one position: `[batch, seq, H] -> [batch, H]`.

    BERT's pooler and classifiers read position 0, the `[CLS]` token.

    Args:
        index: the position to take.

    Example:
    >>> tuple(TakeToken(0)(ops.ones((2, 5, 8))).shape)
    (2, 8)
    """

    def __init__(self, index: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.index = index

    def call(self, inputs):
        return inputs[:, self.index]

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (input_shape[0], *input_shape[2:])

    def get_config(self):
        return {**super().get_config(), "index": self.index}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TakePositions(keras.layers.Layer):
    """Takes the hidden states at given positions of each row: `[batch, seq, H], [batch, P] -> [batch, P, H]`.

    Pre-training runs the MLM head on the masked positions only (bert4keras's
    `batch_gather`, Google's `gather_indexes`): the head's vocabulary-wide
    output is then computed for 15 % of the tokens instead of all of them.

    Example:
    >>> states = ops.reshape(ops.arange(12, dtype="float32"), (2, 3, 2))
    >>> ops.convert_to_numpy(TakePositions()([states, ops.convert_to_tensor([[2, 0], [1, 1]])])).tolist()
    [[[4.0, 5.0], [0.0, 1.0]], [[8.0, 9.0], [8.0, 9.0]]]
    """

    def call(self, inputs):
        states, positions = inputs
        positions = ops.cast(positions, "int32")
        return ops.take_along_axis(states, ops.expand_dims(positions, -1), axis=1)

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        states, positions = input_shape
        return (states[0], positions[1], states[2])


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BiasAdd(keras.layers.Layer):
    """Adds a learned bias vector over the last axis (BERT's MLM output bias).

    Example:
    >>> tuple(BiasAdd()(ops.zeros((2, 3, 10))).shape)
    (2, 3, 10)
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def build(self, input_shape):
        self.bias = self.add_weight(name="bias", shape=(input_shape[-1],), initializer="zeros")

    def call(self, inputs):
        return inputs + ops.cast(self.bias, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return input_shape


@keras.saving.register_keras_serializable(package=_PACKAGE)
class Scale(keras.layers.Layer):
    """Multiplies its input by a constant (T5's `Decoder-Output-Scale`: H^(−1/2) before the LM head).

    Args:
        factor: the constant.

    Example:
    >>> float(Scale(0.5)(ops.ones((1, 2)))[0, 0])
    0.5
    """

    def __init__(self, factor: float, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor
        self.supports_masking = True

    def call(self, inputs):
        return inputs * ops.cast(self.factor, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class LogitSoftCap(keras.layers.Layer):
    """`cap · tanh(x / cap)`: logits kept within ±cap, near x where |x| ≪ cap (Gemma's `final_logit_softcapping`).

    Args:
        cap: the bound.

    Example:
    >>> [round(float(v), 3) for v in LogitSoftCap(30.0)(ops.convert_to_tensor([0.3, 300.0]))]
    [0.3, 30.0]
    """

    def __init__(self, cap: float, **kwargs):
        super().__init__(**kwargs)
        self.cap = cap
        self.supports_masking = True

    def call(self, inputs):
        cap = ops.cast(self.cap, inputs.dtype)
        return ops.tanh(inputs / cap) * cap

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "cap": self.cap}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TokenScore(keras.layers.Layer):
    """A language model's relevance score from its vocabulary logits `[..., V]`: the logit of `true_token_id`,
    minus that of `false_token_id` where given (`[..., 1]`; sentence-transformers' `LogitScore`: Qwen3-Reranker's
    logit(yes) − logit(no)).

    Args:
        true_token_id: the token that says relevant.
        false_token_id: the token that says not relevant (None: the true token's logit alone).

    Example:
    >>> logits = ops.convert_to_tensor([[0.5, 2.0, -1.0]])
    >>> [float(v) for v in TokenScore(1, 2)(logits)[0]], [float(v) for v in TokenScore(0)(logits)[0]]
    ([3.0], [0.5])
    """

    def __init__(self, true_token_id: int, false_token_id: Optional[int] = None, **kwargs):
        super().__init__(**kwargs)
        self.true_token_id, self.false_token_id = true_token_id, false_token_id
        self.supports_masking = True  # a score per row: whatever mask its logits had ends here

    def compute_mask(self, inputs, mask=None):
        return None

    def call(self, logits):
        score = logits[..., self.true_token_id:self.true_token_id + 1]
        if self.false_token_id is not None:
            score = score - logits[..., self.false_token_id:self.false_token_id + 1]
        return score

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], 1)

    def get_config(self):
        return {**super().get_config(), "true_token_id": self.true_token_id, "false_token_id": self.false_token_id}
