"""Vectors in fewer bits, as sentence-transformers' `quantize_embeddings` and Cohere's `embedding_types` give
them: `int8` and `uint8` (each value's place in its dimension's calibration range, in 256 steps), `binary` and
`ubinary` (the signs, eight to a byte; `binary` shifted by −128 into int8).

int8 and uint8 need each dimension's range. Taken from the vectors being quantized, they would change with every
batch, so two requests' vectors would not compare; kbert takes them from a calibration file instead
(`kbert embed --calibrate OUT.json` on texts like the corpus), which `kbert embed --ranges` and
`kbert serve --ranges` read. Saved in the model's folder as `calibration_ranges.json` (`RANGES_FILE`), they go
with the model: `Embedder.load` reads them, and `Embedder.save` writes them back.

Example:
>>> import numpy as np
>>> vectors = np.array([[0.5, -1.0, 0.0], [1.0, 1.0, -0.5]], np.float32)
>>> quantized(vectors, "ubinary").tolist(), quantized(vectors, "binary").tolist()
([[128], [192]], [[0], [64]])
>>> quantized(vectors, "uint8", calibration_ranges(vectors)).tolist()  # a range's top: step 254 or 255 (float)
[[0, 0, 254], [254, 254, 0]]
"""

from __future__ import annotations

import json
import os
from typing import Optional

import numpy as np

from kbert.errors import KbertError

PRECISIONS = ("float", "int8", "uint8", "binary", "ubinary")
CALIBRATED = ("int8", "uint8")  # the precisions that need each dimension's calibration range
RANGES_FORMAT = "kbert-embedding-ranges"
RANGES_FILE = "calibration_ranges.json"  # a model folder's own ranges (sentence-transformers leaves the file be)


def calibration_ranges(vectors: np.ndarray) -> np.ndarray:
    """`[2, dimensions]`: each dimension's smallest and largest value over `vectors`."""
    return np.stack([vectors.min(axis=0), vectors.max(axis=0)]).astype(np.float32)


def quantized(vectors: np.ndarray, precision: str, ranges: Optional[np.ndarray] = None) -> np.ndarray:
    """`vectors` (`[n, dimensions]` float32) in `precision` (one of `PRECISIONS`); int8 and uint8 need `ranges`
    (`calibration_ranges`): a value below its dimension's range takes the first step, above it the last."""
    if precision == "float":
        return vectors.astype(np.float32)
    if precision in ("binary", "ubinary"):
        packed = np.packbits(vectors > 0, axis=-1)
        return (packed.astype(np.int16) - 128).astype(np.int8) if precision == "binary" else packed
    if precision not in CALIBRATED:
        raise KbertError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    if ranges is None:
        raise KbertError(f"precision {precision}: needs each dimension's calibration range (kbert embed "
                         "--calibrate OUT.json on texts like the corpus, then --ranges OUT.json)")
    starts = ranges[0].astype(np.float32)
    steps = (ranges[1].astype(np.float32) - starts) / 255
    steps = np.where(steps == 0, 1, steps)  # a dimension that never moved: every value in its first step
    places = np.clip(np.floor((vectors - starts) / steps), 0, 255)
    return places.astype(np.uint8) if precision == "uint8" else (places - 128).astype(np.int8)


def save_ranges(path: "str | os.PathLike[str]", ranges: np.ndarray, model: str, texts: Optional[int]) -> None:
    """The calibration `ranges` of `model` (from `texts` texts; None: not known, as when a model is saved again)
    as JSON at `path`, atomically; never over a file."""
    from kbert.io import atomic_write_text

    path = os.fspath(path)
    if os.path.lexists(path):
        raise KbertError(f"{path}: already exists; choose a new path (kbert never writes over an earlier output)")
    atomic_write_text(path, json.dumps({"format": RANGES_FORMAT, "model": model, "texts": texts,
                                        "dimensions": int(ranges.shape[1]), "ranges": ranges.tolist()}) + "\n")


def load_ranges(path: "str | os.PathLike[str]", dimensions: int) -> np.ndarray:
    """The `[2, dimensions]` ranges `save_ranges` wrote at `path`, checked against the model's `dimensions`."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as handle:
            values = json.load(handle)
    except (OSError, ValueError) as error:
        raise KbertError(f"{path}: not a readable calibration file ({error})") from None
    if not isinstance(values, dict) or values.get("format") != RANGES_FORMAT:
        raise KbertError(f"{path}: key 'format': expected {RANGES_FORMAT!r} (a file kbert embed --calibrate "
                         "writes)")
    try:
        ranges = np.asarray(values.get("ranges"), np.float32)
    except (TypeError, ValueError):
        ranges = np.zeros(0)
    if ranges.shape != (2, dimensions) or not np.isfinite(ranges).all() or (ranges[1] < ranges[0]).any():
        raise KbertError(f"{path}: key 'ranges': expected [[{dimensions} smallest values], [{dimensions} largest "
                         f"values]] for this model's {dimensions}-value vectors, got shape {list(ranges.shape)}")
    return ranges
