"""The benchmark scripts run (quick mode); their figures are for people, not assertions on speed. Each run is an
example run, left out unless `pytest --run-examples` (CI runs them)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, shared_path


@pytest.mark.examples
def test_quick_benchmark_writes_every_figure(tmp_path):
    out = tmp_path / "results.json"
    result = subprocess.run([sys.executable, "-m", "benchmarks.run", "--quick", "--no-peers", "--json", str(out)],
                            capture_output=True, text=True, cwd=REPO, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["config"] == "bert_tiny.json" and (results["batch"], results["length"]) == (2, 16)
    assert set(results["inference"]) == {"kbert", "kbert XLA"} and set(results["training"]) == {"kbert"}
    assert set(results["gemm"]["shapes"]) == {"512³", "32×32×32", "32×32×64", "32×64×32"}
    figures = [results["build_s"], results["gemm"]["peak"], results["load"]["load_s"],
               results["load"]["raw_read_s"], results["training"]["kbert"]["examples_per_s"]]
    figures += [row[key] for row in results["inference"].values() for key in ("tokens_per_s", "latency_ms", "mfu")]
    assert all(value > 0 for value in figures)
    assert results["inference"]["kbert"]["ratio_to_kbert"] == {"median": 1.0, "min": 1.0, "max": 1.0}
    # The model's weights, as float32, are what the loaded checkpoint holds.
    assert abs(results["load"]["model_mib"] - 718_730 * 4 / 2**20) < 1e-6
    assert "| kbert XLA |" in result.stdout and "| GEMM float32 512³ |" in result.stdout


def test_alternating_rounds_and_median_ratio():
    from benchmarks.alternating import alternate, median_ratio
    calls = []
    seconds = alternate({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, rounds=3, calls=2)
    assert calls == ["a", "a", "b", "b"] * 3  # in turn, round by round
    assert [len(values) for values in seconds.values()] == [3, 3]
    assert median_ratio([2.0, 6.0, 3.0], [1.0, 2.0, 3.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}


@pytest.mark.examples
def test_quick_input_checks_benchmark():
    result = subprocess.run([sys.executable, "-m", "benchmarks.input_checks", "--quick"],
                            capture_output=True, text=True, cwd=REPO, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| forward pass (with checks) |" in result.stdout and "checks / forward pass: median " in result.stdout


@pytest.mark.examples
def test_training_bucketing_benchmark_runs(tmp_path):
    from conftest import shared_path

    lines = shared_path("data", "sentiment", "sentiment.train.data").read_text(encoding="utf-8").splitlines()
    (tmp_path / "train.data").write_text("\n".join(lines[:256]) + "\n", encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "benchmarks.training_bucketing", "--train", str(tmp_path / "train.data"),
                             "--config", "configs/bert_tiny.json", "--vocab", str(shared_path("vocab", "chinese_vocab.txt")),
                             "--maxlen", "64", "--steps", "2", "--rounds", "1", "--no-peers"],
                            capture_output=True, text=True, cwd=REPO, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line for line in result.stdout.splitlines() if line.startswith("| kbert")]
    assert len(rows) == 2 and "examples/s: median" in result.stdout
    # Bucketed batches pad less than batches in shuffled order.
    padding = [float(row.split("|")[-2]) for row in rows]
    assert 1 <= padding[0] < padding[1]


@pytest.mark.examples
@pytest.mark.parametrize("case, family, kind", [("gpt2_tiny", "gpt2", "gpt2 LM, 6,016 parameters"),
                                                ("t5_11_tiny", "t5.1.1", "t5.1.1 encoder-decoder")])
def test_generation_benchmark_runs_gpt2_and_t5(capsys, case, family, kind):
    from benchmarks import generation

    config = shared_path("fixtures", "bert4keras_families", case, "config.json")
    assert generation.main(["--config", str(config), "--model", family, "--batch", "2", "--source", "4",
                            "--new", "6", "--rounds", "1"]) == 0
    table = capsys.readouterr().out
    assert kind in table
    assert table.strip().splitlines()[-1].endswith("| True |")  # cached and recomputed: the same tokens


@pytest.mark.examples
def test_bert4keras_examples_run_after_migrate_and_after_a_prefix_change():
    """Two of bert4keras's own examples through `kbert migrate` (FGM adversarial training; UniLM seq2seq with
    the Loss layer and AutoRegressiveDecoder), and one with only `bert4keras.` → `kbert.compat.`."""
    shared_path("bert4keras_examples")
    harness = [sys.executable, "benchmarks/bert4keras_examples.py", "--timeout", "400", "--only"]
    migrated = subprocess.run(harness + ["task_iflytek_adversarial_training", "task_seq2seq_autotitle"],
                              capture_output=True, text=True, cwd=REPO, timeout=1200)
    assert "2 of 2 examples ran to completion (migrate)." in migrated.stdout, migrated.stdout[-3000:]
    prefixed = subprocess.run(harness + ["basic_masked_language_model", "--mode", "prefix"],
                              capture_output=True, text=True, cwd=REPO, timeout=1200)
    assert "1 of 1 examples ran to completion (prefix)." in prefixed.stdout, prefixed.stdout[-3000:]


@pytest.mark.examples
def test_packing_benchmark_runs():
    result = subprocess.run([sys.executable, "-m", "benchmarks.packing", "--train",
                             str(shared_path("data", "sentiment", "sentiment.valid.data")), "--config",
                             "configs/bert_tiny.json", "--vocab", str(shared_path("vocab", "chinese_vocab.txt")),
                             "--documents", "64", "--maxlen", "64", "--steps", "2", "--rounds", "1"],
                            capture_output=True, text=True, cwd=REPO, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line.split("|") for line in result.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| --pack")}
    assert set(rows) == {"none", "documents", "stream"} and "documents / none, real tokens/s: median" in result.stdout
    # Documents several a row pad less than one a row.
    assert 1 <= float(rows["documents"][3]) < float(rows["none"][3])


@pytest.mark.examples
def test_reranking_quality_benchmark_runs(tmp_path):
    shared_path("data", "sentiment", "sentiment.test.data")
    out = tmp_path / "results.json"
    result = subprocess.run([sys.executable, "-m", "benchmarks.reranking_quality", "--quick", "--work",
                             str(tmp_path / "work"), "--json", str(out)], capture_output=True, text=True, cwd=REPO,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert set(results) == {"chance (mean of 5 shuffles)", "characters shared (first stage)", "raw backbone, cosine",
                            "reranker, pointwise", "reranker, listwise"}
    assert all(0 < row["ndcg@10"] <= 1 and 0 < row["mrr@10"] <= 1 for row in results.values())
    assert results["reranker, listwise"]["queries"] == 50 and results["reranker, listwise"]["pairs"] == 500
    assert 0 <= results["reranker, pointwise"]["pair accuracy"] <= 1
    assert "reranker, listwise" in result.stdout


@pytest.mark.examples
def test_retrieval_quality_benchmark_runs(tmp_path):
    shared_path("data", "sentiment", "sentiment.test.data")
    out = tmp_path / "results.json"
    result = subprocess.run([sys.executable, "-m", "benchmarks.retrieval_quality", "--work", str(tmp_path / "work"),
                             "--config", "configs/bert_tiny.json", "--pairs", "96", "--test", "48",
                             "--pretrain-epochs", "1", "--maxlen", "32", "--json", str(out)],
                            capture_output=True, text=True, cwd=REPO, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert set(results) == {"dense (in-batch)", "SPLADE", "ColBERT", "BM25 (word pieces)",
                            "hybrid: dense + SPLADE (RRF)"}
    assert all(0 < row["ndcg@10"] <= 1 and 0 < row["recall@100"] <= 1 for row in results.values())
    assert results["SPLADE"]["document_terms"] > 0 and results["ColBERT"]["document_vectors"] > 1
    assert results["BM25 (word pieces)"]["recall@100"] == 1.0  # 48 documents: every one is within 100
    assert "| hybrid: dense + SPLADE (RRF) |" in result.stdout


@pytest.mark.examples
@pytest.mark.parity
def test_long_inputs_benchmark_runs_against_transformers():
    pytest.importorskip("transformers", reason="the parity extra (transformers, torch) is not installed")
    pytest.importorskip("torch", reason="the parity extra (transformers, torch) is not installed")
    result = subprocess.run([sys.executable, "-m", "benchmarks.long_inputs", "--length", "300", "--rounds", "1"],
                            capture_output=True, text=True, cwd=REPO, timeout=900,
                            env={**os.environ, "KERAS_BACKEND": "torch"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "1 x 300 tokens" in result.stdout and "kbert speed / transformers: " in result.stdout
    assert "kbert peak growth / transformers: " in result.stdout


@pytest.mark.examples
@pytest.mark.parity
def test_training_step_benchmark_runs_against_transformers():
    pytest.importorskip("transformers", reason="the parity extra (transformers, torch) is not installed")
    pytest.importorskip("torch", reason="the parity extra (transformers, torch) is not installed")
    result = subprocess.run([sys.executable, "-m", "benchmarks.training_step", "--config", "bert_tiny", "--batch", "2",
                             "--length", "16", "--rounds", "1", "--steps", "1"],
                            capture_output=True, text=True, cwd=REPO, timeout=900,
                            env={**os.environ, "KERAS_BACKEND": "torch"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "bert_tiny, a two-label classifier, AdamW, 2 x 16 tokens" in result.stdout
    assert "kbert speed / transformers': " in result.stdout


@pytest.mark.examples
def test_random_folder_writes_a_sentence_transformers_folder_kbert_embeds_with(tmp_path):
    from kbert.embeddings.embedder import Embedder

    result = subprocess.run([sys.executable, "-m", "benchmarks.random_folder", "--config", "bert_tiny", "--out",
                             str(tmp_path / "tiny")], capture_output=True, text=True, cwd=REPO, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the test texts' tokens: median 41, 90th percentile 113, largest 880" in result.stdout
    vectors = Embedder.load(tmp_path / "tiny").encode(["很好", "不好"])
    assert vectors.shape == (2, 32) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


@pytest.mark.examples
def test_int8_retrieval_benchmark_runs():
    from conftest import minilm_dir

    pytest.importorskip("openvino", reason="OpenVINO's static int8: pip install 'kbert[openvino]'")
    shared_path("data", "sentiment", "sentiment.test.data")
    result = subprocess.run([sys.executable, "-m", "benchmarks.int8_retrieval", "--model", str(minilm_dir()),
                             "--count", "40"], capture_output=True, text=True, cwd=REPO, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.split("|") for line in result.stdout.splitlines() if line.startswith("| ") and "int8" in line]
    assert len(rows) == 2 and all(0 < float(row[2]) <= 1 and 0.9 < float(row[4].split(",")[0]) <= 1 for row in rows)


@pytest.mark.examples
@pytest.mark.parity
def test_cpu_engines_benchmark_runs_against_sentence_transformers():
    from conftest import minilm_dir

    pytest.importorskip("sentence_transformers", reason="the parity extra (sentence-transformers, torch) is not "
                                                        "installed")
    pytest.importorskip("openvino", reason="--runtime openvino: pip install 'kbert[openvino]'")
    result = subprocess.run([sys.executable, "-m", "benchmarks.cpu_engines", "--model", str(minilm_dir()), "--data",
                             str(shared_path("data", "sentiment", "sentiment.test.data")), "--count", "40",
                             "--rounds", "1", "--engines", "kbert defaults", "kbert openvino int8"],
                            capture_output=True, text=True, cwd=REPO, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| st torch float32 | " in result.stdout and "| kbert openvino int8 | " in result.stdout
    defaults = next(line for line in result.stdout.splitlines() if line.startswith("| kbert defaults |"))
    assert defaults.endswith("| 1.00000, 1.00000 |")  # float32 here (KBERT_DTYPE): sentence-transformers' vectors
