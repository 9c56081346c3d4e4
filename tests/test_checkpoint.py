"""Google checkpoints: the real fixture written by Google's BERT code, goldens from bert4keras."""

import json
import logging
import os
import re
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import CONFIGS, golden, shared_path
from kbert import CheckpointError, build_classifier, build_transformer_model, load_weights
from kbert.checkpoints.google import load_google_checkpoint, save_google_checkpoint

PREFIX = "bert_model.ckpt"


def golden_inputs(record):
    return [np.array(record["inputs"]["token_ids"]), np.array(record["inputs"]["segment_ids"])]


def weights_of(model):
    return [keras.ops.convert_to_numpy(variable).copy() for variable in model.weights]


def assert_same_weights(before, model):
    for old, variable in zip(before, model.weights):
        np.testing.assert_array_equal(old, keras.ops.convert_to_numpy(variable), err_msg=variable.path)


@pytest.fixture
def tiny_config(tiny_checkpoint_dir):
    return json.loads((tiny_checkpoint_dir / "bert_config.json").read_text())


def test_sequence_output_matches_bert4keras(tiny_checkpoint_dir):
    record = golden("tiny_ckpt.json")
    bert = build_transformer_model(tiny_checkpoint_dir / "bert_config.json",
                                   checkpoint_path=tiny_checkpoint_dir / PREFIX)
    output = bert.predict(golden_inputs(record), verbose=0)
    np.testing.assert_allclose(output, np.array(record["outputs"][0]), atol=1e-5, rtol=0)


def test_nsp_and_mlm_match_bert4keras(tiny_checkpoint_dir):
    record = golden("tiny_ckpt_pool_nsp_mlm.json")
    assert record["output_names"] == ["NSP-Proba/Softmax:0", "MLM-Activation/Softmax:0"]
    bert = build_transformer_model(tiny_checkpoint_dir / "bert_config.json", with_nsp=True,
                                   with_mlm=True, checkpoint_path=tiny_checkpoint_dir)
    nsp, mlm = bert.predict(golden_inputs(record), verbose=0)
    np.testing.assert_allclose(nsp, np.array(record["outputs"][0]), atol=1e-5, rtol=0)
    np.testing.assert_allclose(mlm, np.array(record["outputs"][1]), atol=1e-5, rtol=0)


@pytest.mark.parametrize("form", ["", PREFIX, PREFIX + ".index", PREFIX + ".meta",
                                  PREFIX + ".data-00000-of-00001"])
def test_every_path_form_loads_the_same(tiny_checkpoint_dir, form):
    bert = build_transformer_model(tiny_checkpoint_dir / "bert_config.json")
    report = load_google_checkpoint(bert, str(tiny_checkpoint_dir / form) if form else tiny_checkpoint_dir)
    reader = tf.train.load_checkpoint(str(tiny_checkpoint_dir / PREFIX))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(bert.get_layer("Embedding-Token").embeddings),
                                  reader.get_tensor("bert/embeddings/word_embeddings"))
    assert len(report.loaded) == 37


def test_unused_variables_are_information(tiny_checkpoint_dir, caplog):
    bert = build_transformer_model(tiny_checkpoint_dir / "bert_config.json")
    with caplog.at_level(logging.INFO, logger="kbert"):
        report = load_google_checkpoint(bert, tiny_checkpoint_dir)
    assert "global_step" in report.unused and "cls/predictions/output_bias" in report.unused
    assert report.describe_unused().startswith("92 optimizer slots (adam_m/adam_v), bert/pooler/dense/bias")
    assert [record.levelname for record in caplog.records] == ["INFO"]


def test_save_load_round_trip_is_bit_identical(tiny_checkpoint_dir, tmp_path):
    bert = build_transformer_model(tiny_checkpoint_dir / "bert_config.json", with_nsp=True,
                                   with_mlm=True, checkpoint_path=tiny_checkpoint_dir)
    save_google_checkpoint(bert, tmp_path / PREFIX)
    reader = tf.train.load_checkpoint(str(tmp_path / PREFIX))
    original = tf.train.load_checkpoint(str(tiny_checkpoint_dir / PREFIX))
    names = {name for name in original.get_variable_to_shape_map()
             if "adam" not in name and name != "global_step"}
    assert set(reader.get_variable_to_shape_map()) == names
    for name in names:  # Google's names and layouts, NSP's [2, H] included
        np.testing.assert_array_equal(reader.get_tensor(name), original.get_tensor(name))
    for form in (tmp_path, tmp_path / PREFIX, tmp_path / (PREFIX + ".index")):
        again = build_transformer_model(tiny_checkpoint_dir / "bert_config.json", with_nsp=True,
                                        with_mlm=True, checkpoint_path=form)
        assert_same_weights(weights_of(bert), again)


def test_bert_base_round_trip_is_bit_identical(tmp_path):
    bert = build_transformer_model(CONFIGS / "bert_base_chinese.json", with_nsp=True, with_mlm=True)
    save_google_checkpoint(bert, tmp_path / PREFIX)
    size = sum(f.stat().st_size for f in tmp_path.glob(PREFIX + ".data-*"))
    assert size == 4 * bert.count_params()
    again = build_transformer_model(CONFIGS / "bert_base_chinese.json", with_nsp=True, with_mlm=True,
                                    checkpoint_path=tmp_path)
    assert_same_weights(weights_of(bert), again)


def test_classifier_saves_as_run_classifier_names(tmp_path):
    model = build_classifier(build_transformer_model(CONFIGS / "bert_tiny.json"), 3)
    save_google_checkpoint(model, tmp_path / PREFIX)
    shapes = tf.train.load_checkpoint(str(tmp_path / PREFIX)).get_variable_to_shape_map()
    assert shapes["output_weights"] == [3, 32] and shapes["output_bias"] == [3]


def test_failed_save_leaves_existing_checkpoint(tiny_checkpoint_dir, tmp_path, monkeypatch):
    target = tmp_path / "model"
    shutil.copytree(tiny_checkpoint_dir, target)
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    bert = build_transformer_model(tiny_checkpoint_dir / "bert_config.json")
    real_replace, calls = os.replace, []

    def failing_replace(src, dst):  # the disk fills up after the first new file is in place
        calls.append(dst)
        if len(calls) == 4:
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="No space left"):
        save_google_checkpoint(bert, target / PREFIX)
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before


def test_missing_heads_are_named_with_a_hint(tiny_checkpoint_dir, tmp_path):
    backbone = build_transformer_model(tiny_checkpoint_dir / "bert_config.json",
                                       checkpoint_path=tiny_checkpoint_dir)
    save_google_checkpoint(backbone, tmp_path / PREFIX)
    model = build_transformer_model(tiny_checkpoint_dir / "bert_config.json", with_mlm=True)
    before = weights_of(model)
    with pytest.raises(CheckpointError) as error:
        load_google_checkpoint(model, tmp_path)
    message = str(error.value)
    assert message.startswith(f"{tmp_path / PREFIX}: this Google checkpoint does not fit the model; "
                              "nothing was loaded.\nMissing 5 variable(s) the model needs:\n"
                              "  cls/predictions/transform/dense/kernel (for MLM-Dense/kernel)\n")
    assert message.endswith("Hint: this checkpoint has no cls* variables for MLM-Bias, MLM-Dense, "
                            "MLM-Norm: build without with_mlm/with_nsp")
    assert_same_weights(before, model)


def test_vocab_mismatch_names_the_config_key(tiny_checkpoint_dir, tiny_config):
    model = build_transformer_model({**tiny_config, "vocab_size": 20}, with_mlm=True)
    before = weights_of(model)
    with pytest.raises(CheckpointError) as error:
        load_google_checkpoint(model, tiny_checkpoint_dir)
    lines = str(error.value).splitlines()
    assert lines[1:] == [
        "Shape mismatch: bert/embeddings/word_embeddings has shape [15, 4] in the checkpoint, the "
        "model's Embedding-Token/embeddings needs [20, 4]; check 'vocab_size' in the config "
        "(the checkpoint has 15, the config 20)",
        "Shape mismatch: cls/predictions/output_bias has shape [15] in the checkpoint, the model's "
        "MLM-Bias/bias needs [20]; check 'vocab_size' in the config (the checkpoint has 15, the config 20)",
    ]
    assert_same_weights(before, model)


def test_too_many_layers_hint(tiny_checkpoint_dir, tiny_config):
    model = build_transformer_model({**tiny_config, "num_hidden_layers": 3})
    with pytest.raises(CheckpointError, match="Hint: the checkpoint has 2 Transformer blocks: "
                                              "check 'num_hidden_layers' in the config"):
        load_google_checkpoint(model, tiny_checkpoint_dir)


@pytest.mark.parametrize("family, config_changes, hint", [
    # BERT's names read as another family's: say whose names they are.
    ("albert", {}, "the checkpoint's names are BERT's (which RoBERTa, NEZHA and RoFormer share), not albert's"),
    # A RoFormer or NEZHA checkpoint read as BERT: the position table it lacks says which.
    ("bert", None, "the checkpoint has no position table: NEZHA (relative positions) and RoFormer (rotary)"),
])
def test_a_checkpoint_of_another_family_names_the_family(tiny_checkpoint_dir, tiny_config, family, config_changes,
                                                         hint):
    if config_changes is None:  # the tiny RoFormer of bert4keras's families, built as BERT
        directory = shared_path("fixtures", "bert4keras_families", "roformer_tiny")
        model = build_transformer_model(directory / "config.json", model="bert")
        path = directory / "model.ckpt"
    else:
        model = build_transformer_model({**tiny_config, **config_changes}, model=family)
        path = tiny_checkpoint_dir
    with pytest.raises(CheckpointError, match=re.escape("Hint: " + hint)):
        load_google_checkpoint(model, path)


def test_truncated_data_file(tiny_checkpoint_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_checkpoint_dir, broken)
    data = broken / (PREFIX + ".data-00000-of-00001")
    data.write_bytes(data.read_bytes()[:1000])
    model = build_transformer_model(tiny_checkpoint_dir / "bert_config.json")
    before = weights_of(model)
    with pytest.raises(CheckpointError, match=f"{broken / PREFIX}: cannot read bert/"):
        load_google_checkpoint(model, broken)
    assert_same_weights(before, model)


def test_corrupt_index_file(tiny_checkpoint_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_checkpoint_dir, broken)
    (broken / (PREFIX + ".index")).write_bytes(b"not an index" * 10)
    model = build_transformer_model(tiny_checkpoint_dir / "bert_config.json")
    with pytest.raises(CheckpointError, match=f"{broken / PREFIX}: not a readable TensorFlow checkpoint"):
        load_google_checkpoint(model, broken)


@pytest.mark.parametrize("setup, message", [
    ("missing", "no checkpoint here (expected bert_model.ckpt.index beside it); pass the prefix, "
                "e.g. .../bert_model.ckpt, one of its files, or its directory"),
    ("empty_dir", "no checkpoint in this directory (no *.index file)"),
    ("two", "2 checkpoints in this directory (a, b): pass one prefix"),
])
def test_path_errors(tmp_path, tiny_checkpoint_dir, setup, message):
    model = build_transformer_model(tiny_checkpoint_dir / "bert_config.json")
    path = tmp_path / PREFIX if setup == "missing" else tmp_path
    if setup == "two":
        for name in ("a", "b"):
            (tmp_path / f"{name}.index").write_bytes(b"")
    with pytest.raises(CheckpointError) as error:
        load_google_checkpoint(model, path)
    assert str(error.value) == f"{path}: {message}"


def test_fewer_positions_take_the_first_rows(tiny_checkpoint_dir, tiny_config, caplog):
    model = build_transformer_model({**tiny_config, "max_position_embeddings": 8})
    with caplog.at_level(logging.WARNING, logger="kbert"):
        report = load_google_checkpoint(model, tiny_checkpoint_dir)
    table = tf.train.load_checkpoint(str(tiny_checkpoint_dir / PREFIX)).get_tensor(
        "bert/embeddings/position_embeddings")
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model.get_layer("Embedding-Position").embeddings), table[:8])
    assert report.notes == [f"{tiny_checkpoint_dir / PREFIX}: the model has 8 positions, the checkpoint "
                            "16: using the first 8 rows of bert/embeddings/position_embeddings"]
    assert report.notes[0] in caplog.text


def test_keep_tokens(tiny_checkpoint_dir, tiny_config):
    keep = [0, 1, 2, 3, 13, 11]
    model = build_transformer_model({**tiny_config, "vocab_size": len(keep)}, with_mlm=True,
                                    checkpoint_path=tiny_checkpoint_dir, keep_tokens=keep)
    reader = tf.train.load_checkpoint(str(tiny_checkpoint_dir / PREFIX))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model.get_layer("Embedding-Token").embeddings),
                                  reader.get_tensor("bert/embeddings/word_embeddings")[keep])
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model.get_layer("MLM-Bias").bias),
                                  reader.get_tensor("cls/predictions/output_bias")[keep])
    with pytest.raises(CheckpointError, match=r"keep_tokens has id\(s\) \[15\] outside the "
                                              r"checkpoint's vocabulary of 15"):
        load_google_checkpoint(model, tiny_checkpoint_dir, keep_tokens=[0, 1, 2, 3, 15, 11])
    before = [keras.ops.convert_to_numpy(w) for w in model.weights]
    with pytest.raises(CheckpointError, match=r"keep_tokens has 5 ids but the model's vocab_size is 6; "
                                              r"nothing was loaded"):
        load_google_checkpoint(model, tiny_checkpoint_dir, keep_tokens=[0, 1, 2, 3, 13])
    assert all(np.array_equal(a, keras.ops.convert_to_numpy(w)) for a, w in zip(before, model.weights))


@pytest.mark.parametrize("family", ["nezha", "roformer"])
def test_weights_of_another_family_are_refused_unless_asked_for(family, tmp_path):
    config = CONFIGS / "bert_tiny.json"
    checkpoint = save_google_checkpoint(build_transformer_model(config), tmp_path / "bert_model.ckpt")
    with pytest.raises(CheckpointError) as error:
        build_transformer_model(config, checkpoint, model=family)
    assert "holds a position table (bert/embeddings/position_embeddings, 64 positions)" in str(error.value)
    assert f"but model='{family}' has none" in str(error.value)
    assert "Nothing was loaded" in str(error.value)
    model = build_transformer_model(config, model=family)
    before = [keras.ops.convert_to_numpy(weight).copy() for weight in model.weights]
    with pytest.raises(CheckpointError):
        load_weights(model, checkpoint)
    assert all(np.array_equal(a, keras.ops.convert_to_numpy(b)) for a, b in zip(before, model.weights))  # nothing half-loaded
    report = load_weights(model, checkpoint, ignore_position_table=True)
    assert "bert/embeddings/position_embeddings" in report.unused
