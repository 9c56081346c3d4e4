"""What every `kbert export` to ONNX shares: the conversion through tf2onnx, and the report of a written file."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import json
import logging
import os
import shutil
import tempfile
from typing import Dict, Iterator, Optional, Set

import numpy as np

from kbert.errors import KbertError, first_line
from kbert.io import atomic_copy
from kbert.serving.onnx_graph import fuse_for_onnxruntime

ONNX_OPSET = 17
FLOAT_TOLERANCE = 1e-4  # an exported file's outputs against Keras's, float32
# int8 files against Keras's float32: the top label the same on every sample text and each probability within
# 0.1; decoded tags (or a CRF's best tag per position) differing at no more than 5% of positions; seq2seq's
# greedy decoding with the same first tokens and no more than 10% of its tokens changed (a near tie of a weak
# model may flip).
INT8_PROBABILITY_TOLERANCE = 0.1
# An embedding model's int8 vectors (weights quantized per channel) against its float32 ones: each pair's cosine
# at least this, on SAMPLE_TEXTS and EMBEDDING_SAMPLE_TEXTS. all-MiniLM-L6-v2 gave 0.993-0.995 on English, 0.966
# on a Chinese text its English vocabulary reads as [UNK]s (per tensor: 0.96-0.97 and 0.87).
INT8_COSINE = 0.95
BF16_COSINE = 0.999  # OpenVINO's bfloat16 vectors against Keras's float32 ones (0.9999 on all-MiniLM-L6-v2)
EMBEDDING_SAMPLE_TEXTS = ("A man is eating food.", "The girl is carrying a baby.")
INT8_TAG_SHARE = 0.05
# A reranker's int8 and bfloat16 logits against its float32 ones: each within this share of the sample pairs'
# spread of logits (at least 1), so that no pair moves past another by more than a tenth of the range it is
# ranked in.
RERANK_LOGIT_SHARE = 0.1
INT8_TOKEN_SHARE = 0.1
SAMPLE_TEXTS = ("国务院总理李鹏在北京会见了日本客人", "房间干净，服务热情", "好")  # what each export is checked on
_converters_registered = False


@dataclasses.dataclass
class ExportReport:
    """What `export_model` wrote: the path, the format, and for ONNX the largest difference from Keras."""

    path: str
    format: str
    quantized: Optional[str] = None
    max_difference: Optional[float] = None
    runtime: str = "onnxruntime"
    companion: Optional[str] = None  # a second file the export needs beside `path` (a T5's encoder)

    def __str__(self) -> str:
        text = f"exported {self.path} ({self.format}{', ' + self.quantized if self.quantized else ''})"
        if self.companion:
            text += f" and {self.companion}"
        if self.max_difference is not None:
            text += f"; {self.runtime} against Keras on {len(SAMPLE_TEXTS)} texts: largest difference " \
                    f"{self.max_difference:.2e}"
        return text


_STAGING: Set[str] = set()  # the staging folders in use, for `remove_staging`


@contextlib.contextmanager
def export_staging() -> Iterator[str]:
    """A folder for an export's files until they are checked, in the system's temporary folder: an export that
    is killed leaves nothing beside its output (its files reach the output by `publish`)."""
    with tempfile.TemporaryDirectory(prefix="kbert-export-") as staging:
        _STAGING.add(staging)
        try:
            yield staging
        finally:
            _STAGING.discard(staging)


def remove_staging() -> None:
    """Removes the staging folders in use: what a SIGTERM handler does before the process exits at once."""
    for path in list(_STAGING):
        shutil.rmtree(path, ignore_errors=True)


def publish(files: Dict[str, str]) -> None:
    """Copies each checked file `{staged: output}` to its output, each atomically and all or none: outputs go in
    the order given (the main file last), and on a failure those already written are removed."""
    written = []
    try:
        for staged, out in files.items():
            atomic_copy(staged, out)
            written.append(out)
    except BaseException:
        for out in written:
            os.remove(out)
        raise


def refuse_existing(*paths: str) -> None:
    """An export never replaces a file: each of `paths` (the output and the files written beside it) must be new."""
    for path in paths:
        if os.path.lexists(path):
            raise KbertError(f"{path}: already exists; choose a new path (an export never replaces a file, nor one "
                             "of the files it writes beside it)")


def convert_to_onnx(function, signature, metadata: dict, staging: str, quantize: Optional[str], what: str,
                    instead: str = "export it as a SavedModel or a .keras file instead",
                    per_channel: bool = False) -> str:
    """A `tf.function` as an ONNX file in `staging` (int8 with `quantize`; `per_channel`: a scale per output
    channel of each weight, not one per tensor), with `metadata`; its path.
    Where tf2onnx cannot convert it, the error names `what` model and says what to do `instead`."""
    try:
        import onnx
        import onnxruntime  # noqa: F401  (each caller runs the file before keeping it)
        import tf2onnx
    except ImportError as error:
        raise KbertError(f"ONNX export needs {error.name}: pip install 'kbert[onnx]' (tf2onnx, onnx, "
                         "onnxruntime)") from None
    _register_missing_converters()
    logging.getLogger("tf2onnx").setLevel(logging.WARNING)  # its optimizer's counts of rewritten nodes
    path = os.path.join(staging, "model.onnx")
    try:
        with _collecting_between_optimizers():
            model, _ = tf2onnx.convert.from_function(function, input_signature=signature, opset=ONNX_OPSET)
    except Exception as error:  # tf2onnx's own errors: an op or a loop it cannot convert
        raise KbertError(f"tf2onnx cannot convert this {what} model's graph ({first_line(error)}); "
                         f"{instead}") from None
    finally:
        gc.collect()  # the conversion's own garbage, before the file is checked and a server starts
    fuse_for_onnxruntime(model)  # layer norms and GELUs in forms onnxruntime runs in one pass
    if quantize:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        onnx.save(model, path)  # the quantizer reads the float32 file
        quantized = os.path.join(staging, "model.int8.onnx")
        # reduce_range: 7-bit weights. On a CPU without VNNI (AVX2 alone), onnxruntime's u8s8 products go through
        # AVX2's pairwise multiply-add, which saturates at 16 bits with 8-bit weights: seen on such an AMD EPYC,
        # MiniLM's int8 vectors fell to cosine 0.9896 of Keras's and a UniLM's greedy decoding changed 46 % of
        # its tokens; a file runs where it is deployed, not where it was made, so every export is safe there.
        with _root_log_quiet():  # the quantizer logs a line per weight it leaves in float, on the root logger
            quantize_dynamic(path, quantized, weight_type=QuantType.QInt8, per_channel=per_channel,
                             reduce_range=True)
        path = quantized
        model = onnx.load(path)
    for key, value in metadata.items():  # ONNX metadata values are strings
        model.metadata_props.add(key=key, value=value if isinstance(value, str)
                                 else json.dumps(value, ensure_ascii=False))
    onnx.save(model, path)
    return path


@contextlib.contextmanager
def _collecting_between_optimizers() -> Iterator[None]:
    """tf2onnx's graph optimizers, each run after a collection of Python's garbage. tf2onnx copies the whole
    graph, weights included, before each optimizer (to fall back on if it fails), and the copies left behind are
    reference cycles that Python collects late: measured on all-MiniLM-L6-v2 (`benchmarks.export_memory`), the
    export's peak fell from 5.5 to 2.55 GB and what it held after from 3.6 to 1.31 GB (docs/embeddings.md).
    tf2onnx has no setting for it: its optimizer table is replaced for the conversion's length, then restored.
    What lived before the conversion (the libraries, the model) is frozen out of the collections meanwhile, so
    each scans the conversion's own objects only: a collection costs in proportion to all the process holds, and
    unfrozen, tests/test_export.py took at least 1,158 s in one test process, against 168 s frozen."""
    from tf2onnx import optimizer

    table = optimizer._get_optimizers

    def collecting(factory):
        def make():
            gc.collect()
            return factory()
        return make

    optimizer._get_optimizers = lambda: collections.OrderedDict(
        (name, collecting(factory)) for name, factory in table().items())
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        optimizer._get_optimizers = table
        gc.unfreeze()


@contextlib.contextmanager
def _root_log_quiet() -> Iterator[None]:
    """The root logger at WARNING for a while (kbert's CLI sets it to INFO for its own lines)."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        root.setLevel(level)


def _register_missing_converters() -> None:
    """tf2onnx has no converter for `Erfc`, which TensorFlow's exact GELU uses: erfc(x) = 1 - erf(x)."""
    global _converters_registered
    from tf2onnx import utils
    from tf2onnx.handler import tf_op

    if _converters_registered:
        return

    @tf_op("Erfc")
    class Erfc:
        @classmethod
        def version_9(cls, ctx, node, **kwargs):
            x, output = node.input[0], node.output[0]
            shape, dtype = ctx.get_shape(output), ctx.get_dtype(output)
            ctx.remove_node(node.name)
            erf = ctx.make_node("Erf", [x])
            one = ctx.make_const(utils.make_name("one"), np.array(1, dtype=utils.map_onnx_to_numpy_type(dtype)))
            ctx.make_node("Sub", [one.output[0], erf.output[0]], outputs=[output], shapes=[shape], dtypes=[dtype])

    _converters_registered = True
