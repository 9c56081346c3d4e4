"""The memory an embedding model's ONNX export takes: what `kbert serve --runtime onnxruntime`, `--quantize int8`
and `kbert embed` with either do before their first text.

    python -m benchmarks.export_memory --model FOLDER [--model FOLDER ...] [--quantize int8]

Each model is loaded and exported in a process of its own (`kbert.serving.runtimes.onnx_embedder`: tf2onnx's
conversion, onnxruntime's quantization with `--quantize`, the check against Keras). The table gives the resident
memory after loading, the peak during the export (the kernel's high-water mark, `VmHWM`), what the process still
holds after it (`VmRSS`), and the export's seconds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def measure(model: str, quantize: str) -> dict:
    """One model's export, in this process (`--child`): its memory readings and seconds."""
    from benchmarks.memory import peak_rss_mib, rss_mib
    from kbert.serving.runtimes import Runtime, onnx_embedder
    from kbert.embeddings.embedder import Embedder

    embedder = Embedder.load(model, dtype="float32")
    loaded = rss_mib()
    start = time.perf_counter()
    embedder.model = onnx_embedder(embedder, Runtime(quantize=quantize or None))
    return {"model": model, "quantize": quantize or "float32", "loaded_mib": loaded, "peak_mib": peak_rss_mib(),
            "held_mib": rss_mib(), "seconds": time.perf_counter() - start}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True, help="a sentence-transformers folder (repeat)")
    parser.add_argument("--quantize", choices=("int8",), default="")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(measure(args.model[0], args.quantize)), flush=True)
        return 0
    print("| model | export | loaded | peak during the export | held after | seconds |\n|---|---|---:|---:|---:|---:|")
    for model in args.model:
        quantize = ["--quantize", args.quantize] if args.quantize else []
        run = subprocess.run([sys.executable, "-m", "benchmarks.export_memory", "--child", "--model", model,
                              *quantize], capture_output=True, text=True)
        lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
        if run.returncode or not lines:
            print(f"| {model} | failed ({run.returncode}): {run.stderr.strip().splitlines()[-1:]} |")
            continue
        row = json.loads(lines[-1][len("RESULT "):])
        print(f"| {model} | {row['quantize']} | {row['loaded_mib'] / 1024:.2f} GB | {row['peak_mib'] / 1024:.2f} GB "
              f"| {row['held_mib'] / 1024:.2f} GB | {row['seconds']:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
