"""LoRA fine-tuning: adapters train, the merged weights and the adapters on the base give the same model."""

import json

import keras
import numpy as np
import pytest
from safetensors import safe_open

from conftest import CONFIGS, shared_path, write_task_data
from kbert import build_transformer_model
from kbert.builder import build_classifier
from kbert.cli.main import main
from kbert.errors import KbertError
from kbert.training.lora import ADAPTERS_FILE, block_kernels, enable_lora, load_adapters, save_adapters


def classifier():
    keras.utils.set_random_seed(3)
    return build_classifier(build_transformer_model(str(CONFIGS / "bert_tiny.json"), with_pool=True), 2)


@pytest.mark.parametrize("embeddings_rank", [None, 2], ids=["blocks", "blocks-and-token-table"])
def test_adapters_train_and_merge_to_the_same_model(tmp_path, embeddings_rank):
    model = classifier()
    base = [np.array(w) for w in model.get_weights()]
    enable_lora(model, rank=4, alpha=8, embeddings_rank=embeddings_rank)
    trainable = sum(int(np.prod(v.shape)) for v in model.trainable_weights)
    table_adapter = (embeddings_rank or 0) * (21128 + 32)  # rank x (vocab + hidden): most of bert_tiny's share
    assert trainable - table_adapter < 0.1 * model.count_params()
    assert all(layer.lora_enabled and not any(w.path.endswith("/kernel") for w in layer.trainable_weights)
               for layer in block_kernels(model))
    token_table = model.get_layer("Embedding-Token")
    assert [w.name for w in token_table.trainable_weights] == (["lora_embeddings_a", "lora_embeddings_b"]
                                                               if embeddings_rank else [])
    assert not model.get_layer("Embedding-Segment").trainable and model.get_layer("Embedding-Norm").trainable
    table = keras.ops.convert_to_numpy(token_table.weights[0])

    rng = np.random.default_rng(0)
    tokens = rng.integers(100, 5000, (32, 16)).astype("int32")
    labels = rng.integers(0, 2, 32)
    model.compile(keras.optimizers.Adam(1e-2), "sparse_categorical_crossentropy")
    frozen = keras.ops.convert_to_numpy(block_kernels(model)[0].weights[0])
    model.fit([tokens, tokens * 0], labels, epochs=2, batch_size=8, verbose=0)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(block_kernels(model)[0].weights[0]), frozen)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(token_table.weights[0]), table)
    assert np.allclose(keras.ops.convert_to_numpy(token_table.embeddings), table) != bool(embeddings_rank)  # adapted
    adapted = model.predict([tokens, tokens * 0], verbose=0)
    assert not np.allclose(adapted, classifier().predict([tokens, tokens * 0], verbose=0), atol=1e-3)

    # Keras writes the kernels merged: a model without LoRA reads them as they are.
    model.save_weights(tmp_path / "model.weights.h5")
    merged = classifier()
    merged.load_weights(tmp_path / "model.weights.h5")
    np.testing.assert_allclose(merged.predict([tokens, tokens * 0], verbose=0), adapted, atol=1e-5)

    # The adapters alone, on the base they were trained from.
    save_adapters(model, str(tmp_path / ADAPTERS_FILE))
    assert (tmp_path / ADAPTERS_FILE).stat().st_size < 0.2 * (tmp_path / "model.weights.h5").stat().st_size
    again = classifier()
    again.set_weights(base)
    load_adapters(again, str(tmp_path / ADAPTERS_FILE))
    np.testing.assert_allclose(again.predict([tokens, tokens * 0], verbose=0), adapted, atol=1e-5)

    other = build_classifier(build_transformer_model(str(CONFIGS / "bert_tiny.json"), with_pool=True), 3)
    with pytest.raises(KbertError, match="do not fit this model"):
        load_adapters(other, str(tmp_path / ADAPTERS_FILE))


def test_kbert_train_with_lora_writes_adapters_and_a_directory_that_predicts(tmp_path, capsys):
    write_task_data(tmp_path)
    common = ["--config", str(CONFIGS / "bert_tiny.json"), "--vocab", str(shared_path("vocab", "chinese_vocab.txt")),
              "--train", str(tmp_path / "reviews.tsv"), "--epochs", "1", "--batch-size", "16", "--maxlen", "32"]
    assert main(["train", *common, "--lora-rank", "4", "--lora-embeddings", "2", "--out", str(tmp_path / "lora")]) == 0
    state = json.loads((tmp_path / "lora" / "training.json").read_text(encoding="utf-8"))
    assert state["options"]["lora_rank"] == 4 and state["options"]["lora_embeddings"] == 2
    with safe_open(str(tmp_path / "lora" / ADAPTERS_FILE), framework="numpy") as adapters:
        assert json.loads(adapters.metadata()["kbert_lora"]) == {"rank": 4, "alpha": 4, "embeddings_rank": 2}
        assert "Embedding-Token/lora_embeddings_a" in adapters.keys()
    capsys.readouterr()
    (tmp_path / "texts.txt").write_text("房间很干净\n", encoding="utf-8")
    assert main(["predict", "--json", "--model", str(tmp_path / "lora"), str(tmp_path / "texts.txt")]) == 0
    assert json.loads(capsys.readouterr().out)["label"] in ("0", "1")

    for extra, message in ((["--lora-alpha", "8"], "give --lora-rank too"),
                           (["--lora-embeddings", "2"], "give --lora-rank too"),
                           (["--lora-rank", "4", "--adversarial", "fgm"], "which LoRA freezes")):
        assert main(["train", *common, *extra, "--out", str(tmp_path / "refused")]) == 2
        assert message in capsys.readouterr().err
        assert not (tmp_path / "refused").exists()


@pytest.mark.parametrize("rank, embeddings_rank, option", [(100, None, "--lora-rank"), (32, None, "--lora-rank"),
                                                           (4, 64, "--lora-embeddings")])
def test_a_rank_not_below_the_kernels_it_adapts_is_refused(rank, embeddings_rank, option):
    model = classifier()
    with pytest.raises(KbertError, match=rf"LoRA rank {embeddings_rank or rank} \({option}\) is not below the "
                                         r"narrowest adapted kernel's side \(32,"):
        enable_lora(model, rank, embeddings_rank=embeddings_rank)


def test_hugging_face_safetensors_of_a_lora_model_hold_its_merged_kernels(tmp_path):
    """`save_hf_weights` of a model with Keras's LoRA (what `kbert train --lora-rank` finishes with: a CrossEncoder,
    a sentence-transformers folder) writes each kernel and table with its adapter merged, as Keras's own files do;
    a model without LoRA reads them to the same outputs."""
    from kbert.checkpoints.hf import load_hf_weights, save_hf_weights

    keras.utils.set_random_seed(3)
    bert = build_transformer_model(str(CONFIGS / "bert_tiny.json"))
    enable_lora(bert, rank=2, embeddings_rank=2)
    rng = np.random.default_rng(0)
    for variable in bert.weights:
        if "lora_" in variable.path and variable.path.endswith("_b"):  # B starts at 0: the adapter moved
            variable.assign(rng.normal(0, 0.5, variable.shape).astype("float32"))
    tokens = rng.integers(100, 5000, (2, 9)).astype("int32")
    adapted = bert.predict([tokens, tokens * 0], verbose=0)
    save_hf_weights(bert, tmp_path)
    plain = build_transformer_model(str(CONFIGS / "bert_tiny.json"))
    load_hf_weights(plain, tmp_path)
    np.testing.assert_allclose(plain.predict([tokens, tokens * 0], verbose=0), adapted, atol=1e-5)
