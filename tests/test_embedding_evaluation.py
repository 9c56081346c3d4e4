"""`kbert evaluate` of an embedding model: the MTEB-style scores against published values and hand counts,
and on the real all-MiniLM-L6-v2."""

import json

import numpy as np
import pytest

from conftest import minilm_dir, write
from kbert.cli.main import main
from kbert.errors import DataError
from kbert.embeddings.ranking_metrics import ranking_scores
from kbert.training.metrics import spearman

SENTENCES = ["A man is eating food.", "A man is riding a horse.", "A woman is playing violin.",
             "Two men pushed carts through the woods.", "A monkey is playing drums.", "The girl is carrying a baby.",
             "A cat sleeps on the sofa.", "The stock market fell sharply today.", "Rain is expected tomorrow.",
             "She is reading a book in the library.", "The chef is cooking pasta.", "Children play football."]


def test_spearman_gives_the_published_value():
    # scipy.stats.spearmanr's documented example.
    assert spearman(np.array([1, 2, 3, 4, 5]), np.array([5, 6, 7, 8, 7])) == pytest.approx(0.8207826816681233)


def test_ranking_scores_count_by_hand():
    scores = ranking_scores([2, 0, 1] + [0] * 97 + [1], {"a": 2, "b": 1, "c": 1, "d": 0})
    ideal = 2 + 1 / np.log2(3) + 1 / np.log2(4)
    assert scores["ndcg@10"] == pytest.approx((2 + 1 / np.log2(4)) / ideal)
    assert (scores["mrr@10"], scores["recall@100"]) == (1.0, pytest.approx(2 / 3))  # the 101st is past 100


@pytest.fixture(scope="module")
def beir(tmp_path_factory):
    """A BEIR folder whose queries are the corpus's own sentences: each must find itself first."""
    root = tmp_path_factory.mktemp("beir")
    write(root, "corpus.jsonl", "".join(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n"
                                        for i, text in enumerate(SENTENCES)))
    write(root, "queries.jsonl", "".join(json.dumps({"_id": f"q{i}", "text": text}) + "\n"
                                         for i, text in enumerate(SENTENCES)))
    (root / "qrels").mkdir()
    write(root / "qrels", "test.tsv", "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n"
                                                                               for i in range(len(SENTENCES))))
    return root


def test_retrieval_of_each_sentence_finds_itself_first(beir, capsys):
    assert main(["evaluate", "--model", str(minilm_dir()), "--data", str(beir), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["kind"] == "retrieval" and (result["queries"], result["documents"]) == (12, 12)
    assert (result["ndcg@10"], result["mrr@10"], result["recall@100"]) == (1.0, 1.0, 1.0)



def test_retrieval_puts_the_models_query_and_document_prompts_before_each():
    """e5's kind of model: queries after its `query` prompt, documents after its `passage` one (the scores equal
    those of the texts written with them), which ranks otherwise than without them."""
    import dataclasses

    from kbert.embeddings.embedder import Embedder
    from kbert.embeddings.evaluation import retrieval

    embedder = Embedder.load(minilm_dir())
    prompted = dataclasses.replace(embedder, prompts={"query": "query: ", "passage": "passage: "})
    corpus = {f"d{i}": text for i, text in enumerate(SENTENCES)}
    queries = {f"q{i}": text for i, text in enumerate(reversed(SENTENCES))}
    judgements = {f"q{i}": {f"d{(3 * i + 1) % len(SENTENCES)}": 1} for i in range(len(SENTENCES))}
    written = retrieval(embedder, {key: "passage: " + text for key, text in corpus.items()},
                        {key: "query: " + text for key, text in queries.items()}, judgements)
    assert retrieval(prompted, corpus, queries, judgements) == written
    assert retrieval(embedder, corpus, queries, judgements) != written

def test_sts_classification_and_clustering_from_the_command(tmp_path, capsys):
    scored = write(tmp_path, "sts.tsv", "A man is eating food.\tA man is eating a meal.\t5\n"
                                        "A man is eating food.\tA man is riding a horse.\t1\n"
                                        "A woman plays violin.\tA woman is playing the violin.\t4.8\n"
                                        "A woman plays violin.\tThe stock market fell.\t0\n")
    assert main(["evaluate", "--model", str(minilm_dir()), "--data", str(scored), "--json"]) == 0
    sts = json.loads(capsys.readouterr().out)
    assert sts["kind"] == "sts" and sts["spearman"] > 0.7
    topics = ["food"] * 3 + ["music"] * 3
    texts = ["The chef is cooking pasta.", "He ate a sandwich.", "Fresh bread from the bakery.",
             "She plays the violin.", "The band played a loud song.", "A pianist gave a concert."]
    labelled = write(tmp_path, "topics.tsv", "".join(f"{text}\t{topic}\n" for text, topic in zip(texts, topics)))
    assert main(["evaluate", "--model", str(minilm_dir()), "--data", str(labelled), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["v_measure"] == pytest.approx(1.0)
    held_out = write(tmp_path, "held_out.tsv", "A cook fried some eggs.\tfood\nThe orchestra tuned up.\tmusic\n"
                                               "We had soup for dinner.\tfood\nHe sang a ballad.\tmusic\n")
    assert main(["evaluate", "--model", str(minilm_dir()), "--data", str(held_out), "--train", str(labelled)]) == 0
    assert "accuracy 1.0000 macro_f1 1.0000 train 6 test 4 (classification)" in capsys.readouterr().out


def test_macro_f1_averages_over_the_labels_the_test_set_or_the_predictions_hold(tmp_path, capsys):
    """Before the fix, a training label absent from both counted as an F1 of 0 (scikit-learn's 1.0 read 0.667)."""
    from kbert.embeddings.embedder import Embedder
    from kbert.embeddings.evaluation import classification

    train = ["The chef is cooking pasta.", "He ate a sandwich.", "Fresh bread from the bakery.",
             "She plays the violin.", "The band played a loud song.", "A pianist gave a concert.",
             "Heavy rain is falling.", "It will be sunny and warm.", "Snow covered the streets."]
    labels = ["food"] * 3 + ["music"] * 3 + ["weather"] * 3
    test = ["A cook fried some eggs.", "The orchestra tuned up.", "We had soup for dinner.", "He sang a ballad."]
    result = classification(Embedder.load(minilm_dir()), train, labels, test, ["food", "music", "food", "music"])
    assert (result["accuracy"], result["macro_f1"]) == (1.0, 1.0)


def test_a_labelled_file_with_a_header_is_clustered_not_read_as_scores(tmp_path, capsys):
    """Before the fix, `text<TAB>label` read `label` as a score ("the score 'food' is not a number")."""
    labelled = write(tmp_path, "topics.tsv", "text\tlabel\nThe chef is cooking pasta.\tfood\nHe ate a sandwich.\tfood\n"
                                             "She plays the violin.\tmusic\nThe band played a loud song.\tmusic\n")
    assert main(["evaluate", "--model", str(minilm_dir()), "--data", str(labelled), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["kind"] == "clustering" and result["v_measure"] == pytest.approx(1.0)


def test_fewer_distinct_texts_than_labels_are_refused_for_clustering(tmp_path, capsys):
    """Before the fix, k-means failed inside NumPy (and held N x k x D arrays on the way)."""
    labelled = write(tmp_path, "topics.tsv", "same text\tfood\nsame text\tmusic\nsame text\tweather\n"
                                             "other text\tfood\n")
    assert main(["evaluate", "--model", str(minilm_dir()), "--data", str(labelled)]) == 2
    assert "2 distinct vectors for 3 labels" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["corpus.jsonl", "queries.jsonl"])
def test_a_beir_id_given_twice_is_named(beir, tmp_path, name):
    """Before the fix, the last row of a repeated _id was kept silently."""
    from kbert.embeddings.evaluation import read_beir

    for file in ("corpus.jsonl", "queries.jsonl"):
        write(tmp_path, file, (beir / file).read_text(encoding="utf-8"))
    write(tmp_path, name, (beir / name).read_text(encoding="utf-8") + json.dumps({"_id": "d0" if name.startswith(
        "corpus") else "q0", "text": "another text"}) + "\n")
    (tmp_path / "qrels").mkdir()
    write(tmp_path / "qrels", "test.tsv", (beir / "qrels" / "test.tsv").read_text(encoding="utf-8"))
    with pytest.raises(DataError, match=rf"{name}, line 13: _id '[dq]0' again \(first on line 1\)"):
        read_beir(str(tmp_path))


@pytest.mark.parametrize("qrels, message", [
    ("query-id\tcorpus-id\tscore\nq0\td99\t1\n", "line 2: document 'd99' is not in the folder's corpus.jsonl"),
    ("query-id\tcorpus-id\tscore\nq0\td0\thigh\n", "line 2: expected query-id<TAB>corpus-id<TAB>score"),
])
def test_a_bad_beir_folder_is_named(beir, tmp_path, qrels, message):
    from kbert.embeddings.evaluation import read_beir

    for name in ("corpus.jsonl", "queries.jsonl"):
        write(tmp_path, name, (beir / name).read_text(encoding="utf-8"))
    (tmp_path / "qrels").mkdir()
    write(tmp_path / "qrels", "test.tsv", qrels)
    with pytest.raises(DataError, match=message):
        read_beir(str(tmp_path))


@pytest.mark.parametrize("file, change, message", [
    ("queries.jsonl", lambda rows: [{**rows[0], "text": "  "}, *rows[1:]],
     r"test.tsv, line 2: query 'q0' is judged, but its text in queries.jsonl is empty"),
    ("corpus.jsonl", lambda rows: [{**rows[0], "title": ["not", "a", "string"]}, *rows[1:]],
     r"corpus.jsonl, line 1: \"title\" \['not', 'a', 'string'\]: expected a string"),
    ("corpus.jsonl", lambda rows: "[" * 100_000 + "]" * 100_000, "corpus.jsonl, line 1: not JSON"),
    ("qrels/test.tsv", lambda rows: "query-id\tcorpus-id\tscore\nq0\td0\t" + "9" * 5000 + "\n",
     "line 2: expected query-id<TAB>corpus-id<TAB>score \\(a whole number of at most 18 digits\\)"),
])
def test_beir_rows_that_would_score_nothing_or_break_the_reader_are_named(beir, tmp_path, file, change, message):
    """Before the fix: an empty judged query was embedded and scored without a word of it (nDCG 0.85 -> 0.71); a
    title that is not a string was a TypeError, a deeply nested line a RecursionError, a score of 5,000 digits a
    ValueError."""
    from kbert.embeddings.evaluation import read_beir

    (tmp_path / "qrels").mkdir()
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        write(tmp_path, name, (beir / name).read_text(encoding="utf-8"))
    if file.endswith(".jsonl"):
        rows = [json.loads(line) for line in (beir / file).read_text(encoding="utf-8").splitlines() if line]
        changed = change(rows)
        write(tmp_path, file, changed if isinstance(changed, str) else "".join(json.dumps(row) + "\n"
                                                                                for row in changed))
    else:
        write(tmp_path, file, change(None))
    with pytest.raises(DataError, match=message):
        read_beir(str(tmp_path))


def test_a_beir_file_with_a_byte_order_mark_is_read(beir, tmp_path):
    from kbert.embeddings.evaluation import read_beir

    (tmp_path / "qrels").mkdir()
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        text = (beir / name).read_text(encoding="utf-8")
        (tmp_path / name).write_text(("\ufeff" if name == "corpus.jsonl" else "") + text, encoding="utf-8")
    assert read_beir(str(tmp_path)) == read_beir(str(beir))

