"""`--remat` (Keras's `RematScope`): every layer recomputes its intermediate values in the backward pass,
and training gives the same weights as without it."""

import json

import keras
import numpy as np
import pytest

from conftest import CONFIGS, saved_weights, shared_path
from kbert import BertConfig, TrainingOptions, build_transformer_model, train
from kbert.cli.main import main


remat_backends = pytest.mark.skipif(keras.backend.backend() == "tensorflow",
                                    reason="Keras's RematScope fails on TensorFlow's compiled steps; refused there")


@pytest.fixture(scope="module")
def run_inputs(tmp_path_factory):
    directory = tmp_path_factory.mktemp("remat")
    config = json.loads((CONFIGS / "bert_tiny.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # the same steps with and without
    (directory / "config.json").write_text(json.dumps(config))
    lines = shared_path("data", "sentiment", "sentiment.train.data").read_text(encoding="utf-8").splitlines()
    (directory / "train.data").write_text("\n".join(lines[:64]) + "\n", encoding="utf-8")
    return directory


def trained_weights(run_inputs, out, remat: bool, learning_rate: float = 1e-3) -> dict:
    train(str(run_inputs / "config.json"), str(shared_path("vocab", "chinese_vocab.txt")),
          str(run_inputs / "train.data"), str(out),
          options=TrainingOptions(epochs=1, batch_size=16, learning_rate=learning_rate, maxlen=32, shuffle=False,
                                  remat=remat), verbose=0)
    return saved_weights(out)


def assert_same_weights(these: dict, those: dict) -> None:
    assert sorted(these) == sorted(those) and len(those) > 30
    for name in those:
        np.testing.assert_allclose(these[name], those[name], rtol=1e-5, atol=1e-6, err_msg=name)


@remat_backends
def test_remat_trains_to_the_same_weights(run_inputs, tmp_path):
    plain = trained_weights(run_inputs, tmp_path / "plain", remat=False)
    assert_same_weights(trained_weights(run_inputs, tmp_path / "remat", remat=True), plain)
    options = json.loads((tmp_path / "remat" / "training.json").read_text())["options"]
    assert options["remat"] is True
    with pytest.raises(AssertionError):  # the comparison can fail: another learning rate's weights are told apart
        assert_same_weights(trained_weights(run_inputs, tmp_path / "control", remat=False, learning_rate=2e-3), plain)


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="the gradient's program is read as JAX writes it")
def test_the_gradient_recomputes_each_blocks_feed_forward():
    """What `--remat` changes, seen in the program JAX differentiates (the weights above cannot tell): one
    recomputed (checkpointed) call per block's feed-forward, and none without it."""
    import jax

    from kbert.training.loop import remat_scope

    config = BertConfig.from_json_file(str(CONFIGS / "bert_tiny.json"))
    ids = np.array([[101, 2769, 4263, 102]])
    counts = {}
    for remat in (False, True):
        with remat_scope(TrainingOptions(remat=remat), config):
            bert = build_transformer_model(config)
        trainable = [variable.value for variable in bert.trainable_variables]
        fixed = [variable.value for variable in bert.non_trainable_variables]

        def loss(trainable, fixed):
            outputs, _ = bert.stateless_call(trainable, fixed, [ids, ids * 0])
            return outputs.sum()

        program = str(jax.make_jaxpr(jax.grad(loss))(trainable, fixed))
        counts[remat] = program.count("checkpoint[") + program.count("remat2[")
    assert counts == {False: 0, True: config.num_hidden_layers}, counts


@remat_backends
def test_kbert_train_takes_remat(run_inputs, tmp_path, capsys):
    code = main(["train", "--config", str(run_inputs / "config.json"), "--vocab",
                 str(shared_path("vocab", "chinese_vocab.txt")), "--train", str(run_inputs / "train.data"),
                 "--epochs", "1", "--batch-size", "16", "--maxlen", "32", "--remat", "--out", str(tmp_path / "out")])
    assert code == 0, capsys.readouterr().err[-2000:]
    assert json.loads((tmp_path / "out" / "training.json").read_text())["options"]["remat"] is True


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="refused on TensorFlow only")
def test_remat_is_refused_on_tensorflow_before_writing(run_inputs, tmp_path, capsys):
    code = main(["train", "--config", str(run_inputs / "config.json"), "--vocab",
                 str(shared_path("vocab", "chinese_vocab.txt")), "--train", str(run_inputs / "train.data"),
                 "--remat", "--out", str(tmp_path / "out")])
    error = capsys.readouterr().err
    assert code == 2 and "--remat (Keras's RematScope) fails on TensorFlow" in error and "Traceback" not in error
    assert not (tmp_path / "out").exists()
