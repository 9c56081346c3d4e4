"""kbert's optimizers take the same step for an embedding on every backend, repeated tokens included."""

import keras
import numpy as np
import pytest

from kbert.compat.optimizers import Adam
from kbert.training.optimizers import Adafactor, AdamW, Lamb, make_optimizer
from kbert.training.options import TrainingOptions

IDS = np.array([[1, 1, 1, 2], [3, 1, 0, 2]])  # token 1 four times, 2 twice: slices of a repeated row


class OneHotEmbedding(keras.layers.Embedding):
    """Rows picked by a product with one-hot vectors: a dense gradient on every backend."""

    def call(self, ids):
        return keras.ops.einsum("blv,vh->blh", keras.ops.one_hot(ids, self.input_dim), self.embeddings)


def one_step(optimizer, lookup: str) -> np.ndarray:
    """The table after one step, the rows gathered (a sparse gradient on TF) or picked by a one-hot product."""
    keras.utils.set_random_seed(0)
    table = (keras.layers.Embedding if lookup == "gather" else OneHotEmbedding)(5, 3, name="table")
    ids = keras.Input((4,), dtype="int32")
    model = keras.Model(ids, keras.layers.Dense(1, name="out")(table(ids)))
    model.compile(optimizer, loss="mse")
    model.train_on_batch(IDS, np.ones((2, 4, 1)))
    return keras.ops.convert_to_numpy(table.embeddings)


@pytest.mark.parametrize("make", [lambda: AdamW(0.1), lambda: Lamb(0.1), lambda: Adafactor(0.1), lambda: Adam(0.1),
                                  lambda: make_optimizer(TrainingOptions(learning_rate=0.1, warmup_ratio=0.0), 10)],
                         ids=["AdamW", "Lamb", "Adafactor", "compat.Adam", "make_optimizer"])
def test_a_repeated_token_takes_the_step_of_its_summed_gradient(make):
    np.testing.assert_allclose(one_step(make(), "gather"), one_step(make(), "one-hot"), atol=1e-6)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="only TensorFlow hands sparse gradients")
def test_keras_own_adam_differs_on_tensorflow():
    """Why the fix exists: Keras's Adam squares the slices before summing them (the test fails once it is fixed)."""
    gathered, dense = one_step(keras.optimizers.Adam(0.1), "gather"), one_step(keras.optimizers.Adam(0.1), "one-hot")
    assert np.abs(gathered[1] - dense[1]).max() > 0.01
    np.testing.assert_allclose(gathered[4], dense[4], atol=1e-6)  # a row no token used: no step either way


def test_the_optimizers_are_saved_and_loaded_by_name():
    for optimizer in (AdamW(1e-3, weight_decay=0.02), Lamb(1e-3), Adafactor(1e-2)):
        restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
        assert type(restored) is type(optimizer) and restored.get_config() == optimizer.get_config()


@pytest.mark.parametrize("optimizer", ["adamw", "lamb", "adafactor"])
def test_learning_rate_multipliers_scale_the_named_weights_steps(optimizer):
    """A weight named in learning_rate_multipliers takes its steps at that multiple of the learning rate, on
    every backend (PyTorch's Adam updates in one fused call, past update_step)."""
    layers = [keras.layers.Dense(1, use_bias=False, kernel_initializer="ones", name=name) for name in "ab"]
    inputs = keras.Input((2,))
    model = keras.Model(inputs, keras.layers.Add()([layer(inputs) for layer in layers]))
    options = TrainingOptions(learning_rate=0.01, warmup_ratio=0.0, weight_decay=0.0, epochs=1, optimizer=optimizer)
    model.compile(make_optimizer(options, 100, model, {"b/kernel": 10}), loss="mse")
    model.train_on_batch(np.ones((4, 2)), np.zeros((4, 1)))  # Adam's first step: the learning rate per weight
    moved = [1 - keras.ops.convert_to_numpy(layer.kernel) for layer in layers]
    if optimizer == "adamw":
        np.testing.assert_allclose(moved[0], 0.01, rtol=1e-4)
    assert np.all(moved[0] > 0)
    np.testing.assert_allclose(moved[1], 10 * moved[0], rtol=1e-4)


def test_a_t5_trained_from_random_weights_gives_its_position_biases_a_larger_learning_rate():
    from kbert import build_transformer_model
    from kbert.models.t5.graph import POSITION_BIAS_LEARNING_RATE, T5Graph

    t5 = build_transformer_model({"vocab_size": 50, "hidden_size": 16, "num_hidden_layers": 1,
                                  "num_attention_heads": 2, "intermediate_size": 32,
                                  "hidden_act": ["gelu", "linear"]}, model="t5.1.1")
    assert T5Graph.learning_rate_multipliers(t5, "adamw") == {
        "Encoder-Embedding-Relative-Position/embeddings": POSITION_BIAS_LEARNING_RATE,
        "Decoder-Embedding-Relative-Position/embeddings": POSITION_BIAS_LEARNING_RATE}
    trainable = {variable.path for variable in t5.trainable_variables}
    assert set(T5Graph.learning_rate_multipliers(t5, "lamb")) <= trainable
    assert T5Graph.learning_rate_multipliers(t5, "adafactor") == {}  # its steps follow each weight's scale


def test_adafactor_moves_each_weight_by_the_same_share_of_its_scale():
    """T5's optimizer: weights of scale 1 and 0.01 both move by about the learning rate times their scale (an
    Adam step would move both by the learning rate)."""
    layers = [keras.layers.Dense(4, use_bias=False, kernel_initializer=keras.initializers.Constant(scale),
                                 name=name) for name, scale in (("large", 1.0), ("small", 0.01))]
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Add()([layer(inputs) for layer in layers]))
    options = TrainingOptions(learning_rate=0.01, warmup_ratio=0.0, weight_decay=0.0, epochs=1,
                              optimizer="adafactor")
    model.compile(make_optimizer(options, 100, model), loss="mse")
    model.train_on_batch(np.ones((8, 4)), np.zeros((8, 4)))
    moved = [np.abs(scale - keras.ops.convert_to_numpy(layer.kernel)).mean()
             for layer, scale in zip(layers, (1.0, 0.01))]
    np.testing.assert_allclose(moved, [0.01, 0.0001], rtol=0.05)


@pytest.mark.parity
def test_adamw_steps_in_place_on_torch_as_keras_own_adamw_steps():
    """On PyTorch, kbert's AdamW (a subclass, which Keras's fused update skips) takes its in-place step: the
    weights after five steps with weight decay and a learning-rate multiplier are Keras's AdamW's, and its
    moments are the tensors it started with (moved in place, not replaced)."""
    import subprocess
    import sys

    from conftest import REPO

    pytest.importorskip("torch", reason="the parity extra (torch) is not installed")
    code = """
import numpy as np, keras
from kbert.training.optimizers import AdamW

def run(optimizer, multipliers=None):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh", name="hidden"),
                              keras.layers.Dense(1, name="out")], name="model")
    optimizer.learning_rate_multipliers = multipliers or {}
    model.compile(optimizer, loss="mse")
    x = np.random.default_rng(0).normal(size=(16, 4)).astype("float32")
    model.train_on_batch(x, x.sum(1, keepdims=True))
    first = [id(moment.value) for moment in optimizer._momentums]
    for _ in range(4):
        model.train_on_batch(x, x.sum(1, keepdims=True))
    assert first == [id(moment.value) for moment in optimizer._momentums]
    return [keras.ops.convert_to_numpy(weight) for weight in model.weights]

ours = run(AdamW(0.05, weight_decay=0.01))
keras_own = run(keras.optimizers.AdamW(0.05, weight_decay=0.01))
assert max(np.abs(a - b).max() for a, b in zip(ours, keras_own)) < 1e-6
assert max(np.abs(a - b).max() for a, b in zip(ours, run(AdamW(0.05, weight_decay=0.01), {"model/out/kernel": 2.0}))) > 1e-3
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(REPO), timeout=600,
                            env={**__import__("os").environ, "KERAS_BACKEND": "torch", "PYTHONPATH": str(REPO)})
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]
