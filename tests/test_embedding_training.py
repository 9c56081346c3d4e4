"""`kbert train --task embed`: the contrastive losses against NumPy, the view layers, the data formats,
and real runs on the shared reviews whose model directories load as sentence-transformers folders."""

import json

import keras
import numpy as np
import pytest

from conftest import CONFIGS, kbert_in_process, shared_path, write
from kbert.cli.main import main
from kbert.errors import DataError
from kbert.layers.views import SplitViews, StackViews
from kbert.training.contrastive import CoSENT, InBatchNegatives


def unit(vectors):
    return vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)


def log_softmax(scores):
    scores = scores - scores.max(-1, keepdims=True)
    return scores - np.log(np.exp(scores).sum(-1, keepdims=True))


@pytest.mark.parametrize("views, symmetric", [(2, False), (3, False), (2, True)])
def test_in_batch_negatives_is_cross_entropy_over_the_batchs_documents(views, symmetric):
    vectors = np.random.default_rng(0).normal(size=(5, views, 8)).astype("float32")
    loss = keras.ops.convert_to_numpy(InBatchNegatives(0.1, symmetric, reduction=None)(np.zeros(5), vectors))
    queries, documents = unit(vectors[:, 0]), unit(np.concatenate([vectors[:, view] for view in range(1, views)]))
    expected = -np.diag(log_softmax(queries @ documents.T / 0.1)[:, :5])
    if symmetric:
        expected = (expected - np.diag(log_softmax(unit(vectors[:, 1]) @ queries.T / 0.1))) / 2
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


def test_cosent_sums_over_every_misordered_pair_of_pairs():
    vectors = np.random.default_rng(1).normal(size=(6, 2, 8)).astype("float32")
    scores = np.array([0.0, 1.0, 2.0, 2.0, 5.0, 3.0], "float32")
    loss = float(keras.ops.convert_to_numpy(CoSENT(0.05)(scores, vectors)))
    cosines = (unit(vectors[:, 0]) * unit(vectors[:, 1])).sum(-1) / 0.05
    terms = [cosines[j] - cosines[i] for i in range(6) for j in range(6) if scores[i] > scores[j]]
    np.testing.assert_allclose(loss, np.log1p(np.exp(terms).sum()), rtol=1e-5)


@pytest.mark.parametrize("loss", [InBatchNegatives(0.02, True), CoSENT(0.1)], ids=["in_batch", "cosent"])
def test_losses_round_trip_their_config(loss):
    clone = type(loss).from_config(loss.get_config())
    assert clone.get_config() == loss.get_config()


def test_view_layers_contract(tmp_path):
    """Shapes, get_config round trip, .keras save/load with safe_mode=True (ids carry no mask: padding is id 0,
    which the encoder masks itself)."""
    first, second = keras.Input((None,), dtype="int32"), keras.Input((None,), dtype="int32")
    stacked = StackViews(name="stack")([first, second])
    vectors = keras.layers.Embedding(20, 4)(stacked)[:, 0]
    model = keras.Model([first, second], SplitViews(2, name="split")(vectors))
    a, b = np.array([[1, 2, 3], [4, 5, 6]]), np.array([[7, 8], [9, 10]])
    output = model.predict([a, b], verbose=0)
    assert output.shape == (2, 2, 4)
    table = next(layer for layer in model.layers if isinstance(layer, keras.layers.Embedding)).get_weights()[0]
    np.testing.assert_allclose(output[:, 1], table[[7, 9]])  # example i's second view is b[i]
    stacked_ids = keras.ops.convert_to_numpy(StackViews()([a, b]))
    assert stacked_ids.tolist() == [[1, 2, 3], [4, 5, 6], [7, 8, 0], [9, 10, 0]]
    for layer in (StackViews(pad_id=3), SplitViews(3)):
        assert type(layer).from_config(layer.get_config()).get_config() == layer.get_config()
    model.save(tmp_path / "views.keras")
    restored = keras.models.load_model(tmp_path / "views.keras", safe_mode=True)
    np.testing.assert_array_equal(restored.predict([a, b], verbose=0), output)


# --- the data ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, texts, score, layout", [
    ("好\n不好\n", ("好",), None, "text"),
    ("好\t很好\n差\t不好\n", ("好", "很好"), None, "text, text_b"),
    ("好\t很好\t4.5\n差\t好\t0\n", ("好", "很好"), 4.5, "text, text_b, score"),
    ("好\t很好\t差\n差\t不好\t好\n", ("好", "很好", "差"), None, "text, text_b, negative"),
    # a hard negative that reads as a number (a year): the column is a score only where every row's is a number
    ("好\t很好\t1998\n差\t不好\t好\n", ("好", "很好", "1998"), None, "text, text_b, negative"),
    ("anchor\tpositive\tnegative\n好\t很好\t3\n", ("好", "很好", "3"), None, "text=anchor"),
    ("sentence1,sentence2,score\n好,很好,1\n", ("好", "很好"), 1.0, "text=sentence1"),
])
def test_each_layout_is_read_by_its_columns(tmp_path, text, texts, score, layout):
    from kbert.training.text_groups import read_text_groups

    groups, report = read_text_groups(str(write(tmp_path, "data.tsv", text)))
    assert (groups[0].texts, groups[0].score) == (texts, score)
    assert layout in report.layout


@pytest.mark.parametrize("text, message", [
    ("好\t很好\n差\n", "line 2: expected text<TAB>text_b \\(1 tab\\(s\\)\\) as on line 1, found 0"),
    ("好\t很好\t1\n差\t好\n", "line 2: expected text<TAB>text_b<TAB>score"),
    ("text\ttext_b\tscore\n好\t很好\t高\n", "line 2: the score '高' is not a number"),
    ("好\t\n", "line 1: empty or missing text_b"),
    # before round 5: a later row's tab was read as part of one text, and nan / inf as scores
    ("好\n差\t不好\n", "line 2: expected text \\(0 tab\\(s\\)\\) as on line 1, found 1"),
    ("好\t很好\tnan\n", "line 1: the score 'nan' is not a finite number"),
    ("text\ttext_b\tscore\n好\t很好\t-inf\n", "line 2: the score '-inf' is not a finite number"),
])
def test_bad_rows_are_named_by_line(tmp_path, text, message):
    from kbert.training.text_groups import read_text_groups

    with pytest.raises(DataError, match=message):
        read_text_groups(str(write(tmp_path, "data.tsv", text)))


# --- training ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def data_files(tmp_path_factory):
    """Real reviews as each layout: a review's two halves (a pair), with another review's start (a hard
    negative), each review alone (SimCSE), and two reviews scored 1 when their sentiment agrees (CoSENT)."""
    root = tmp_path_factory.mktemp("embed")
    rows = [line.split("\t") for line in
            shared_path("data", "sentiment", "sentiment.train.data").read_text(encoding="utf-8").splitlines()[:96]]
    rows = [(text, label) for text, label in rows if len(text) > 8]
    halves = [(text[:len(text) // 2], text[len(text) // 2:]) for text, _ in rows]
    write(root, "pairs.tsv", "".join(f"{a}\t{b}\n" for a, b in halves))
    write(root, "triplets.tsv", "".join(f"{a}\t{b}\t{halves[(i + 7) % len(halves)][0]}\n"
                                        for i, (a, b) in enumerate(halves)))
    write(root, "single.txt", "".join(f"{text}\n" for text, _ in rows))
    write(root, "scored.tsv", "".join(f"{a[0]}\t{b[0]}\t{int(a[1] == b[1])}\n" for a, b in zip(rows[::2], rows[1::2])))
    return root


def train_embed(data_files, tmp_path, name, *flags, valid=True):
    """`valid`: validate on the training file itself, or on the file named (False: none)."""
    out = tmp_path / f"out-{name}"
    data = data_files / name
    valid = data if valid is True else data_files / valid if valid else None
    code = main(["train", "--task", "embed", "--train", str(data), *(["--valid", str(valid)] if valid else []),
                 "--config", str(CONFIGS / "bert_tiny.json"), "--vocab", str(shared_path("vocab", "chinese_vocab.txt")),
                 "--batch-size", "16", "--maxlen", "32", *flags, "--out", str(out)])
    assert code == 0
    return out, json.loads((out / "training.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name, loss", [("pairs.tsv", "in_batch"), ("triplets.tsv", "in_batch"),
                                        ("single.txt", "simcse"), ("scored.tsv", "cosent")])
def test_each_loss_trains_a_model_that_loads_as_a_sentence_transformer(data_files, tmp_path, name, loss):
    from kbert.embeddings.embedder import Embedder

    # SimCSE is validated on pairs (recall@1 of a text and its other half): one text a line would score 1.0 always
    out, state = train_embed(data_files, tmp_path, name, "--epochs", "3", "--lr", "5e-4",
                             valid="pairs.tsv" if loss == "simcse" else True)
    assert (state["loss"], state["pooling"]) == (loss, "mean")
    losses = [epoch["loss"] for epoch in state["history"]]
    assert losses[-1] < losses[0], losses  # it learns
    scores = [epoch["val_score"] for epoch in state["history"]]
    assert all(-1 <= score < 1 for score in scores) and len(set(scores)) > 1, scores  # a score that can move
    vectors = Embedder.load(out).encode(["房间很大", "服务很好"])
    assert vectors.shape == (2, 32)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    modules = json.loads((out / "modules.json").read_text(encoding="utf-8"))
    assert [module["type"].rsplit(".", 1)[1] for module in modules] == ["Transformer", "Pooling", "Normalize"]


def test_simcse_views_of_one_text_differ_only_by_dropout(data_files, tmp_path):
    from kbert.builder import build_transformer_model
    from kbert.tasks.embedding import EmbeddingTask
    from kbert.training.options import TrainingOptions

    task = EmbeddingTask(TrainingOptions(task="embed"))
    model = task.build(build_transformer_model(CONFIGS / "bert_tiny.json"), 0, task.options)
    trainer = task.training_model(model)
    ids = np.array([[101, 2769, 4263, 102], [101, 1962, 102, 0]])
    inputs = [ids, ids * 0, ids, ids * 0]
    trained = keras.ops.convert_to_numpy(trainer(inputs, training=True))
    inferred = keras.ops.convert_to_numpy(trainer(inputs, training=False))
    assert np.abs(trained[:, 0] - trained[:, 1]).max() > 1e-3  # two dropout masks
    np.testing.assert_allclose(inferred[:, 0], inferred[:, 1], atol=1e-6)
    np.testing.assert_allclose(inferred[:, 0], model.predict([ids, ids * 0], verbose=0), atol=1e-5)


def test_simcse_validated_on_single_texts_is_refused(data_files, tmp_path, capsys):
    """Before the fix, each validation text was compared with itself: recall@1 was always 1.0, and the kept
    epoch arbitrary."""
    code = main(["train", "--task", "embed", "--train", str(data_files / "single.txt"), "--valid",
                 str(data_files / "single.txt"), "--config", str(CONFIGS / "bert_tiny.json"), "--vocab",
                 str(shared_path("vocab", "chinese_vocab.txt")), "--maxlen", "32", "--out", str(tmp_path / "never")])
    assert code == 2 and "one text a line, which validates nothing" in capsys.readouterr().err
    assert not (tmp_path / "never").exists()


def test_a_loss_the_data_cannot_feed_is_refused(data_files, tmp_path, capsys):
    code = main(["train", "--task", "embed", "--loss", "cosent", "--train", str(data_files / "pairs.tsv"),
                 "--config", str(CONFIGS / "bert_tiny.json"), "--vocab", str(shared_path("vocab", "chinese_vocab.txt")),
                 "--maxlen", "32", "--out", str(tmp_path / "never")])
    error = capsys.readouterr().err
    assert code == 2 and "--loss cosent reads text<TAB>text_b<TAB>score; this file has 2 texts a row" in error
    assert not (tmp_path / "never").exists()


@pytest.mark.parity
def test_a_trained_model_matches_sentence_transformers(data_files, tmp_path):
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="a test extra with torch")
    from kbert.embeddings.embedder import Embedder

    out, _ = train_embed(data_files, tmp_path, "pairs.tsv", "--epochs", "1", "--pooling", "cls", valid=False)
    texts = ["房间很大", "服务很好，下次还来"]
    reference = sentence_transformers.SentenceTransformer(str(out), device="cpu").encode(texts)
    np.testing.assert_allclose(Embedder.load(out).encode(texts), reference, atol=1e-5)


def test_the_commands_pooling_choices_are_the_layers_modes():
    from kbert.layers.pooling import POOLING_MODES
    from kbert.training.options import POOLINGS  # kept apart: options import no Keras

    assert sorted(POOLINGS) == sorted(POOLING_MODES)


def test_a_folder_whose_pipeline_the_task_cannot_train_is_refused(tmp_path):
    """all-MiniLM-L6-v2 given a Dense projection after its pooling: trained, the projection would be dropped from
    what is written, so the folder is refused, naming its modules."""
    import shutil

    from conftest import minilm_dir
    from kbert.embeddings.folders import write_modules
    from kbert.embeddings.modules import Dense

    folder = tmp_path / "minilm_dense"
    shutil.copytree(minilm_dir(), folder)
    write_modules(str(folder), "mean", 384, [Dense([np.eye(384, 8, dtype="float32")])], True, 128)
    pairs = write(tmp_path, "pairs.tsv", "A man is eating food.\tA man eats.\nA dog runs.\tA dog is running.\n")
    run = kbert_in_process("train", "--task", "embed", "--checkpoint", str(folder), "--train", str(pairs),
                           "--out", str(tmp_path / "out"), "--epochs", "1")
    assert run.returncode != 0 and not (tmp_path / "out").exists()
    assert ("modules Pooling, Dense, Normalize after its transformer; kbert train --task embed trains a transformer, "
            "its pooling and Normalize") in run.stderr.replace("\n", " ")
