"""`--runtime openvino`: the checked ONNX export compiled by OpenVINO, in float32, in bfloat16 where the CPU has the
units, and in static int8 calibrated by NNCF on the user's texts; bad calibration input refused by name. The real
all-MiniLM-L6-v2 on real reviews (../shared)."""

import json

import numpy as np
import pytest

from conftest import cosines, minilm_dir, shared_path
from kbert.cli.main import main
from kbert.errors import DataError

pytest.importorskip("openvino", reason="--runtime openvino: pip install 'kbert[openvino]'")
pytest.importorskip("nncf", reason="OpenVINO's static int8: pip install 'kbert[openvino]'")
pytest.importorskip("tf2onnx", reason="the ONNX export OpenVINO reads: pip install 'kbert[onnx]'")


def reviews(count: int, part: str = "test") -> list:
    """The first `count` real reviews of the sentiment corpus's `part`."""
    with open(shared_path("data", "sentiment", f"sentiment.{part}.data"), encoding="utf-8") as handle:
        return [line.split("\t")[0] for line in handle][:count]


@pytest.fixture(scope="module")
def minilm():
    from kbert.embeddings.embedder import Embedder

    return Embedder.load(minilm_dir(), dtype="float32")


@pytest.mark.examples
def test_openvino_runs_the_export_in_float32_and_bfloat16(minilm, tmp_path):
    """One export, compiled twice: float32 within 1e-4 of Keras, bfloat16 (where the CPU has bfloat16 units; else
    OpenVINO stays float32) within a cosine of 0.999."""
    from kbert.serving.export import export_model
    from kbert.serving.openvino import openvino_runner

    path = tmp_path / "minilm.onnx"
    export_model(str(minilm_dir()), str(path))
    texts = reviews(24)
    expected = minilm.encode(texts)
    for dtype, within in (("float32", 1e-4), ("bfloat16", None)):
        run = openvino_runner(str(path), ("token_ids", "segment_ids"), dtype)
        got = np.concatenate([run(*features) for features in batches(minilm, texts)])
        if within:
            assert run.precision == "float32" and np.abs(got - expected).max() <= within
        else:
            assert run.precision in ("bfloat16", "float32") and cosines(got, expected).min() >= 0.999


def batches(embedder, texts, size: int = 8):
    from kbert.tokenizers import pad_batch

    rows = embedder.prompted_rows(texts)
    return [pad_batch(rows[start:start + size], embedder.tokenizer.pad_id) for start in range(0, len(rows), size)]


@pytest.mark.examples
def test_kbert_embed_in_static_int8_calibrated_on_the_users_texts(minilm, tmp_path, capsys):
    """`--runtime openvino --quantize int8 --calibration FILE`: median cosine with float32 at least 0.98 on texts
    it was not calibrated on (0.986 measured on 1,000 reviews, docs/performance.md)."""
    calibration = tmp_path / "calibration.txt"
    calibration.write_text("\n".join(reviews(64, "valid")) + "\n", encoding="utf-8")
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(reviews(32)) + "\n", encoding="utf-8")
    assert main(["embed", "--model", str(minilm_dir()), str(texts), "--runtime", "openvino", "--quantize", "int8",
                 "--calibration", str(calibration)]) == 0
    vectors = np.array([json.loads(line)["embedding"] for line in capsys.readouterr().out.splitlines()])
    similar = cosines(vectors, minilm.encode(reviews(32)))
    assert np.median(similar) >= 0.98 and similar.min() >= 0.95
    assert np.abs(vectors - minilm.encode(reviews(32))).max() > 1e-3  # int8's rounding: not the float32 model


@pytest.mark.parametrize("content, message", [
    (None, "calibration.txt: cannot read the calibration texts"),
    (b"good\n" * 20 + b"\xba\xc3\n", "calibration.txt, line 21: not UTF-8 text; calibration texts are one UTF-8 "
                                     "text a line"),
    (b"one\n\n  \ntwo\n", "calibration.txt: 2 calibration texts; static int8 needs at least 16 texts like those "
                          "the model will see"),
])
def test_bad_calibration_input_is_refused_by_name_before_the_model_loads(tmp_path, capsys, content, message):
    calibration = tmp_path / "calibration.txt"
    if content is not None:
        calibration.write_bytes(content)
    texts = tmp_path / "texts.txt"
    texts.write_text("a text\n", encoding="utf-8")
    assert main(["embed", "--model", str(minilm_dir()), str(texts), "--runtime", "openvino", "--quantize", "int8",
                 "--calibration", str(calibration)]) == 2
    err = capsys.readouterr().err
    assert message in err and "weights in" not in err  # refused before the model loaded


def test_calibration_options_that_cannot_work_are_refused(tmp_path, capsys):
    from kbert.serving.openvino import calibration_sample

    texts = tmp_path / "texts.txt"
    texts.write_text("a text\nanother\n", encoding="utf-8")
    model = ["--model", str(minilm_dir())]
    assert main(["embed", *model, str(texts), "--runtime", "openvino", "--quantize", "int8"]) == 2
    assert ("the input (no --calibration FILE given): 2 calibration texts; static int8 needs at least 16"
            in capsys.readouterr().err)
    assert main(["embed", *model, str(texts), "--quantize", "int8", "--calibration", str(texts)]) == 2
    assert ("--calibration " + str(texts) + ": the texts OpenVINO's static int8 is calibrated on; give it with "
            "--runtime openvino --quantize int8") in capsys.readouterr().err
    assert main(["serve", str(minilm_dir()), "--runtime", "openvino", "--quantize", "int8"]) == 2
    assert "static int8, calibrated on texts like those the server will see: give --calibration FILE" in \
        capsys.readouterr().err
    assert main(["embed", *model, str(texts), "--runtime", "onnxruntime", "--dtype", "bfloat16"]) == 2
    assert "--runtime onnxruntime with --dtype bfloat16: the ONNX file is made from the float32 model" in \
        capsys.readouterr().err
    long = [f"text {number}" for number in range(1000)]
    sample = calibration_sample(long, "x")
    assert len(sample) == 300 and sample[0] == "text 0" and sample[-1] == "text 999"  # evenly, ends included
    with pytest.raises(DataError, match="x: 15 calibration texts"):
        calibration_sample(long[:15], "x")
