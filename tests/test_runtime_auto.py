"""`kbert embed --runtime auto`, its default: OpenVINO where it is installed and nothing asks for Keras's own
numbers, its export kept in kbert's cache for the next run (made again where the kept file is damaged); Keras for
`--dtype`, for `KBERT_DTYPE` (the suite's pin) and for a model over the size an automatic export takes on. The real
all-MiniLM-L6-v2 on real reviews (../shared)."""

import json
import logging

import numpy as np
import pytest

from conftest import cosines, minilm_dir
from kbert.cli.main import main
from test_openvino import reviews

pytest.importorskip("openvino", reason="--runtime auto picks OpenVINO: pip install 'kbert[onnx,openvino]'")
pytest.importorskip("tf2onnx", reason="the ONNX export OpenVINO reads: pip install 'kbert[onnx]'")


@pytest.fixture
def embedded(tmp_path, monkeypatch, capsys, caplog):
    """`embedded(*options)`: `kbert embed`'s vectors of 24 real reviews and what it logged, KBERT_DTYPE unset and
    kbert's cache in `tmp_path`."""
    monkeypatch.delenv("KBERT_DTYPE", raising=False)
    monkeypatch.setenv("KBERT_CACHE", str(tmp_path / "cache"))
    caplog.set_level(logging.INFO, logger="kbert")
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(reviews(24)) + "\n", encoding="utf-8")

    def run(*options):
        caplog.clear()
        assert main(["embed", "--model", str(minilm_dir()), str(texts), *options]) == 0
        out = capsys.readouterr().out
        return np.array([json.loads(line)["embedding"] for line in out.splitlines()]), caplog.text

    return run


@pytest.mark.examples  # five runs of the README's kbert embed, two exports by tf2onnx: 89 s of the default suite
def test_the_default_is_openvino_its_export_kept_for_the_next_run(embedded, tmp_path, monkeypatch):
    fast, said = embedded()
    assert "runtime: openvino (auto: OpenVINO is installed, the fastest CPU engine measured" in said
    exact, said = embedded("--dtype", "float32")
    assert "runtime: keras (auto: --dtype float32 asks for Keras's own numbers)" in said
    assert cosines(fast, exact).min() >= 0.999
    kept = list((tmp_path / "cache" / "onnx").glob("*.onnx"))
    assert len(kept) == 1
    again, said = embedded()
    assert f"the model's ONNX export, kept from an earlier run: {kept[0]}" in said
    np.testing.assert_allclose(again, fast, atol=1e-6)
    kept[0].write_bytes(b"not an ONNX file")  # cut short, or another graph's: exported again, and kept again
    mended, said = embedded()
    assert f"{kept[0]}: " in said and "exporting the model again" in said
    np.testing.assert_allclose(mended, fast, atol=1e-6)
    assert kept[0].stat().st_size > 1 << 20
    monkeypatch.setenv("KBERT_DTYPE", "float32")  # the suite's pin: Keras, to the bit
    pinned, said = embedded()
    assert "runtime: keras (auto: KBERT_DTYPE=float32 asks for Keras's own numbers)" in said
    np.testing.assert_array_equal(pinned, exact)


def test_a_model_over_the_size_auto_exports_stays_on_keras(embedded, monkeypatch):
    import kbert.cli.embed

    monkeypatch.setattr(kbert.cli.embed, "AUTO_EXPORT_BYTES", 1 << 20)
    vectors, said = embedded()
    assert "runtime: keras after all (auto: 86 MiB of float32 weights, over the 1 MiB an automatic" in said
    np.testing.assert_array_equal(vectors, embedded("--dtype", "float32")[0])
