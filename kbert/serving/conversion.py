"""What every `kbert export` to ONNX shares: the conversion through tf2onnx, and the report of a written file."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Optional

import numpy as np

from kbert.errors import KbertError, first_line

ONNX_OPSET = 17
FLOAT_TOLERANCE = 1e-4  # an exported file's outputs against Keras's, float32
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


def convert_to_onnx(function, signature, metadata: dict, staging: str, quantize: Optional[str], what: str,
                    instead: str = "export it as a SavedModel or a .keras file instead") -> str:
    """A `tf.function` as an ONNX file in `staging` (int8 with `quantize`), with `metadata`; its path.
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
        tf2onnx.convert.from_function(function, input_signature=signature, opset=ONNX_OPSET, output_path=path)
    except Exception as error:  # tf2onnx's own errors: an op or a loop it cannot convert
        raise KbertError(f"tf2onnx cannot convert this {what} model's graph ({first_line(error)}); "
                         f"{instead}") from None
    if quantize:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantized = os.path.join(staging, "model.int8.onnx")
        quantize_dynamic(path, quantized, weight_type=QuantType.QInt8)
        path = quantized
    model = onnx.load(path)
    for key, value in metadata.items():  # ONNX metadata values are strings
        model.metadata_props.add(key=key, value=value if isinstance(value, str)
                                 else json.dumps(value, ensure_ascii=False))
    onnx.save(model, path)
    return path


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
