import re

import numpy as np
import pytest

import keras
from conftest import CONFIGS, bad_input_errors, golden
from golden_cases import CASES, config_path
from keras_graph import layer_table
from kbert import build_classifier, build_transformer_model


def build_case(case):
    _, flags, labels = CASES[case]
    model = build_transformer_model(config_path(case), **flags)
    return build_classifier(model, labels) if labels else model


@pytest.mark.parametrize("case", sorted(CASES))
def test_names_order_params_and_wiring_match_bert4keras(case):
    record = golden(case)
    model = build_case(case)
    expected = [(layer["name"], layer["params"], layer["inbound"]) for layer in record["layers"]]
    assert layer_table(model) == expected
    assert model.count_params() == record["total_params"]


def test_mission_classifier_total():
    bert = build_transformer_model(CONFIGS / "bert_base_chinese.json")
    assert build_classifier(bert, 2).count_params() == 101_678_594


@pytest.fixture(scope="module")
def tiny():
    return build_transformer_model(CONFIGS / "bert_tiny.json", with_nsp=True, with_mlm=True)


def test_padding_does_not_change_real_tokens(tiny):
    tokens = np.array([[101, 6427, 6241, 3563, 1798, 102]])
    segments = np.zeros_like(tokens)
    padded_tokens = np.pad(tokens, ((0, 0), (0, 4)))
    padded_segments = np.zeros_like(padded_tokens)
    nsp, mlm = tiny.predict([tokens, segments], verbose=0)
    padded_nsp, padded_mlm = tiny.predict([padded_tokens, padded_segments], verbose=0)
    np.testing.assert_allclose(padded_nsp, nsp, atol=1e-6)
    np.testing.assert_allclose(padded_mlm[:, :6], mlm, rtol=1e-5, atol=1e-6)
    assert mlm.shape == (1, 6, 21128)
    np.testing.assert_allclose(mlm.sum(-1), 1.0, atol=1e-5)


def test_sequence_length_limit(tiny):
    # bert_tiny has 64 positions: 64 tokens work, the output length follows the input.
    tokens = np.ones((2, 64), dtype="int32")
    _, mlm = tiny.predict([tokens, np.zeros_like(tokens)], verbose=0)
    assert mlm.shape[1] == 64


def test_mlm_output_is_tied_to_token_embedding(tiny):
    # The MLM probabilities must be softmax(MLM-Norm output · Eᵀ + bias) with E the token
    # embedding table itself: give E new values and recompute by hand.
    embedding = tiny.get_layer("Embedding-Token").embeddings
    original = keras.ops.convert_to_numpy(embedding)
    table = np.random.default_rng(0).normal(size=original.shape).astype("float32")
    tokens = np.array([[101, 6427, 6241, 102]])
    normed = keras.Model(tiny.inputs, tiny.get_layer("MLM-Norm").output)
    try:
        embedding.assign(table)
        _, mlm = tiny.predict([tokens, tokens * 0], verbose=0)
        hidden = normed.predict([tokens, tokens * 0], verbose=0)
    finally:
        embedding.assign(original)
    logits = hidden @ table.T + keras.ops.convert_to_numpy(tiny.get_layer("MLM-Bias").bias)
    expected = logits - logits.max(-1, keepdims=True)
    expected -= np.log(np.exp(expected).sum(-1, keepdims=True))
    # Compared as log-probabilities: float32 logits near 20 in size, summed in different orders by
    # TensorFlow and NumPy, differ by a few 1e-6 (a relative 1e-5 of a probability, which CI met);
    # an untied table would be off by whole units.
    # (Probabilities below e^-60 may round to float32's zero: left out.)
    representable = expected > -60
    np.testing.assert_allclose(np.log(mlm[representable]), expected[representable], atol=1e-4)


@pytest.mark.parametrize("heads, labels, count", [({}, 2, 16), ({"with_nsp": True, "with_mlm": True}, 0, 18)])
def test_every_random_weight_starts_different(heads, labels, count):
    # One initializer instance shared by several weights gives them identical values in
    # Keras 3. Every randomly initialised weight (all but LayerNorm gammas/betas and zero
    # biases) must differ from every other one, also inside a layer (Q, K, V, output).
    model = build_transformer_model(CONFIGS / "bert_tiny.json", **heads)
    model = build_classifier(model, labels) if labels else model
    random_weights = [(w.path, keras.ops.convert_to_numpy(w)) for w in model.weights if keras.ops.convert_to_numpy(w).ndim == 2]
    assert len(random_weights) == count
    seen = {}
    for path, value in random_weights:
        key = value.tobytes()
        assert key not in seen, f"{path} starts out equal to {seen[key]}"
        seen[key] = path
        # Truncated normal of initializer_range 0.02: within two standard deviations (Keras on
        # torch redraws a value 4 times at most, so a few in a million may lie beyond).
        assert np.mean(np.abs(value) > 0.04) <= 1e-5 and np.std(value) > 0.01, path


def test_keras_file_round_trip_with_safe_mode(tmp_path):
    bert = build_transformer_model(CONFIGS / "bert_tiny.json", with_pool=True)
    model = build_classifier(bert, 3)
    path = tmp_path / "classifier.keras"
    model.save(path)
    restored = keras.models.load_model(path, safe_mode=True)
    tokens = np.array([[101, 8, 9, 102, 0, 0], [101, 5, 6, 7, 8, 102]])
    inputs = [tokens, np.zeros_like(tokens)]
    np.testing.assert_array_equal(restored.predict(inputs, verbose=0), model.predict(inputs, verbose=0))
    assert [layer.name for layer in restored.layers] == [layer.name for layer in model.layers]


def test_gelu_tanh_config_serializes(tmp_path):
    from kbert.models.config import BertConfig
    config = BertConfig.from_json_file(CONFIGS / "bert_tiny.json")
    config = BertConfig(**{**config.to_dict(), "hidden_act": "gelu_new"})
    model = build_transformer_model(config, with_mlm=True)
    model.save(tmp_path / "m.keras")
    restored = keras.models.load_model(tmp_path / "m.keras", safe_mode=True)
    tokens = np.array([[101, 8, 9, 102]])
    np.testing.assert_array_equal(restored.predict([tokens, tokens * 0], verbose=0),
                                  model.predict([tokens, tokens * 0], verbose=0))


def test_bad_num_labels():
    bert = build_transformer_model(CONFIGS / "bert_tiny.json")
    with pytest.raises(ValueError, match="num_labels: expected a positive integer, got 0"):
        build_classifier(bert, 0)


@pytest.mark.parametrize("tokens, segments, message", [
    ([[101, -5, 102]], [[0, 0, 0]], "Embedding-Token (vocab_size): ids must be in [0, 21128); found a negative id (a "
     "batch padded by a tokenizer.json pads with negative ids: build the model with padding=tokenizer.padding, "
     "which hides them)"),
    ([[101, 21128, 102]], [[0, 0, 0]], "Embedding-Token (vocab_size): ids must be in [0, 21128); found one of 21128 or more"),
    ([[101, 5, 102]], [[0, -1, 0]], "Embedding-Segment (type_vocab_size): ids must be in [0, 2); found a negative id"),
    ([[101, 5, 102]], [[0, 2, 0]], "Embedding-Segment (type_vocab_size): ids must be in [0, 2); found one of 2 or more"),
    ([[1] * 65], [[0] * 65], "Embedding-Position: the sequence is longer than max_position_embeddings (64)"),
    ([[101.0, 5.5, 102.0]], [[0, 0, 0]], "Input-Token: ids must be whole numbers"),
    ([[101, 5, 102]], [[0.0, 0.5, 0.0]], "Input-Segment: ids must be whole numbers"),
])
def test_bad_ids_are_errors_that_name_the_config_key(tiny, tokens, segments, message):
    inputs = [np.array(tokens), np.array(segments)]
    with pytest.raises(bad_input_errors(), match=re.escape(message)):
        tiny.predict(inputs, verbose=0)  # graph mode, as fit/predict run
    with pytest.raises(bad_input_errors(), match=re.escape(message)):
        tiny(inputs)  # eager


def test_whole_number_floats_are_accepted(tiny):
    tokens = np.array([[101, 6427, 6241, 102]])
    np.testing.assert_allclose(tiny.predict([tokens.astype("float64"), np.zeros((1, 4))], verbose=0)[1],
                               tiny.predict([tokens, np.zeros_like(tokens)], verbose=0)[1], rtol=1e-6)


def test_weights_file_layout_is_stable(tmp_path):
    # Keras 3's .weights.h5 keys layers by their class names (not their bert4keras names):
    # renaming a layer class makes model directories written before unreadable. This is the
    # layout of kbert 0.1.0's classifier; a change here needs a reader for the old one.
    import h5py
    model = build_classifier(build_transformer_model(CONFIGS / "bert_tiny.json"), 2)
    model.save_weights(tmp_path / "model.weights.h5")
    with h5py.File(tmp_path / "model.weights.h5", "r") as weights:
        groups = sorted(weights["layers"].keys())
    expected = (["add", "add_1", "add_2", "add_3", "dense", "embedding"]
                + [f"dropout{suffix}" for suffix in ("", "_1", "_2", "_3", "_4")]
                + ["feed_forward", "feed_forward_1", "input_layer", "input_layer_1"]
                + [f"layer_normalization{suffix}" for suffix in ("", "_1", "_2", "_3", "_4")]
                + ["masked_add", "multi_head_self_attention", "multi_head_self_attention_1",
                   "position_embedding", "take_token", "token_embedding"])
    assert groups == sorted(expected)


def test_a_model_built_in_bfloat16_holds_the_checkpoints_weights_rounded(tmp_path):
    """`dtype="bfloat16"`: every weight bfloat16 (half the bytes), each the checkpoint's float32 value rounded;
    the global policy is left as it was; the same layer table."""
    from kbert import save_hf_weights

    keras.utils.set_random_seed(2)
    full = build_transformer_model(CONFIGS / "bert_tiny.json", with_mlm=True)
    save_hf_weights(full, tmp_path)
    half = build_transformer_model(CONFIGS / "bert_tiny.json", tmp_path, with_mlm=True, dtype="bfloat16")
    assert keras.config.dtype_policy().name == "float32"
    assert {variable.dtype for variable in half.weights} == {"bfloat16"}
    assert layer_table(half) == layer_table(full)
    for ours, theirs in zip(half.weights, full.weights):
        rounded = keras.ops.convert_to_numpy(keras.ops.cast(theirs.value, "bfloat16")).astype(np.float32)
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(ours.value).astype(np.float32), rounded)
    ids = np.array([[101, 2769, 4263, 102, 0]])
    expected = full.predict([ids, np.zeros_like(ids)], verbose=0)
    got = half.predict([ids, np.zeros_like(ids)], verbose=0).astype(np.float32)
    assert np.abs(got - expected).max() < 0.01


@pytest.mark.parity
def test_bfloat16_safetensors_load_bit_for_bit_on_pytorch(tmp_path):
    """On PyTorch a bfloat16 tensor is copied into its bfloat16 weight in place (torch reads no NumPy bfloat16, and
    Keras would convert it through a float32 copy): each weight the stored bits, the outputs the saved model's."""
    import subprocess
    import sys

    pytest.importorskip("torch", reason="the parity extra (torch) is not installed")
    code = f"""
import numpy as np, keras
from kbert import build_transformer_model, save_hf_weights
config = {{"model_type": "qwen3", "vocab_size": 64, "hidden_size": 16, "num_hidden_layers": 1,
          "num_attention_heads": 2, "intermediate_size": 24, "head_dim": 8, "initializer_range": 0.3}}
keras.utils.set_random_seed(1)
saved = build_transformer_model(config, dtype="bfloat16")
save_hf_weights(saved, {str(tmp_path)!r})
loaded = build_transformer_model(config, {str(tmp_path)!r}, dtype="bfloat16")
for ours, theirs in zip(loaded.weights, saved.weights):
    assert ours.dtype == "bfloat16"
    assert np.array_equal(keras.ops.convert_to_numpy(ours.value).view(np.uint16),
                          keras.ops.convert_to_numpy(theirs.value).view(np.uint16)), ours.path
ids = np.array([[5, 6, 7]])
assert np.array_equal(loaded.predict([ids, ids * 0], verbose=0), saved.predict([ids, ids * 0], verbose=0))
print("ok")
"""
    import os

    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "KERAS_BACKEND": "torch"})
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-2000:]


def test_each_layer_output_is_let_go_once_the_last_layer_reading_it_has_run():
    """kbert's models walk their graph freeing as they go: run eagerly (PyTorch), Keras's own walk keeps every
    output until the call returns, and a long row's activations grow with the depth (benchmarks.long_inputs)."""
    import weakref

    from kbert.models.transformer import IdModel

    seen = {}

    class Remember(keras.layers.Layer):
        def call(self, x):
            y = x * 2.0
            seen["first"] = weakref.ref(y)
            return y

    class Look(keras.layers.Layer):
        def call(self, x):
            seen["alive"] = seen["first"]() is not None
            return x + 1.0

    inputs = keras.Input((4,))
    outputs = Look()(keras.layers.Dense(4)(Remember()(inputs)))
    model = IdModel(inputs, outputs)
    expected = keras.ops.convert_to_numpy(model.layers[2](np.full((2, 4), 2.0, np.float32))) + 1.0
    import contextlib

    # Inference, as predict runs it: with gradients on, PyTorch's autograd keeps a Dense's input for the backward.
    inference = __import__("torch").no_grad() if keras.backend.backend() == "torch" else contextlib.nullcontext()
    with inference:
        output = model(np.ones((2, 4), np.float32))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(output), expected, atol=1e-6)
    assert seen["alive"] is False
