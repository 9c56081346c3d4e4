"""`--model-parallel` on JAX: the model split Megatron-style over simulated CPU devices trains to one device's
weights, and sizes the split does not divide are refused with the reason."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from conftest import CONFIGS, finish_together, saved_weights, shared_path

pytestmark = pytest.mark.skipif(keras.backend.backend() != "jax", reason="keras.distribution.ModelParallel is JAX's")
TIMEOUT_S = 300


@pytest.fixture(scope="module")
def run_args(tmp_path_factory):
    directory = tmp_path_factory.mktemp("model-parallel")
    config = json.loads((CONFIGS / "bert_tiny.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # the same steps everywhere
    (directory / "config.json").write_text(json.dumps(config))
    lines = shared_path("data", "sentiment", "sentiment.train.data").read_text(encoding="utf-8").splitlines()
    (directory / "train.data").write_text("\n".join(lines[:48]) + "\n", encoding="utf-8")
    return directory, ["--config", directory / "config.json", "--vocab", shared_path("vocab", "chinese_vocab.txt"),
                       "--train", directory / "train.data", "--valid", directory / "train.data", "--epochs", "2",
                       "--lr", "1e-3", "--maxlen", "32", "--batch-size", "8", "--no-shuffle"]


def kbert_train(args, out, devices: int, wait=True):
    """`kbert train` in a new process that sees `devices` CPU devices."""
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    process = subprocess.Popen([sys.executable, "-m", "kbert", "train", *map(str, args), "--out", str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return process.communicate(timeout=TIMEOUT_S) + (process.returncode,) if wait else process



def assert_same_weights(these: dict, those: dict) -> None:
    assert sorted(these) == sorted(those) and len(those) == 39
    for name in those:
        np.testing.assert_allclose(these[name], those[name], rtol=1e-4, atol=1e-6, err_msg=name)


def test_a_model_split_over_devices_trains_to_one_devices_weights(run_args):
    directory, args = run_args
    control_args = [arg if previous != "--lr" else "2e-3" for previous, arg in zip([None] + args, args)]
    runs = {"split": kbert_train(args + ["--model-parallel", "2"], directory / "split", 4, wait=False),
            "one device": kbert_train(args, directory / "one", 1, wait=False),
            "control": kbert_train(control_args, directory / "control", 1, wait=False)}
    finish_together(runs, TIMEOUT_S)
    split, one = saved_weights(directory / "split"), saved_weights(directory / "one")
    assert_same_weights(split, one)
    with pytest.raises(AssertionError):  # the comparison can fail: a run of another learning rate is told apart
        assert_same_weights(saved_weights(directory / "control"), one)
    histories = [json.loads((directory / name / "training.json").read_text())["history"] for name in ("split", "one")]
    assert [round(epoch["val_accuracy"], 4) for epoch in histories[0]] == \
        [round(epoch["val_accuracy"], 4) for epoch in histories[1]]

    # The trained model predicts the same split over devices as on one.
    predictions = []
    for extra, devices in (([], 1), (["--model-parallel", "2"], 4)):
        result = subprocess.run([sys.executable, "-m", "kbert", "predict", "--model", str(directory / "one"), "--json",
                                 *extra, str(directory / "train.data")], capture_output=True, text=True,
                                timeout=TIMEOUT_S, env={**os.environ, "XLA_FLAGS":
                                                        f"--xla_force_host_platform_device_count={devices}"})
        assert result.returncode == 0, result.stderr[-3000:]
        predictions.append([json.loads(line) for line in result.stdout.splitlines()])
    assert len(predictions[0]) == 48 and [row["label"] for row in predictions[0]] == \
        [row["label"] for row in predictions[1]]
    np.testing.assert_allclose([row["probability"] for row in predictions[1]],
                               [row["probability"] for row in predictions[0]], rtol=1e-5)


@pytest.mark.parametrize("model_parallel, devices, message", [
    (3, 3, "the config's vocab_size (21128) does not divide into 3 equal parts"),
    (2, 3, "--model-parallel 2 must divide the 3 devices"),
])
def test_sizes_that_do_not_divide_are_refused_before_writing(run_args, tmp_path, model_parallel, devices, message):
    _, args = run_args
    _, stderr, code = kbert_train(args + ["--model-parallel", str(model_parallel)], tmp_path / "out", devices)
    assert code == 2 and message in stderr, stderr[-2000:]
    assert "Traceback" not in stderr and not (tmp_path / "out").exists()


def test_the_split_shards_the_layouts_variables_over_the_model_axis(tmp_path):
    """What --model-parallel 2 does to the variables on 4 devices: those MODEL_PARALLEL_LAYOUT names are split
    along the model axis, the rest replicated (before round 5 nothing asserted that any variable was split); a
    model built from a checkpoint (its weights never drawn: `kbert.checkpoints.undrawn`) is split the same, each
    weight the checkpoint's."""
    script = (
        "import json, keras, numpy as np\n"
        "from kbert import build_transformer_model, save_hf_weights\n"
        "from kbert.models.registry import load_config\n"
        "from kbert.training.distribute import model_parallel_distribution\n"
        f"config = load_config({str(CONFIGS / 'bert_tiny.json')!r})\n"
        f"saved = build_transformer_model(config); path = save_hf_weights(saved, {str(tmp_path)!r})\n"
        "keras.distribution.set_distribution(model_parallel_distribution(2, config))\n"
        "bert = build_transformer_model(config)\n"
        "specs = lambda model: {w.path: [str(axis) for axis in w.value.sharding.spec] for w in model.weights}\n"
        "loaded = build_transformer_model(config, path)\n"
        "assert specs(loaded) == specs(bert)\n"
        "assert all(np.array_equal(np.asarray(a.value), np.asarray(b.value)) for a, b in zip(loaded.weights, "
        "saved.weights))\n"
        "print(json.dumps(specs(bert)))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=TIMEOUT_S,
                            env={**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    assert result.returncode == 0, result.stderr[-3000:]
    specs = json.loads(result.stdout.splitlines()[-1])
    assert specs["Embedding-Token/embeddings"] == ["model", "None"]
    assert specs["Transformer-0-MultiHeadSelfAttention/query/kernel"] == ["None", "model"]
    assert specs["Transformer-0-FeedForward/output/kernel"] == ["model", "None"]
    assert all("model" not in spec for path, spec in specs.items() if "Norm" in path)
