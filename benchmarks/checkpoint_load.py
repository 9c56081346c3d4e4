"""Checkpoint load: time against a raw read of the same files, and peak memory.

Run in a child process of its own (`python -m benchmarks.checkpoint_load
PREFIX CONFIG`), so that the memory figures are the load's alone; prints
one JSON object.
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import sys
import time

from benchmarks.alternating import median_ratio
from benchmarks.memory import peak_rss_mib, reset_peak, rss_mib


def read_files(prefix: str) -> int:
    """Reads every file of the checkpoint into memory once; returns the bytes read."""
    total = 0
    for path in sorted(glob.glob(prefix + ".*")):
        with open(path, "rb") as handle:
            total += len(handle.read())
    return total


def measure(prefix: str, config: str, repeats: int) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow  # noqa: F401  (imported before the baseline reading)

    from kbert import build_transformer_model, load_google_checkpoint

    model = build_transformer_model(config, with_nsp=True, with_mlm=True)
    model_mib = sum(v.numpy().nbytes for v in model.weights) / 2**20
    read_files(prefix)  # warm the page cache: both timings below read from memory
    raw, load, peaks = [], [], []
    for _ in range(repeats):  # alternating rounds: a raw read, then a load
        start = time.perf_counter()
        size = read_files(prefix)
        raw.append(time.perf_counter() - start)
        before = rss_mib()
        reset_peak()
        start = time.perf_counter()
        load_google_checkpoint(model, prefix)
        load.append(time.perf_counter() - start)
        peaks.append(peak_rss_mib() - before)
    return {"model_mib": model_mib, "file_mib": size / 2**20, "raw_read_s": statistics.median(raw),
            "load_s": statistics.median(load), "load_over_raw": median_ratio(load, raw),
            "load_peak_extra_mib": max(peaks)}

if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 3)))
