"""`--runtime openvino`: a model's checked ONNX export compiled by OpenVINO for the CPU, and `--quantize int8` there:
OpenVINO's static int8 (activations and weights), calibrated by NNCF on texts like those the model will see.

OpenVINO reads the ONNX file kbert's export writes (`kbert.serving.export`) and picks its own kernels for the CPU:
bfloat16 where the CPU has bfloat16 units (its `INFERENCE_PRECISION_HINT`), which `--dtype auto` leaves to it;
`--dtype float32` and `bfloat16` set the hint. Static int8 needs the activations' ranges: NNCF
(`nncf.quantize`, its transformer preset with SmoothQuant) runs the model on the calibration texts and records
them. Measured on all-MiniLM-L6-v2 (docs/performance.md): OpenVINO's bfloat16 vectors within a cosine of 0.9999
of float32's, its int8 0.986 (median), against onnxruntime's dynamic int8 0.985.
"""

from __future__ import annotations

import contextlib
import io
import logging
from typing import List, Optional, Sequence

import numpy as np

from kbert.errors import DataError, KbertError

# How many calibration texts static int8 needs at least (fewer give ranges of a few texts' activations, which
# clip the next text's), and at most uses (NNCF's statistics cost two passes over each: 256 texts of Chinese
# reviews took 31 s on MiniLM on two cores); a longer file is sampled evenly.
MIN_CALIBRATION_TEXTS = 16
MAX_CALIBRATION_TEXTS = 300
PRECISION_HINTS = {"float32": "f32", "bfloat16": "bf16"}  # --dtype: OpenVINO's inference precision


def require_openvino(option: str = "--runtime openvino", quantize: bool = False) -> None:
    """Refuses `option` where OpenVINO (and to `quantize`, NNCF, its quantizer) is not installed, saying what to
    install."""
    for module in ("openvino", "nncf") if quantize else ("openvino",):
        try:
            __import__(module)
        except ImportError:
            raise KbertError(f"{option} needs {module}: pip install 'kbert[openvino]' (openvino, nncf)") from None


def read_calibration_texts(path: str) -> List[str]:
    """The texts of a calibration file (one a line, UTF-8; blank lines skipped), at most `MAX_CALIBRATION_TEXTS`
    of them sampled evenly; refused, naming the file, when it cannot be read or holds fewer than
    `MIN_CALIBRATION_TEXTS`."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise DataError(f"{path}: cannot read the calibration texts ({error.strerror or error})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise DataError(f"{path}, line {line}: not UTF-8 text; calibration texts are one UTF-8 text a line") from None
    return calibration_sample([line for line in text.splitlines() if line.strip()], path)


def calibration_sample(texts: Sequence[str], source: str) -> List[str]:
    """At most `MAX_CALIBRATION_TEXTS` of `texts`, evenly spaced (a file sorted by anything is still covered);
    fewer than `MIN_CALIBRATION_TEXTS` refused, naming `source`."""
    if len(texts) < MIN_CALIBRATION_TEXTS:
        raise DataError(f"{source}: {len(texts)} calibration text{'s' if len(texts) != 1 else ''}; static int8 "
                        f"needs at least {MIN_CALIBRATION_TEXTS} texts like those the model will see, one a line "
                        "(--calibration FILE)")
    if len(texts) <= MAX_CALIBRATION_TEXTS:
        return list(texts)
    picked = np.linspace(0, len(texts) - 1, MAX_CALIBRATION_TEXTS).round().astype(int)
    return [texts[index] for index in picked]


def openvino_runner(path: str, inputs: Sequence[str], dtype: str = "auto", calibration: Optional[list] = None,
                    threads: Optional[int] = None) -> "OpenVinoRunner":
    """The ONNX file at `path` compiled by OpenVINO for the CPU: a function of its int32 inputs (in `inputs`' order)
    giving its first output. `dtype`: `auto` (OpenVINO's precision for this CPU), `float32` or `bfloat16`;
    `calibration`: rows of features (`(token_ids, segment_ids, ...)`, one a text) for static int8, None for none."""
    import openvino

    core = openvino.Core()
    model = core.read_model(path)
    if calibration is not None:
        model = _static_int8(model, inputs, calibration)
    config = {"INFERENCE_PRECISION_HINT": PRECISION_HINTS[dtype]} if dtype in PRECISION_HINTS else {}
    if threads:
        config["INFERENCE_NUM_THREADS"] = threads
    return OpenVinoRunner(core.compile_model(model, "CPU", config), inputs, calibration is not None)


class OpenVinoRunner:
    """A compiled OpenVINO model called as kbert's ONNX runners are (`run(*features)`), with the precision it runs
    in (`precision`: `float32`, `bfloat16`, or `int8` with the rest in either)."""

    def __init__(self, compiled, inputs: Sequence[str], int8: bool):
        self.compiled, self.inputs = compiled, list(inputs)
        hint = str(compiled.get_property("INFERENCE_PRECISION_HINT"))
        floats = "bfloat16" if "bf16" in hint or "bfloat16" in hint else "float32"
        self.precision = f"int8 ({floats} elsewhere)" if int8 else floats
        self.lossy = int8 or floats == "bfloat16"

    def __call__(self, *features) -> np.ndarray:
        feed = {name: np.asarray(feature, dtype=np.int32) for name, feature in zip(self.inputs, features)}
        return self.compiled(feed)[0]


def _static_int8(model, inputs: Sequence[str], rows: list):
    """`model` with int8 weights and activations, its activations' ranges measured on `rows` (a text each, unpadded,
    so that the ranges are real tokens')."""
    import nncf

    def feed(row) -> dict:
        return {name: np.asarray([feature], dtype=np.int32) for name, feature in zip(inputs, row)}

    with _nncf_quiet():
        return nncf.quantize(model, nncf.Dataset(rows, feed), model_type=nncf.ModelType.TRANSFORMER,
                             subset_size=len(rows))


@contextlib.contextmanager
def _nncf_quiet():
    """NNCF's progress bars and notes kept off standard output (`kbert embed` writes its vectors there)."""
    import nncf

    nncf.set_log_level(logging.ERROR)
    with contextlib.redirect_stdout(io.StringIO()):
        yield

