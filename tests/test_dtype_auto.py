"""`--dtype auto`, every inference command's default: bfloat16 where the CPU has bfloat16 matrix units (AMX) and a
bfloat16 product measures faster on the Keras backend, float32 elsewhere; the choice logged, in `/info` and in
`/metrics`. The CPU's flags and the probe are replaced here (this project's machines have no AMX); the bfloat16
numbers are the real model's."""

import argparse
import json
import logging
import math

import numpy as np
import pytest

from conftest import minilm_dir
from kbert.cli.main import main
from kbert.errors import KbertError
from kbert.training import precision
from kbert.training.precision import auto_dtype, choose_dtype

SAPPHIRE_RAPIDS = ["avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_int8", "amx_bf16"]
EPYC = ["avx512f", "avx512_bf16", "avx512_vnni"]  # bfloat16 dot products, no matrix units
TEXTS = ["A man is eating food.", "The girl is carrying a baby.", "房间干净，服务热情"]


@pytest.fixture
def machine(monkeypatch):
    """`machine(flags, speedup)`: the CPU's flags and the bfloat16 probe's ratio `auto` sees; KBERT_DTYPE (the
    suite's float32) unset."""
    monkeypatch.delenv("KBERT_DTYPE", raising=False)

    def having(flags, speedup=3.0):
        monkeypatch.setattr(precision, "cpu_flags", lambda: list(flags))
        monkeypatch.setattr(precision, "bf16_matmul_speedup", lambda backend: speedup)

    return having


@pytest.mark.parametrize("flags, speedup, dtype, reason", [
    (SAPPHIRE_RAPIDS, 3.0, "bfloat16", "auto: amx_bf16, a bfloat16 product ran 3.0x float32's"),
    (SAPPHIRE_RAPIDS, 1.1, "float32", "auto: amx_bf16, but a bfloat16 product ran 1.10x float32's"),
    (EPYC, 3.0, "float32", "auto: no bfloat16 matrix units (amx_bf16) on this CPU"),
    ([], 3.0, "float32", "auto: no bfloat16 matrix units (amx_bf16) on this CPU"),  # /proc/cpuinfo unreadable
])
def test_auto_picks_bfloat16_only_with_amx_and_a_faster_product(machine, flags, speedup, dtype, reason):
    machine(flags, speedup)
    choice = choose_dtype("auto")
    assert (choice.dtype, choice.reason) == (dtype, reason)
    assert auto_dtype(flags, lambda: speedup) == choice


def test_a_dtype_named_wins_and_kbert_dtype_is_read_for_auto(machine, monkeypatch):
    machine(SAPPHIRE_RAPIDS, 3.0)
    assert choose_dtype("float32").dtype == "float32"
    monkeypatch.setenv("KBERT_DTYPE", "float32")
    assert str(choose_dtype("auto")) == "float32 (KBERT_DTYPE=float32)"
    assert choose_dtype("bfloat16").dtype == "bfloat16"  # the option over the variable
    monkeypatch.setenv("KBERT_DTYPE", "fp16")
    with pytest.raises(KbertError, match=r"KBERT_DTYPE=fp16: expected float32 or bfloat16 \(or leave it unset"):
        choose_dtype("auto")
    with pytest.raises(KbertError, match="--dtype half: expected one of auto, float32, bfloat16"):
        choose_dtype("half")


def test_the_probe_times_a_real_product_once_a_process():
    precision.bf16_matmul_speedup.cache_clear()
    ratio = precision.bf16_matmul_speedup("tensorflow", repeats=2)
    assert math.isfinite(ratio) and ratio > 0
    assert precision.bf16_matmul_speedup("tensorflow", repeats=2) == ratio  # cached: measured once
    assert precision.bf16_matmul_speedup.cache_info().hits == 1


def embedded(capsys, texts, *options) -> np.ndarray:
    """`kbert embed`'s vectors of the all-MiniLM-L6-v2 for the lines of `texts`."""
    assert main(["embed", "--model", str(minilm_dir()), str(texts), *options]) == 0
    return np.array([json.loads(line)["embedding"] for line in capsys.readouterr().out.splitlines()])


def test_kbert_embed_on_keras_runs_in_bfloat16_by_default_on_an_amx_cpu_and_says_so(machine, tmp_path, capsys,
                                                                                     caplog):
    """`--runtime keras` (auto picks OpenVINO where it is installed: tests/test_runtime_auto.py)."""
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    caplog.set_level(logging.INFO, logger="kbert")
    machine(EPYC)
    exact = embedded(capsys, texts, "--runtime", "keras")
    assert "weights in float32 (auto: no bfloat16 matrix units (amx_bf16) on this CPU)" in caplog.text
    np.testing.assert_array_equal(exact, embedded(capsys, texts, "--dtype", "float32"))
    machine(SAPPHIRE_RAPIDS, 3.0)
    half = embedded(capsys, texts, "--runtime", "keras")
    assert "weights in bfloat16 (auto: amx_bf16, a bfloat16 product ran 3.0x float32's)" in caplog.text
    cosine = (half * exact).sum(1) / np.linalg.norm(half, axis=1) / np.linalg.norm(exact, axis=1)
    assert cosine.min() >= 0.999 and np.abs(half - exact).max() > 1e-5  # bfloat16's rounding, within the bound
    # onnxruntime runs the float32 export: auto keeps float32 there
    assert precision.choose_dtype("auto").dtype == "bfloat16"
    from kbert.cli.main import _weight_dtype
    args = argparse.Namespace(dtype="auto", mixed_precision=None, runtime="onnxruntime", quantize=None)
    assert str(_weight_dtype(args)) == "float32 (onnxruntime runs the model's export, made from float32)"
    args = argparse.Namespace(dtype="auto", mixed_precision="bf16", runtime="keras", quantize=None)
    assert str(_weight_dtype(args)) == "float32 (auto: --mixed-precision bf16)"


def test_the_python_api_chooses_too_and_the_cli_policy_stands(machine):
    from kbert.embeddings.embedder import Embedder
    from kbert.tasks.predictors import PredictionSettings, load_predictor
    from kbert.training.precision import precision_policy

    machine(SAPPHIRE_RAPIDS, 3.0)
    assert {weight.dtype for weight in Embedder.load(minilm_dir()).backbone.weights} == {"bfloat16"}
    assert {weight.dtype for weight in Embedder.load(minilm_dir(), dtype="float32").backbone.weights} == {"float32"}
    with precision_policy(None, "float32"):  # what the CLI's --dtype float32 sets: auto inside keeps it
        assert {weight.dtype for weight in Embedder.load(minilm_dir()).backbone.weights} == {"float32"}
    predictor = load_predictor(minilm_dir(), PredictionSettings(dtype="auto"))
    assert str(predictor.dtype) == "bfloat16 (auto: amx_bf16, a bfloat16 product ran 3.0x float32's)"
    machine(EPYC)
    assert load_predictor(minilm_dir()).dtype.dtype == "float32"


def test_the_server_shows_the_dtype_and_why_in_info_and_metrics(machine):
    from starlette.testclient import TestClient

    from kbert.serving.app import create_app
    from kbert.tasks.predictors import load_predictor

    machine(SAPPHIRE_RAPIDS, 2.5)
    with TestClient(create_app(load_predictor(minilm_dir()))) as client:
        info = client.get("/info").json()
        metrics = client.get("/metrics").text
    assert (info["dtype"], info["dtype_reason"]) == ("bfloat16", "auto: amx_bf16, a bfloat16 product ran 2.5x "
                                                                   "float32's")
    assert ('kbert_model_info{dtype="bfloat16",dtype_reason="auto: amx_bf16, a bfloat16 product ran 2.5x '
            'float32\'s",task="embed"} 1.0') in metrics
