"""Every CPU engine for one embedding model, kbert's and sentence-transformers', in alternating rounds: which is
fastest on this CPU, and how far each one's vectors are from float32's.

    python -m benchmarks.cpu_engines --model PATH/TO/all-MiniLM-L6-v2 \\
        --data ../shared/data/sentiment/sentiment.test.data --st-python PYTHON_WITH_SENTENCE_TRANSFORMERS

Each engine is a worker process of `benchmarks.embedding` (kbert's on this Python, sentence-transformers' on
`--st-python`, which needs `sentence-transformers[openvino]` for its OpenVINO backend), loaded and warmed up one
after the other; then each round asks every engine in turn to encode the same `--count` texts (`--batch-size` a
call). Prints the CPU and its flags, then per engine: texts/s (median), the median per-round ratio to
sentence-transformers on torch float32 and to the fastest sentence-transformers engine of the same round (with
their ranges), and each text's cosine with the float32 vectors of sentence-transformers (median and lowest).

kbert's engines are `kbert embed`'s options: its defaults (`--runtime auto`: OpenVINO where it is installed, in
its own precision for the CPU; `--dtype auto`), `--runtime keras` (`--dtype auto`), `--dtype bfloat16`,
`--runtime onnxruntime` with `--quantize int8` (dynamic), `--runtime openvino` (its precision for the CPU) and
with `--quantize int8` (static, calibrated on a sample of the texts, as `kbert embed` does without
`--calibration`). `--engines` picks some.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import List

import numpy as np

from benchmarks.alternating import cpu_name
from benchmarks.embedding import engine_arguments, read_texts, timed_rounds

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE = "st torch float32"
# engine: (worker, --dtype, --runtime)
ENGINES = {
    "kbert defaults": ("kbert", "auto", "auto"),
    "kbert keras": ("kbert", "auto", "keras"),
    "kbert bfloat16": ("kbert", "bfloat16", "keras"),
    "kbert onnxruntime int8": ("kbert", "float32", "onnxruntime-int8"),
    "kbert openvino": ("kbert", "auto", "openvino"),
    "kbert openvino int8": ("kbert", "auto", "openvino-int8"),
    REFERENCE: ("sentence-transformers", "float32", "keras"),
    "st torch bfloat16": ("sentence-transformers", "bfloat16", "keras"),
    "st openvino": ("sentence-transformers", "float32", "openvino"),
}
FLAGS = ("avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")


def cpu() -> str:
    """The CPU's model name and the flags that pick kernels (bfloat16 and int8 units)."""
    from kbert.training.precision import cpu_flags

    flags = cpu_flags()
    return f"{cpu_name()}; {', '.join(flag for flag in FLAGS if flag in flags) or 'none of'} " \
           f"({', '.join(flag for flag in FLAGS if flag not in flags) or 'nothing'} absent)"


def start(engine: str, args) -> subprocess.Popen:
    """The engine's worker, loaded and warmed up (its `ready` line read)."""
    worker, dtype, runtime = ENGINES[engine]
    python = sys.executable if worker == "kbert" else args.st_python
    # the sentence-transformers worker reads the folder's kind through kbert, whose Keras needs a backend there
    env = os.environ if worker == "kbert" else dict(os.environ, KERAS_BACKEND="torch")
    process = subprocess.Popen([python, "-m", "benchmarks.embedding", "--model", args.model, "--data", args.data,
                                "--count", str(args.count), "--batch-size", str(args.batch_size), "--dtype", dtype,
                                "--runtime", runtime, "--worker", worker],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               cwd=REPOSITORY, env=env)
    if not process.stdout.readline():
        raise SystemExit(f"the worker of {engine} stopped while loading (run it alone: python -m benchmarks.embedding "
                         f"--worker {worker} --dtype {dtype} --runtime {runtime} ...)")
    return process


def ratio(mine: List[float], theirs: List[float]) -> str:
    """The median of the per-round speed ratios (theirs / mine seconds), with their range."""
    ratios = [other / own for own, other in zip(mine, theirs)]
    return f"{np.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    engine_arguments(parser, count=1000)
    parser.add_argument("--engines", nargs="+", choices=list(ENGINES), default=list(ENGINES),
                        help=f"the engines to time (default: all; {REFERENCE} is always timed)")
    args = parser.parse_args(argv)
    engines = list(dict.fromkeys([REFERENCE, *args.engines]))
    workers = {}
    try:
        for engine in engines:  # one after the other: an export's peak never overlaps another load
            workers[engine] = start(engine, args)
        seconds, vectors = timed_rounds(workers, args.rounds)
    finally:
        for process in workers.values():
            process.stdin.close()
            process.wait(timeout=300)
    texts = read_texts(args.data, args.count)
    print(f"{cpu()}\n{len(texts)} texts of {min(map(len, texts))} to {max(map(len, texts))} characters, batch "
          f"{args.batch_size}, {args.rounds} alternating rounds\n")
    fastest_peer = [min(seconds[name][number] for name in seconds if name.startswith("st "))
                    for number in range(args.rounds)]
    reference = vectors[REFERENCE]
    print(f"| engine | texts/s | / {REFERENCE} | / fastest sentence-transformers | cosine to float32 (median, "
          "lowest) |")
    print("|---|---:|---:|---:|---:|")
    for name in engines:
        got = vectors[name]
        cosines = (got * reference).sum(1) / np.maximum(np.linalg.norm(got, axis=1) * np.linalg.norm(reference, axis=1),
                                                        1e-12)
        print(f"| {name} | {len(texts) / np.median(seconds[name]):,.0f} | {ratio(seconds[name], seconds[REFERENCE])} "
              f"| {ratio(seconds[name], fastest_peer)} | {np.median(cosines):.5f}, {cosines.min():.5f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
