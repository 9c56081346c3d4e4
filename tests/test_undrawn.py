"""Models built to be loaded draw no random weights (`kbert.checkpoints.undrawn`): each weight takes the
checkpoint's tensor as its first value, a weight the checkpoint lacks draws its own, a failed load leaves
nothing waiting to be drawn. `benchmarks.large_load` measures the memory and time this saves."""

import keras
import numpy as np
import pytest

from conftest import CONFIGS, minilm_dir
from kbert import build_transformer_model, load_hf_weights, save_hf_weights
from kbert.checkpoints import loader
from kbert.checkpoints.undrawn import initialize_undrawn, is_undrawn, undrawn_weights
from kbert.errors import CheckpointError


def pending() -> list:
    from keras.src.backend.common import global_state

    return list(global_state.get_global_attribute("uninitialized_variables") or [])


@pytest.fixture
def filled(monkeypatch) -> list:
    """The paths of the weights that took a checkpoint's tensor as their first value."""
    paths = []
    fill = loader.fill_on_initialize

    def counting(variable, read):
        paths.append(variable.path)
        fill(variable, read)

    monkeypatch.setattr(loader, "fill_on_initialize", counting)
    return paths


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    keras.utils.set_random_seed(3)
    model = build_transformer_model(CONFIGS / "bert_tiny.json", with_pool=True)
    return model, save_hf_weights(model, tmp_path_factory.mktemp("bert_tiny"))


def values(model) -> list:
    return [keras.ops.convert_to_numpy(variable.value) for variable in model.weights]


def test_a_model_built_from_a_checkpoint_reads_each_weight_and_draws_none(saved, filled):
    model, path = saved
    loaded = build_transformer_model(CONFIGS / "bert_tiny.json", path, with_pool=True)
    assert sorted(filled) == sorted(variable.path for variable in loaded.weights)
    assert not pending() and not any(is_undrawn(variable) for variable in loaded.weights)
    for ours, theirs in zip(values(loaded), values(model)):
        np.testing.assert_array_equal(ours, theirs)
    ids = np.array([[101, 2769, 4263, 102]])
    np.testing.assert_array_equal(loaded.predict([ids, ids * 0], verbose=0), model.predict([ids, ids * 0], verbose=0))


def test_a_weight_the_checkpoint_lacks_is_drawn_from_its_own_initializer(saved, filled):
    """A task head built with the backbone (a reranker's, a classifier's) takes its initializer's values."""
    _, path = saved
    with undrawn_weights():
        bert = build_transformer_model(CONFIGS / "bert_tiny.json", with_pool=True)
        head = keras.layers.Dense(3, kernel_initializer="ones", name="head")
        keras.Model(bert.inputs, head(bert.output))
    load_hf_weights(bert, path)
    assert len(filled) == len(bert.weights)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(head.kernel.value), np.ones(head.kernel.shape))
    assert not pending()


def test_a_failed_load_leaves_nothing_to_draw(saved, tmp_path):
    from safetensors.numpy import load_file, save_file

    _, path = saved
    tensors = load_file(path)
    tensors["embeddings.word_embeddings.weight"][3, 0] = np.nan
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with undrawn_weights():
        bert = build_transformer_model(CONFIGS / "bert_tiny.json", with_pool=True)
    with pytest.raises(CheckpointError, match="embeddings.word_embeddings.weight"):
        load_hf_weights(bert, tmp_path)
    assert not pending()
    initialize_undrawn()  # as the next StatelessScope to end would: the failed model's weights stay undrawn
    assert all(is_undrawn(variable) for variable in bert.weights)


def test_an_embedding_folder_and_a_conversion_read_their_weights_undrawn(filled, tmp_path, tiny_checkpoint_dir):
    from kbert.builder.convert import convert
    from kbert.embeddings.embedder import Embedder

    embedder = Embedder.load(minilm_dir())
    assert len(filled) == len(embedder.backbone.weights) and not pending()
    filled.clear()
    convert(tiny_checkpoint_dir, tmp_path / "converted")
    assert filled and not pending()
