"""CRF, Viterbi, GlobalPointer and the multilabel loss: bert4keras 0.11.5's values, and layer tests."""

import numpy as np
import pytest

import keras
from conftest import compiled, golden
from kbert import ViterbiDecoder
from kbert.layers import (ConditionalRandomField, EfficientGlobalPointer, GlobalPointer, MaximumEntropyMarkovModel,
                          viterbi_decode)
from kbert.training.losses import global_pointer_crossentropy, multilabel_categorical_crossentropy


@pytest.fixture(scope="module")
def heads():
    return golden("heads.json")


def golden_crf(record):
    emissions, mask, labels, trans = (np.array(record[key], "float32") for key in ("emissions", "mask", "labels", "trans"))
    crf = ConditionalRandomField()
    crf.build(emissions.shape)
    crf._trans.assign(trans)
    return crf, crf(emissions, mask=mask.astype(bool)), labels, mask.sum(1).astype(int)


def test_crf_loss_and_accuracy_match_bert4keras(heads):
    record = heads["crf"]
    crf, scores, labels, _ = golden_crf(record)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(crf.sparse_loss(labels, scores)), record["sparse_loss"], atol=1e-4)
    assert float(crf.sparse_accuracy(labels, scores)) == pytest.approx(record["sparse_accuracy"], abs=1e-7)
    one_hot = keras.ops.one_hot(labels.astype("int32"), 5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(crf.dense_loss(one_hot, scores)), record["sparse_loss"], atol=1e-4)


@pytest.mark.parametrize("constrained", [False, True])
def test_viterbi_paths_match_bert4keras(heads, constrained):
    record = heads["crf"]
    crf, scores, _, lengths = golden_crf(record)
    trans = keras.ops.convert_to_numpy(crf.trans)
    limits = {"starts": record["viterbi_starts"], "ends": record["viterbi_ends"]} if constrained else {}
    expected = record["viterbi_paths_constrained" if constrained else "viterbi_paths"]
    emissions = np.array(record["emissions"], "float32")
    decoder = ViterbiDecoder(trans, **limits)
    assert [decoder.decode(emissions[i, :n]).tolist() for i, n in enumerate(lengths)] == expected
    batched = keras.ops.convert_to_numpy(compiled(lambda s: viterbi_decode(s, trans, **limits))(scores))
    assert [batched[i, :n].tolist() for i, n in enumerate(lengths)] == expected
    assert all(not batched[i, n:].any() for i, n in enumerate(lengths))  # 0 at padding


def test_batched_viterbi_equals_numpy_on_random_batches():
    rng = np.random.default_rng(0)
    trans = rng.normal(size=(6, 6)).astype("float32")
    for length in (1, 2, 17):
        emissions = rng.normal(size=(5, length, 6)).astype("float32")
        lengths = rng.integers(1, length + 1, size=5)
        mask = np.arange(length)[None] < lengths[:, None]
        batched = keras.ops.convert_to_numpy(viterbi_decode(emissions, trans, mask=mask))
        for i, n in enumerate(lengths):
            assert batched[i, :n].tolist() == ViterbiDecoder(trans).decode(emissions[i, :n]).tolist()


@pytest.mark.parametrize("layer_class", [GlobalPointer, EfficientGlobalPointer])
def test_global_pointers_match_bert4keras(heads, layer_class):
    record = heads[layer_class.__name__]
    hidden, mask = np.array(record["hidden"], "float32"), np.array(record["mask"]).astype(bool)
    layer = layer_class(record["heads"], record["head_size"])
    layer.build(hidden.shape)
    dense_layers = [layer.dense] if layer_class is GlobalPointer else [layer.p_dense, layer.q_dense]
    values = list(record["weights"].values())
    for index, dense in enumerate(dense_layers):
        dense.kernel.assign(np.array(values[2 * index], "float32"))
        dense.bias.assign(np.array(values[2 * index + 1], "float32"))
    assert layer.count_params() == record["params"]
    logits = keras.ops.convert_to_numpy(layer(hidden, mask=mask))
    expected = np.array([[[[np.nan if value is None else value for value in row] for row in head] for head in example]
                         for example in record["logits"]], dtype="float64")
    known = ~np.isnan(expected)
    np.testing.assert_allclose(logits[known], expected[known], atol=1e-5)
    assert (logits[~known] == -1e12).all()  # padding and the lower triangle
    flat = np.where(known, expected, -1e12).astype("float32").reshape(-1, 81)
    target = np.array(record["target"], "float32")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(multilabel_categorical_crossentropy(target.reshape(-1, 81), flat)),
                               record["multilabel_categorical_crossentropy"], atol=1e-4)
    assert float(global_pointer_crossentropy(target, flat.reshape(target.shape))) == pytest.approx(
        np.mean(record["multilabel_categorical_crossentropy"]), abs=1e-4)


@pytest.mark.parametrize("layer", [ConditionalRandomField(lr_multiplier=2), GlobalPointer(3, 4, name="gp"),
                                   EfficientGlobalPointer(3, 4, RoPE=False, tril_mask=False),
                                   MaximumEntropyMarkovModel(lr_multiplier=2, hidden_dim=3)])
def test_layer_contract(layer, tmp_path):
    """Shapes, masks, get_config round trip, .keras save/load with safe_mode=True."""
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(50, 8, mask_zero=True)(tokens)  # id 0 is padding
    model = keras.Model(tokens, layer(hidden))
    ids = np.array([[5, 6, 7, 0], [8, 9, 0, 0]])
    output = model.predict(ids, verbose=0)
    per_token = isinstance(layer, (ConditionalRandomField, MaximumEntropyMarkovModel))
    expected_shape = (2, 4, 8) if per_token else (2, 3, 4, 4)
    assert output.shape == expected_shape and output.dtype == np.float32
    if per_token:
        assert (output[1, 2:] == -1e12).all() and (output[0, :3] > -1e6).all()
    else:
        assert (output[1, :, 2:, :] == -1e12).all() and (output[1, :, :, 2:] == -1e12).all()
    clone = type(layer).from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    model.save(tmp_path / "model.keras")
    restored = keras.models.load_model(tmp_path / "model.keras", safe_mode=True)
    np.testing.assert_array_equal(restored.predict(ids, verbose=0), output)


def _memm_reference(labels, scores, trans):
    """bert4keras's MEMM loss and accuracy in NumPy: each direction over each sequence's real positions."""
    losses, hits = [], []
    for direction, matrix in ((1, trans), (-1, trans.T)):
        total, right, n = 0.0, 0.0, 0
        for row_labels, row_scores in zip(labels, scores):
            length = int((row_scores > -1e6).all(axis=1).sum())
            y, s = row_labels[:length][::direction], row_scores[:length][::direction]
            for t in range(length):
                averaged = (s[t] + (s[t] if t == 0 else matrix[y[t - 1]])) / 2
                log_probabilities = averaged - np.log(np.exp(averaged - averaged.max()).sum()) - averaged.max()
                total -= log_probabilities[y[t]]
                right += float(np.argmax(averaged) == y[t])
                n += 1
        losses.append(total / n)
        hits.append(right / n)
    return np.mean(losses), np.mean(hits)


@pytest.mark.parametrize("hidden_dim", [None, 2])
def test_memm_loss_and_accuracy_follow_bert4keras_formula(hidden_dim):
    rng = np.random.default_rng(0)
    memm = MaximumEntropyMarkovModel(lr_multiplier=3, hidden_dim=hidden_dim)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)
    scores = keras.ops.convert_to_numpy(memm(rng.normal(size=(2, 5, 4)).astype("float32"), mask=mask))
    labels = rng.integers(0, 4, size=(2, 5))
    loss, accuracy = _memm_reference(labels, scores, keras.ops.convert_to_numpy(memm.trans))
    assert float(memm.sparse_loss(labels, scores)) == pytest.approx(loss, rel=1e-5)
    assert float(memm.sparse_accuracy(labels, scores)) == pytest.approx(accuracy, rel=1e-6)
    one_hot = np.eye(4)[labels]
    assert float(memm.dense_loss(one_hot, scores)) == pytest.approx(loss, rel=1e-5)


def test_crf_tagger_trains_saves_and_decodes_the_same(tmp_path):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    # Tags follow the tokens: token t (1..8) is tagged t % 3, padding 0.
    lengths = rng.integers(3, 10, size=256)
    tokens = np.zeros((256, 9), "int32")
    for row, n in enumerate(lengths):
        tokens[row, :n] = rng.integers(1, 9, size=n)
    tags = tokens % 3
    inputs = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(9, 16, mask_zero=True)(inputs)
    crf = ConditionalRandomField(lr_multiplier=10)
    model = keras.Model(inputs, crf(keras.layers.Dense(3)(hidden)))
    model.compile(keras.optimizers.Adam(0.05), loss=crf.sparse_loss, metrics=[crf.sparse_accuracy])
    history = model.fit(tokens, tags, batch_size=32, epochs=8, verbose=0).history
    assert history["loss"][-1] < 0.2 * history["loss"][0]
    assert history["sparse_accuracy"][-1] > 0.95
    paths = keras.ops.convert_to_numpy(viterbi_decode(model.predict(tokens, verbose=0), crf.trans))
    mask = tokens > 0
    assert (paths[mask] == tags[mask]).mean() > 0.95
    model.save(tmp_path / "tagger.keras")
    restored = keras.models.load_model(tmp_path / "tagger.keras", safe_mode=True, compile=False)
    restored_crf = restored.layers[-1]
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(viterbi_decode(restored.predict(tokens, verbose=0), restored_crf.trans)), paths)
