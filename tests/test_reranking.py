"""`kbert train --task rerank`: cross-encoders trained on real review pairs, loaded as sentence-transformers'
CrossEncoder loads them, predicted from the command line and served as TEI's `/rerank` and Cohere's
`/v1/rerank`."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import CONFIGS, REPO, minilm_dir, shared_path, write
from kbert.cli.main import main
from kbert.errors import KbertError

QUERY, PASSAGES = "房间很干净", ["服务也很好，下次还来", "这本书的印刷很差", "价格有点贵"]


@pytest.fixture(scope="module")
def reranker_dir(tmp_path_factory):
    """A tiny reranker trained on real reviews: a review's first half and its own second half are relevant
    (1), and another review's second half is not (0)."""
    root = tmp_path_factory.mktemp("rerank")
    reviews = [line.split("\t")[0] for line in shared_path("data", "sentiment", "sentiment.train.data")
               .read_text(encoding="utf-8").splitlines()[:120] if len(line.split("\t")[0]) > 8]
    halves = list({text[:len(text) // 2]: text[len(text) // 2:] for text in reviews}.items())  # distinct queries
    rows = "".join(f"{a}\t{b}\t1\n{a}\t{halves[(i + 5) % len(halves)][1]}\t0\n" for i, (a, b) in enumerate(halves))
    data = write(root, "pairs.tsv", rows)
    out = root / "reranker"
    assert main(["train", "--task", "rerank", "--train", str(data), "--valid", str(data), "--config",
                 str(CONFIGS / "bert_tiny.json"), "--vocab", str(shared_path("vocab", "chinese_vocab.txt")),
                 "--epochs", "2", "--lr", "5e-4", "--batch-size", "16", "--maxlen", "48", "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("text, message", [
    ("好\t很好\t2\n", "line 1: the label 2 is outside 0 to 1"),
    ("好\t很好\t高\n", "line 1: the label '高' is not a number"),
    ("好\t很好\t1\n差\t很好\t1\n", "every pair is relevant; a reranker learns from both"),
])
def test_bad_training_data_is_named(tmp_path, text, message, capsys):
    code = main(["train", "--task", "rerank", "--train", str(write(tmp_path, "pairs.tsv", text)), "--config",
                 str(CONFIGS / "bert_tiny.json"), "--vocab", str(shared_path("vocab", "chinese_vocab.txt")),
                 "--maxlen", "32", "--out", str(tmp_path / "never")])
    assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "never").exists()


def test_a_family_without_a_hugging_face_sequence_classifier_is_refused_by_name(tmp_path, capsys):
    """ALBERT has no sequence classifier kbert writes in Hugging Face's names: the families that have one are
    listed (each family says so itself), before anything is written."""
    rows = "".join(f"好{i}\t很好\t1\n好{i}\t很差\t0\n" for i in range(4))
    code = main(["train", "--task", "rerank", "--train", str(write(tmp_path, "pairs.tsv", rows)), "--config",
                 str(CONFIGS / "albert_tiny_zh.json"), "--model", "albert", "--vocab",
                 str(shared_path("vocab", "chinese_vocab.txt")), "--maxlen", "32", "--out", str(tmp_path / "never")])
    error = capsys.readouterr().err
    assert code == 2 and "got --model albert" in error
    assert ("(kbert builds the sequence classifiers of bert, roberta, hf_roberta, distilbert, mpnet, modernbert, "
            "deberta_v2, jina_embeddings_v3, gte, nomic_bert, eurobert, llama, mistral, qwen2, qwen3, gemma3_text)"
            in error)
    assert not (tmp_path / "never").exists()


def test_a_trained_reranker_ranks_and_predicts(reranker_dir, capsys):
    from kbert.tasks.reranking import Reranker

    state = json.loads((reranker_dir / "training.json").read_text(encoding="utf-8"))
    assert state["task"] == "rerank" and state["history"][-1]["loss"] < state["history"][0]["loss"]
    reranker = Reranker.load(reranker_dir)
    scores = reranker.score(QUERY, PASSAGES)
    assert scores.shape == (3,) and np.all((scores > 0) & (scores < 1))
    ranking = reranker.rank(QUERY, PASSAGES, top_n=2)
    assert [row["index"] for row in ranking] == list(np.argsort(-scores)[:2])
    np.testing.assert_allclose(reranker.score(QUERY, PASSAGES, raw=True), np.log(scores / (1 - scores)), atol=1e-4)
    lines = write(reranker_dir.parent, "input.tsv", "".join(f"{QUERY}\t{passage}\n" for passage in PASSAGES))
    capsys.readouterr()
    assert main(["predict", "--model", str(reranker_dir), str(lines)]) == 0
    assert capsys.readouterr().out.split() == [f"{score:.4f}" for score in scores]


def test_evaluate_reranks_each_querys_passages(reranker_dir, capsys):
    from kbert.tasks.reranking import Reranker, read_judged_pairs

    data = reranker_dir.parent / "pairs.tsv"
    assert main(["evaluate", "--model", str(reranker_dir), "--data", str(data), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    pairs, _ = read_judged_pairs(str(data))
    logits = Reranker.load(reranker_dir).logits([p.query for p in pairs], [p.passage for p in pairs])
    # Each query has its relevant passage (1) then another (0): first place scores 1, second 1/log2(3).
    first = np.mean(logits[0::2] > logits[1::2])
    assert result["queries"] == len(pairs) // 2 and result["kind"] == "reranking"
    assert result["ndcg@10"] == pytest.approx(first + (1 - first) / np.log2(3))
    assert result["mrr@10"] == pytest.approx(first + (1 - first) / 2)
    assert result["accuracy"] == pytest.approx(np.mean((logits > 0) == np.tile([True, False], len(pairs) // 2)))


def test_a_cross_encoder_trained_further_starts_from_its_own_head(reranker_dir, tmp_path):
    """`kbert train --task rerank --checkpoint CROSS_ENCODER`: the folder's pooler and classifier are where training
    starts (they were drawn afresh before): a step too small to move them keeps its logits."""
    from kbert.tasks.reranking import Reranker

    queries, passages = ["今天天气很好", "这家店很差"], ["适合出去走走", "服务态度也不好"]
    rows = "".join(f"{q}\t{p}\t{label}\n" for q, p, label in zip(queries, passages, (1, 0)))
    out = tmp_path / "further"
    assert main(["train", "--task", "rerank", "--checkpoint", str(reranker_dir), "--train",
                 str(write(tmp_path, "pairs.tsv", rows)), "--epochs", "1", "--lr", "1e-9", "--batch-size", "2",
                 "--maxlen", "48", "--out", str(out)]) == 0
    before = Reranker.load(reranker_dir).logits(queries, passages)
    np.testing.assert_allclose(Reranker.load(out).logits(queries, passages), before, atol=1e-4)


def test_a_line_without_its_passage_is_named(reranker_dir, tmp_path, capsys):
    lines = write(tmp_path, "input.tsv", f"{QUERY}\t{PASSAGES[0]}\n{QUERY}\n")
    assert main(["predict", "--model", str(reranker_dir), str(lines)]) == 2
    assert "input.tsv, line 2: expected query<TAB>passage" in capsys.readouterr().err


@pytest.mark.parity
def test_transformers_and_cross_encoder_score_as_kbert(reranker_dir):
    transformers = pytest.importorskip("transformers", reason="a test extra with torch: pip install '.[hf]'")
    import torch

    from kbert.tasks.reranking import Reranker

    reranker = Reranker.load(reranker_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(reranker_dir))
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(reranker_dir)).eval()
    features = tokenizer([QUERY] * 3, PASSAGES, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**features).logits[:, 0].numpy()
    np.testing.assert_allclose(reranker.score(QUERY, PASSAGES, raw=True), logits, atol=1e-4)
    sentence_transformers = pytest.importorskip("sentence_transformers")
    scores = sentence_transformers.CrossEncoder(str(reranker_dir), device="cpu").predict([(QUERY, p) for p in PASSAGES])
    np.testing.assert_allclose(reranker.score(QUERY, PASSAGES), scores, atol=1e-5)


def test_a_classifier_of_several_labels_is_not_a_reranker(tmp_path):
    from kbert.tasks.reranking import Reranker

    write(tmp_path, "config.json", json.dumps({"architectures": ["BertForSequenceClassification"],
                                               "id2label": {"0": "neg", "1": "pos"}}))
    with pytest.raises(KbertError, match="with 2 labels; a reranker is a ...ForSequenceClassification with one"):
        Reranker.load(tmp_path)


# --- serving ---------------------------------------------------------------------------------------

def test_the_server_answers_tei_and_cohere_rerank(reranker_dir):
    pytest.importorskip("fastapi", reason="kbert serve needs FastAPI and uvicorn: pip install 'kbert[serve]'")
    from kbert.tasks.reranking import Reranker
    from test_serve import post, running_server

    def call(url, path, body):
        return post(url, body, path=path)

    scores = Reranker.load(reranker_dir).score(QUERY, PASSAGES)
    best_first = list(np.argsort(-scores, kind="stable"))
    with running_server(reranker_dir) as (url, _):
        status, answer = call(url, "/rerank", {"query": QUERY, "texts": PASSAGES, "return_text": True})
        assert status == 200 and [row["index"] for row in answer] == best_first
        np.testing.assert_allclose([row["score"] for row in answer], scores[best_first], atol=1e-5)
        assert answer[0]["text"] == PASSAGES[best_first[0]]
        status, answer = call(url, "/v1/rerank", {"query": QUERY, "documents": [PASSAGES[0], {"text": PASSAGES[1]},
                                                                                PASSAGES[2]], "top_n": 2})
        assert status == 200 and [row["index"] for row in answer["results"]] == best_first[:2]
        assert answer["usage"]["total_tokens"] > 0
        status, answer = call(url, "/rerank", {"query": QUERY, "texts": ["很" * 100]})
        assert status == 413
        assert "texts[0]: the query and it are 108 tokens, more than the model's 48" in answer["error"]
        status, answer = call(url, "/rerank", {"query": QUERY, "texts": ["很" * 100], "truncate": True})
        assert status == 200  # the pair cut as the offline reranker cuts it, so scored alike
        assert answer[0]["score"] == pytest.approx(float(Reranker.load(reranker_dir).score(QUERY, ["很" * 100])[0]),
                                                   abs=1e-5)
        assert call(url, "/rerank", {"query": " ", "texts": PASSAGES})[0] == 422
        # strict as dimensions is: before, "2" was taken for 2 and "yes" for true
        status, answer = call(url, "/v1/rerank", {"query": QUERY, "documents": PASSAGES, "top_n": "2"})
        assert status == 422 and answer["error"]["message"] == "top_n: Input should be a valid integer"
        status, answer = call(url, "/rerank", {"query": QUERY, "texts": PASSAGES, "raw_scores": "yes"})
        assert status == 422 and "raw_scores: Input should be a valid boolean" in answer["error"]
        status, answer = call(url, "/v1/predict", {"texts": [QUERY], "text_pairs": [PASSAGES[0]]})
        assert status == 200 and answer["predictions"][0]["score"] == pytest.approx(float(scores[0]), abs=1e-5)
        status, answer = call(url, "/v1/predict", {"texts": [QUERY]})
        assert status == 422 and "give each query its passage" in answer["detail"]


def xlm_r_cross_encoder(folder):
    """An XLMRobertaForSequenceClassification of one label: kbert's random XLM-R backbone under `roberta.`, a
    random RobertaClassificationHead (`classifier.dense`, `classifier.out_proj`), the BPE tokenizer of
    conftest's XLM-R folder (on test_embeddings' sentences)."""
    from safetensors.numpy import load_file, save_file

    from conftest import xlm_roberta_embedder_folder
    from test_embeddings import SENTENCES

    xlm_roberta_embedder_folder(folder, SENTENCES)
    backbone = load_file(str(folder / "model.safetensors"))
    rng = np.random.default_rng(0)
    head = {"classifier.dense.weight": rng.normal(0, 0.2, (32, 32)), "classifier.dense.bias": rng.normal(0, 0.2, 32),
            "classifier.out_proj.weight": rng.normal(0, 0.2, (1, 32)), "classifier.out_proj.bias": np.array([0.1])}
    save_file({**{f"roberta.{name}": value for name, value in backbone.items()},
               **{name: value.astype(np.float32) for name, value in head.items()}}, str(folder / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["XLMRobertaForSequenceClassification"],
                                                    "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}))
    return head


def test_an_xlm_r_cross_encoder_scores_with_its_classification_head(tmp_path):
    """RobertaClassificationHead on <s>: tanh(dense), then out_proj; the pairs padded with <pad> (id 1)."""
    from kbert import build_transformer_model, load_hf_weights
    from kbert.tasks.reranking import Reranker

    head = xlm_r_cross_encoder(tmp_path / "xlmr")
    reranker = Reranker.load(tmp_path / "xlmr")
    assert reranker.model.get_layer("Classifier-Hidden") is not None and reranker.maxlen == 64
    queries, passages = ["A man is eating food."] * 3, ["A man is eating a piece of bread.", "A man is eating.",
                                                        "The girl is carrying a baby."]
    logits = reranker.logits(queries, passages)
    backbone = build_transformer_model(tmp_path / "xlmr" / "config.json")
    load_hf_weights(backbone, tmp_path / "xlmr")
    expected = []
    for query, passage in zip(queries, passages):
        ids, segments = reranker.tokenizer.encode(query, passage)
        first = backbone.predict([np.array([ids]), np.array([segments])], verbose=0)[0, 0]
        hidden = np.tanh(first @ head["classifier.dense.weight"].T + head["classifier.dense.bias"])
        expected.append(float(hidden @ head["classifier.out_proj.weight"][0] + head["classifier.out_proj.bias"][0]))
    np.testing.assert_allclose(logits, expected, atol=1e-4)


@pytest.mark.parity
def test_an_xlm_r_cross_encoder_scores_as_transformers_does(tmp_path):
    torch = pytest.importorskip("torch", reason="a test extra with torch: pip install '.[hf]'")
    transformers = pytest.importorskip("transformers", reason="a test extra with torch: pip install '.[hf]'")
    from kbert.tasks.reranking import Reranker

    xlm_r_cross_encoder(tmp_path / "xlmr")
    reference = transformers.AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "xlmr")).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "xlmr"))
    queries, passages = ["A man is eating food."] * 2, ["A man is eating a piece of bread.", "Someone plays."]
    with torch.no_grad():
        expected = reference(**tokenizer(queries, passages, padding=True, return_tensors="pt")).logits[:, 0].numpy()
    np.testing.assert_allclose(Reranker.load(tmp_path / "xlmr").logits(queries, passages), expected, atol=1e-4)


def test_listwise_training_keeps_the_epoch_of_the_best_ndcg(tmp_path, capsys):
    """--rerank-loss listwise: each query's relevant passage against 3 others in a group of 4; the kept epoch
    is the one with the best validation nDCG@10, which kbert evaluate gives again on the written folder."""
    reviews = [line.split("\t")[0] for line in shared_path("data", "sentiment", "sentiment.train.data")
               .read_text(encoding="utf-8").splitlines()[:80] if len(line.split("\t")[0]) > 8]
    halves = list({text[:len(text) // 2]: text[len(text) // 2:] for text in reviews}.items())
    rows = "".join(f"{a}\t{b}\t1\n" + "".join(f"{a}\t{halves[(i + k) % len(halves)][1]}\t0\n" for k in (3, 7, 11))
                   for i, (a, b) in enumerate(halves))
    data = write(tmp_path, "pairs.tsv", rows)
    common = ["train", "--task", "rerank", "--rerank-loss", "listwise", "--train", str(data), "--config",
              str(CONFIGS / "bert_tiny.json"), "--vocab", str(shared_path("vocab", "chinese_vocab.txt")),
              "--maxlen", "48", "--lr", "5e-4"]
    assert main([*common, "--batch-size", "10", "--out", str(tmp_path / "refused")]) == 2
    assert "--batch-size 10 counts pairs, whole groups of --group-size 4 passages" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()
    out = tmp_path / "listwise"
    assert main([*common, "--valid", str(data), "--batch-size", "16", "--epochs", "2", "--out", str(out)]) == 0
    state = json.loads((out / "training.json").read_text(encoding="utf-8"))
    assert state["rerank_loss"] == "listwise" and state["options"]["group_size"] == 4
    # A tiny BERT from random weights barely moves from ln 4 (uniform over a group) in two epochs; that the
    # objective learns is the next test's. Here: what is kept and written is what is scored.
    assert all(abs(epoch["loss"] - np.log(4)) < 0.1 for epoch in state["history"])
    kept = max(epoch["val_ndcg@10"] for epoch in state["history"])
    capsys.readouterr()
    assert main(["evaluate", "--model", str(out), "--data", str(data), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["queries"] == len(halves) and result["ndcg@10"] == pytest.approx(kept, abs=1e-4)


def test_the_listwise_loss_learns_to_put_the_relevant_passage_first():
    """ListwiseSoftmaxLoss on groups of 4 consecutive rows, the first relevant: a linear scorer trained with it
    ranks the relevant row of each group first, which it could not at the start."""
    import keras

    from kbert.training.contrastive import ListwiseSoftmaxLoss

    rng = np.random.default_rng(0)
    features = rng.normal(size=(400, 8)).astype("float32")
    features[0::4, 0] += 4  # the relevant rows stand out along one direction
    labels = np.zeros((400, 1), "float32")
    labels[0::4] = 1
    keras.utils.set_random_seed(0)
    scorer = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    scorer.compile(keras.optimizers.Adam(1e-2), loss=ListwiseSoftmaxLoss(group_size=4))

    def first_place():
        return np.mean(scorer.predict(features, verbose=0).reshape(-1, 4).argmax(1) == 0)

    before = first_place()
    history = scorer.fit(features, labels, batch_size=16, epochs=5, shuffle=False, verbose=0).history["loss"]
    assert history[-1] < history[0] - 0.3 and first_place() > max(0.9, before + 0.2)


@pytest.fixture(scope="module")
def minilm_cross_encoder(tmp_path_factory):
    """A CrossEncoder folder on the real all-MiniLM-L6-v2: its backbone's weights, a pooler and a one-logit head
    from a fixed seed (logits that differ from pair to pair, as a trained head's do)."""
    from benchmarks.reranker_engines import make_folder

    out = tmp_path_factory.mktemp("cross-encoder") / "minilm"
    make_folder(str(out), str(minilm_dir()))
    return out


@pytest.mark.examples  # OpenVINO's export and NNCF's calibration: about 30 s
def test_openvino_serves_a_reranker_in_static_int8_close_to_keras(minilm_cross_encoder, tmp_path):
    """A CrossEncoder's ONNX export through onnxruntime (float32: Keras's logits within 1e-4), and `kbert serve
    --runtime openvino --quantize int8` of it, calibrated on query<TAB>passage lines of
    other reviews: each pair's logit within a tenth of the logits' spread of Keras's float32 (the export's own
    check), the pairs' order nearly the same; a calibration line without its tab refused."""
    pytest.importorskip("openvino", reason="--runtime openvino: pip install 'kbert[openvino]'")
    pytest.importorskip("fastapi", reason="kbert serve needs FastAPI and uvicorn: pip install 'kbert[serve]'")
    from kbert.serving.runtimes import onnx_reranker
    from kbert.tasks.reranking import Reranker
    from test_serve import post, running_server

    texts = [line.split("\t")[0] for line in shared_path("data", "sentiment", "sentiment.valid.data")
             .read_text(encoding="utf-8").splitlines() if len(line.split("\t")[0]) > 8]
    halves = [(text[:len(text) // 2], text[len(text) // 2:]) for text in texts]
    checked, calibration = halves[:32], halves[100:164]
    queries = [query for query, _ in checked for _ in range(2)]
    passages = [passage for i in range(len(checked)) for passage in (checked[i][1], checked[(i + 7) % 32][1])]
    reranker = Reranker.load(minilm_cross_encoder, dtype="float32")
    expected = reranker.logits(queries, passages)
    reranker.model = onnx_reranker(reranker)  # onnxruntime, float32: the same logits
    np.testing.assert_allclose(reranker.logits(queries, passages), expected, atol=1e-4)
    lines = tmp_path / "calibration.tsv"
    lines.write_text("".join(f"{query}\t{passage}\n" for query, passage in calibration), encoding="utf-8")
    with running_server(minilm_cross_encoder, "--runtime", "openvino", "--quantize", "int8", "--calibration",
                        lines) as (url, _):
        status, answer = post(url, {"texts": queries, "text_pairs": passages, "truncate": True})
    assert status == 200, answer
    got = np.array([row["logit"] for row in answer["predictions"]])
    difference, spread = np.abs(got - expected).max(), np.ptp(expected)
    ranks = np.argsort(np.argsort(got)), np.argsort(np.argsort(expected))
    spearman = np.corrcoef(*ranks)[0, 1]
    print(f"largest difference {difference:.4f}, logits spread {spread:.3f}, Spearman {spearman:.4f}")
    assert spread > 0.1 and difference <= 0.1 * max(spread, 1.0)
    assert spearman >= 0.95, spearman

    untabbed = tmp_path / "untabbed.txt"
    untabbed.write_text("".join(f"{query}{passage}\n" for query, passage in calibration), encoding="utf-8")
    refused = subprocess.run([sys.executable, "-m", "kbert", "serve", str(minilm_cross_encoder), "--runtime",
                              "openvino", "--quantize", "int8", "--calibration", str(untabbed), "--port", "0"],
                             capture_output=True, text=True, timeout=300, cwd=str(REPO),
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    assert refused.returncode != 0 and "calibration text 1 has no tab" in refused.stderr
