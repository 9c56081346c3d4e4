"""Hugging Face safetensors, with the real all-MiniLM-L6-v2 weights."""

import json
import shutil

import keras
import numpy as np
import pytest

from conftest import CONFIGS, kbert_in_process, minilm_dir, needs_tensorflow
from kbert import CheckpointError, Tokenizer, build_transformer_model, load_hf_weights, save_hf_weights
from kbert.errors import KbertError

SENTENCES = [
    "A man is playing a guitar.",
    "Someone is playing the guitar.",
    "The stock market fell sharply today.",
    "A woman is slicing an onion.",
    "An onion is being cut by a woman.",
]


@pytest.fixture(scope="module")
def minilm():
    directory = minilm_dir()
    bert = build_transformer_model(directory / "config.json")
    report = load_hf_weights(bert, directory)
    return directory, bert, report


def sentence_embeddings(bert, tokenizer, sentences):
    tokens, segments = tokenizer.encode_batch(sentences)
    hidden = bert.predict([tokens, segments], verbose=0)
    mask = (tokens > 0)[..., None]
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def test_all_tensors_used(minilm):
    _, bert, report = minilm
    assert len(report.loaded) == len(bert.weights) == 101
    # The pooler is in the file but the model was built without one.
    assert report.unused == ["embeddings.position_ids", "pooler.dense.bias", "pooler.dense.weight"]


def test_paraphrases_are_closer_than_unrelated_sentences(minilm):
    directory, bert, _ = minilm
    embeddings = sentence_embeddings(bert, Tokenizer(directory / "vocab.txt"), SENTENCES)
    similarity = embeddings @ embeddings.T
    assert similarity[0, 1] > 0.7 and similarity[3, 4] > 0.7
    for unrelated in (similarity[0, 2], similarity[0, 3], similarity[2, 4]):
        assert unrelated < 0.3
    assert similarity[0, 1] > similarity[0, 3] + 0.5


def test_hf_to_google_and_back_is_identical(minilm, tmp_path):
    needs_tensorflow("writing and reading a Google checkpoint")
    directory, bert, _ = minilm
    result = kbert_in_process("convert", directory, tmp_path / "google")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "google").iterdir()) == [
        "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
        "checkpoint", "vocab.txt"]
    again = build_transformer_model(tmp_path / "google" / "bert_config.json",
                                    checkpoint_path=tmp_path / "google")
    tokens, segments = Tokenizer(directory / "vocab.txt").encode_batch(SENTENCES)
    np.testing.assert_array_equal(again.predict([tokens, segments], verbose=0),
                                  bert.predict([tokens, segments], verbose=0))
    result = kbert_in_process("convert", tmp_path / "google", tmp_path / "hf")
    assert result.returncode == 0, result.stderr
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["model_type"] == "bert" and config["architectures"] == ["BertModel"]
    third = build_transformer_model(tmp_path / "hf" / "config.json", checkpoint_path=tmp_path / "hf")
    for a, b in zip(bert.weights, third.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))


def test_pretraining_layout_round_trip(tmp_path):
    model = build_transformer_model(CONFIGS / "bert_tiny.json", with_nsp=True, with_mlm=True)
    path = save_hf_weights(model, tmp_path)
    from safetensors import safe_open
    with safe_open(path, "np") as handle:
        names = set(handle.keys())
        assert handle.get_tensor("cls.seq_relationship.weight").shape == (2, 32)
        assert handle.get_tensor("bert.encoder.layer.0.intermediate.dense.weight").shape == (64, 32)
    assert "bert.embeddings.word_embeddings.weight" in names and "cls.predictions.bias" in names
    again = build_transformer_model(CONFIGS / "bert_tiny.json", with_nsp=True, with_mlm=True,
                                    checkpoint_path=path)
    for a, b in zip(model.weights, again.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))


def test_missing_tensors_and_unchanged_weights(tmp_path):
    backbone = build_transformer_model(CONFIGS / "bert_tiny.json")
    save_hf_weights(backbone, tmp_path)
    model = build_transformer_model(CONFIGS / "bert_tiny.json", with_pool=True)
    before = [keras.ops.convert_to_numpy(w).copy() for w in model.weights]
    with pytest.raises(CheckpointError) as error:
        load_hf_weights(model, tmp_path)
    assert str(error.value) == (
        f"{tmp_path / 'model.safetensors'}: this safetensors file does not fit the model; "
        "nothing was loaded.\nMissing 2 variable(s) the model needs:\n"
        "  pooler.dense.weight (for Pooler-Dense/kernel)\n  pooler.dense.bias (for Pooler-Dense/bias)\n"
        "Hint: this checkpoint has no pooler: build without with_pool")
    for old, variable in zip(before, model.weights):
        np.testing.assert_array_equal(old, keras.ops.convert_to_numpy(variable))


def test_truncated_safetensors(tmp_path):
    source = minilm_dir() / "model.safetensors"
    broken = tmp_path / "model.safetensors"
    broken.write_bytes(source.read_bytes()[:5000])
    bert = build_transformer_model(minilm_dir() / "config.json")
    with pytest.raises(CheckpointError, match=f"{broken}: not a readable safetensors file"):
        load_hf_weights(bert, tmp_path)


def write_shards(source, directory, shards: int = 3) -> dict:
    """`source`'s tensors as Hugging Face shards them: model-0000i-of-0000n.safetensors and an index."""
    from safetensors.numpy import load_file, save_file

    tensors = load_file(source)
    names = sorted(tensors)
    weight_map = {}
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = names[i::shards]
        save_file({name: tensors[name] for name in part}, str(directory / file))
        weight_map.update(dict.fromkeys(part, file))
    index = {"metadata": {"total_size": sum(t.nbytes for t in tensors.values())}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    return weight_map


def test_a_sharded_checkpoint_loads_as_its_single_file(minilm, tmp_path):
    directory, bert, _ = minilm
    weight_map = write_shards(directory / "model.safetensors", tmp_path)
    for name in ("config.json", "vocab.txt"):
        shutil.copy(directory / name, tmp_path / name)
    sharded = build_transformer_model(checkpoint_path=tmp_path)  # the config beside the index, as for one file
    for mine, theirs in zip(sharded.weights, bert.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(mine), keras.ops.convert_to_numpy(theirs))
    # the index and its shards disagree: the tensor and the shard are named
    name = next(iter(weight_map))
    wrong = {**weight_map, name: "model-00002-of-00003.safetensors" if weight_map[name].startswith("model-00001")
             else "model-00001-of-00003.safetensors"}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wrong}), encoding="utf-8")
    with pytest.raises(CheckpointError, match=f"names '{name}' in model-0000"):
        load_hf_weights(build_transformer_model(tmp_path / "config.json"), tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}), "utf-8")
    (tmp_path / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model-00002-of-00003.safetensors: file not found"):
        load_hf_weights(build_transformer_model(tmp_path / "config.json"), tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(CheckpointError, match="model.safetensors.index.json: not a safetensors index"):
        load_hf_weights(build_transformer_model(tmp_path / "config.json"), tmp_path)


def test_google_checkpoint_given_to_hf_loader(tmp_path, tiny_checkpoint_dir):
    bert = build_transformer_model(tiny_checkpoint_dir / "bert_config.json")
    with pytest.raises(CheckpointError, match="no model.safetensors in this directory .nor the "
                                              "model.safetensors.index.json of a sharded checkpoint"):
        load_hf_weights(bert, tiny_checkpoint_dir)


def test_old_gamma_beta_names(tmp_path):
    model = build_transformer_model(CONFIGS / "bert_tiny.json")
    path = save_hf_weights(model, tmp_path)
    from safetensors.numpy import load_file, save_file
    tensors = {name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"):
               value for name, value in load_file(path).items()}
    save_file(tensors, path)
    again = build_transformer_model(CONFIGS / "bert_tiny.json", checkpoint_path=path)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(again.get_layer("Embedding-Norm").gamma),
                                  keras.ops.convert_to_numpy(model.get_layer("Embedding-Norm").gamma))
    shutil.rmtree(tmp_path)


@pytest.mark.parametrize("layout", ["config", "names"])
def test_hugging_face_roberta_layout_is_refused_with_the_reason(tmp_path, layout):
    model = build_transformer_model(CONFIGS / "bert_tiny.json")
    path = save_hf_weights(model, tmp_path)
    if layout == "config":  # a RobertaModel: BERT's tensor names, RoBERTa's positions and ids
        config = {**json.loads((CONFIGS / "bert_tiny.json").read_text()), "model_type": "roberta",
                  "pad_token_id": 1}
        (tmp_path / "config.json").write_text(json.dumps(config))
    else:  # a RobertaForMaskedLM
        from safetensors.numpy import load_file, save_file
        save_file({f"roberta.{name}": value for name, value in load_file(path).items()}, path)
    target = build_transformer_model(CONFIGS / "bert_tiny.json", model="roberta")
    before = [keras.ops.convert_to_numpy(w).copy() for w in target.weights]
    with pytest.raises(CheckpointError) as error:
        load_hf_weights(target, tmp_path)
    assert "Hugging Face's RoBERTa layout" in str(error.value)
    assert "numbers positions from 2, after its padding id 1, and its <s> is id 0" in str(error.value)
    assert "Nothing was loaded" in str(error.value)
    for old, variable in zip(before, target.weights):
        np.testing.assert_array_equal(old, keras.ops.convert_to_numpy(variable))


def test_tokenizer_reads_a_hugging_face_directory_and_its_tokenizer_json(tmp_path):
    directory = minilm_dir()
    from_text = Tokenizer(directory / "vocab.txt")
    from_json = Tokenizer(directory / "tokenizer.json")
    assert from_json.vocab == from_text.vocab and len(from_json.vocab) == 30522
    assert Tokenizer(directory).encode_batch(SENTENCES)[0].tolist() == from_text.encode_batch(SENTENCES)[0].tolist()
    only_json = tmp_path / "model"
    only_json.mkdir()
    shutil.copy(directory / "tokenizer.json", only_json)
    assert Tokenizer(only_json).encode(SENTENCES[0]) == from_text.encode(SENTENCES[0])
    bpe = tmp_path / "tokenizer.json"
    bpe.write_text(json.dumps({"model": {"type": "BPE", "vocab": {}, "merges": []}}))
    with pytest.raises(KbertError, match=f"{bpe}: a BPE tokenizer; kbert's Tokenizer reads WordPiece"):
        Tokenizer(bpe)
    with pytest.raises(KbertError, match=f"{tmp_path / 'empty'}: no vocab.txt, tokenizer.json, "
                                                          "spiece.model in this directory"):
        (tmp_path / "empty").mkdir()
        Tokenizer(tmp_path / "empty")
