"""A model's checked ONNX export run in place of its Keras model: `--runtime onnxruntime`, `--runtime openvino`,
`--quantize int8` (`kbert embed`, `kbert predict`, `kbert serve`), and `kbert embed`'s default `--runtime auto`
where OpenVINO is installed.

The file is made as `kbert export` makes it (`kbert.serving.export`) and checked against Keras; what the
runtime computes from it is checked again. The float32 export is kept in kbert's cache under a hash of
what it depends on (`_fingerprint`), so a model's later runs skip tf2onnx's conversion.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.metadata
import json
import logging
import os
import re
import tempfile
from typing import Optional, Sequence

import keras
import numpy as np

from kbert.errors import KbertError, first_line
from kbert.io import atomic_copy
from kbert.serving.export import (Endpoint, check_export, classifier_endpoint, embedder_endpoint, export_metadata,
                                  onnx_runner, require_tensorflow_backend, reranker_endpoint, write_onnx)

logger = logging.getLogger("kbert")

EXPORT_CACHE = "onnx"  # under kbert's cache (`kbert.hub.sources.cache_root`): the float32 exports runtimes ran
CHECKED_CALIBRATION_TEXTS = 16  # OpenVINO's static int8 is checked on this many of its calibration texts


@dataclasses.dataclass(frozen=True)
class Runtime:
    """What runs a model's ONNX export in place of Keras (`--runtime`, `--quantize`, `--dtype`, `--calibration`).

    Args:
        name: `onnxruntime` or `openvino` (`kbert.serving.openvino`).
        quantize: None (float32), or `int8`: onnxruntime's dynamic quantization (int8 weights, activations
            quantized on the fly), OpenVINO's static (activations' ranges calibrated on `calibration`).
        dtype: OpenVINO's precision: `auto` (its own for the CPU: bfloat16 where the CPU has bfloat16 units),
            `float32` or `bfloat16`; onnxruntime runs the float32 file.
        calibration: the texts static int8 is calibrated on (`kbert.serving.openvino.read_calibration_texts`).
    """

    name: str = "onnxruntime"
    quantize: Optional[str] = None
    dtype: str = "auto"
    calibration: Optional[Sequence[str]] = None

    @property
    def static_int8(self) -> bool:
        """Whether this is OpenVINO's static int8, which needs calibration texts."""
        return self.name == "openvino" and bool(self.quantize)

    def __str__(self) -> str:
        if self.name == "openvino":
            return f"OpenVINO ({'static int8' if self.quantize else self.dtype})"
        return f"onnxruntime ({'int8' if self.quantize else 'float32'})"


class OnnxModel:
    """A model's ONNX export run by onnxruntime or OpenVINO, answering Keras's `predict_on_batch`: what `kbert
    serve --runtime onnxruntime` (float32), `--runtime openvino` and `--quantize int8` put in place of a
    classifier's or an embedding model's Keras model. The file is made, and checked against Keras, as `kbert
    export` makes it (float32 within 1e-4); what the runtime computes from it is checked again (bfloat16 and int8
    within the bounds of `check_export`). onnxruntime's calls cost little beyond their compute, where
    TensorFlow's graph costs several milliseconds a call: the small batches a server forms run about twice as fast
    (docs/deployment.md).

    Args:
        endpoint: what to export (`onnx_classifier`, `onnx_embedder`), its Keras model still in place.
        runtime: which runtime, in which precision (`Runtime`; None: onnxruntime in float32).
        threads: the runtime's threads a call (None: its default, every core); a server running several
            batches at once gives each a share (`kbert.serving.instances`).
    """

    def __init__(self, endpoint: Endpoint, runtime: Optional[Runtime] = None, threads: Optional[int] = None):
        runtime = runtime or Runtime()
        require_tensorflow_backend("--quantize int8" if runtime.quantize else f"--runtime {runtime.name}",
                                   instead=", or without the option")
        self.outputs = endpoint.model.outputs  # the output's shape, for those who read it off the model
        self.runtime = runtime
        with tempfile.TemporaryDirectory(prefix="kbert-onnx-") as directory:
            if runtime.name == "openvino":
                self.run = _openvino_run(endpoint, runtime, os.path.join(directory, "model.onnx"), threads)
                self.precision = self.run.precision
                logger.info("OpenVINO runs the model's export in %s", self.precision)
                return
            path = os.path.join(directory, "model.int8.onnx" if runtime.quantize else "model.onnx")
            write_onnx(endpoint, path, quantize=runtime.quantize)
            self.run = onnx_runner(path, threads)  # onnxruntime holds the model in memory: the file may go
            self.precision = runtime.quantize or "float32"

    def predict_on_batch(self, features) -> np.ndarray:
        return self.run(*(np.asarray(feature, dtype=np.int32) for feature in features))


def _openvino_run(endpoint: Endpoint, runtime: Runtime, path: str, threads: Optional[int]):
    """The float32 export at `path` (checked against Keras) compiled by OpenVINO, calibrated to static int8 on
    `runtime.calibration` where it quantizes, then checked against Keras as what it runs is."""
    from kbert.serving.openvino import openvino_runner, require_openvino

    require_openvino("--quantize int8 with --runtime openvino" if runtime.quantize else "--runtime openvino",
                     quantize=bool(runtime.quantize))
    if runtime.static_int8 and not runtime.calibration:
        raise KbertError("--quantize int8 with --runtime openvino is static int8: it needs calibration texts "
                         "(--calibration FILE, one text a line)")
    path = _float32_export(endpoint, path)
    rows = endpoint.encode(list(runtime.calibration)) if runtime.quantize else None
    run = openvino_runner(path, endpoint.inputs, runtime.dtype, rows, threads)
    # static int8 is checked on texts of the kind it was calibrated for (its ranges fit them, not any text)
    checked = rows[::max(1, len(rows) // CHECKED_CALIBRATION_TEXTS)] if rows else None
    check_export(endpoint, run, "OpenVINO", "int8" if runtime.quantize else "bfloat16" if run.lossy else None,
                 checked)
    return run


def _float32_export(endpoint: Endpoint, path: str) -> str:
    """The endpoint's float32 ONNX file, checked against Keras: the copy kept in kbert's cache where an earlier run
    exported this model (`_fingerprint`), else exported to `path` and a copy kept. tf2onnx's conversion is most of
    a runtime's start (`kbert embed` of 40 texts on MiniLM: 26.6 s with the conversion, 8.4 s with a kept file,
    docs/performance.md); compiling the file is not. A kept copy that fails the check (cut short, or from
    another graph) is removed and the model exported again."""
    from kbert.hub.sources import cache_root

    kept = os.path.join(cache_root(), EXPORT_CACHE, _fingerprint(endpoint) + ".onnx")
    if os.path.isfile(kept):
        try:
            check_export(endpoint, onnx_runner(kept), "ONNX", None)
            logger.info("the model's ONNX export, kept from an earlier run: %s", kept)
            return kept
        except Exception as error:  # onnxruntime's own errors on a damaged file, or KbertError's difference
            logger.warning("%s: %s; exporting the model again", kept, first_line(str(error)))
            with contextlib.suppress(FileNotFoundError):  # another run's check removed it first
                os.remove(kept)
    write_onnx(endpoint, path, quantize=None)
    try:
        atomic_copy(path, kept)
    except OSError as error:  # a read-only cache: each run exports anew
        logger.warning("the ONNX export could not be kept in %s (%s): the next run exports again",
                       os.path.dirname(kept), error.strerror or error)
    return path


def _fingerprint(endpoint: Endpoint) -> str:
    """What the export of `endpoint` depends on, hashed: the model's graph (its Keras config, less the numbers
    Keras appends to an operation's name, which count the models built before it in the process), every weight,
    the inputs, output and metadata, and the versions of kbert, Keras and tf2onnx that trace and convert it."""
    import tf2onnx

    graph = re.sub(r'_\d+(?=")', "", endpoint.model.to_json())
    digest = hashlib.blake2b(digest_size=20)
    for part in (_kbert_version(), keras.__version__, tf2onnx.__version__, endpoint.output, endpoint.inputs,
                 json.dumps(export_metadata(endpoint), sort_keys=True, default=str), graph):
        digest.update(repr(part).encode("utf-8"))
    for weight in endpoint.model.weights:
        value = np.ascontiguousarray(keras.ops.convert_to_numpy(weight))
        digest.update(f"{weight.path} {value.shape} {value.dtype}".encode("utf-8"))
        digest.update(value.data)
    return digest.hexdigest()


def _kbert_version() -> str:
    """The installed kbert's version (a checkout run from its folder without installing has none)."""
    try:
        return importlib.metadata.version("kbert")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def onnx_classifier(classifier, runtime: Optional[Runtime] = None, threads: Optional[int] = None) -> OnnxModel:
    """A loaded classifier's (`kbert.tasks.classification.load_classifier`) ONNX model."""
    return OnnxModel(classifier_endpoint(classifier), runtime, threads)


def onnx_embedder(embedder, runtime: Optional[Runtime] = None, threads: Optional[int] = None) -> OnnxModel:
    """A loaded embedding model's (`kbert.embeddings.embedder.Embedder`) ONNX model: its vectors, a multi-vector
    encoder's token vectors, or bge-m3's sparse head's token weights (pooled into the vocabulary after it, as
    after the Keras model)."""
    return OnnxModel(embedder_endpoint(embedder), runtime, threads)


def onnx_reranker(reranker, runtime: Optional[Runtime] = None, threads: Optional[int] = None) -> OnnxModel:
    """A loaded cross-encoder's (`kbert.tasks.reranking.Reranker`) ONNX model: its relevance logits."""
    return OnnxModel(reranker_endpoint(reranker), runtime, threads)


EXPORTED_TASKS = ("classify", "embed", "rerank")  # the tasks whose model an ONNX file holds


def check_exported_task(task: str, runtime: Optional[Runtime], model: str, option: str) -> None:
    """Refuses `runtime` for a task whose model is not exported (a tagger's, a generator's), naming the
    option (`--runtime NAME` or `--quantize int8`) and the model."""
    if runtime is not None and task not in EXPORTED_TASKS:
        raise KbertError(f"{option} runs classifiers, embedding models and rerankers (an ONNX file); {model} is a "
                         f"{task} model: run it without {option}")


def onnx_predictor(folder, task: str, settings, runtime: Runtime, threads: Optional[int] = None):
    """A classifier's, an embedding model's or a reranker's predictor (`kbert.tasks.predictors`) whose model is
    its ONNX export run by `runtime` (`OnnxModel`), made from the float32 Keras model, which it then replaces: what
    `kbert serve` and `kbert predict` run with `--runtime` or `--quantize`. The predictor's `dtype` is the
    precision the runtime runs in (the task checked by `check_exported_task`)."""
    from kbert.embeddings.embedder import Embedder
    from kbert.tasks.classification import load_classifier
    from kbert.tasks.predictors import classifier_predictor, embedding_predictor, reranker_predictor
    from kbert.tasks.reranking import Reranker
    from kbert.training.precision import DtypeChoice

    if task == "rerank":
        reranker = Reranker.load(folder, dtype="float32")
        model = reranker.model = onnx_reranker(reranker, runtime, threads)
        predictor = reranker_predictor(folder, settings, reranker)
    elif task == "embed":
        embedder = Embedder.load(folder, adapter=settings.adapter, head=settings.head, dtype="float32")
        model = embedder.model = onnx_embedder(embedder, runtime, threads)
        predictor = embedding_predictor(folder, settings, embedder)
    else:
        classifier = load_classifier(folder)
        model = classifier.model = onnx_classifier(classifier, runtime, threads)
        predictor = classifier_predictor(classifier, folder.path, settings)
    predictor.dtype = DtypeChoice(model.precision, f"{runtime} runs the model's ONNX export")
    return predictor
