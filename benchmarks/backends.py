"""kbert on each Keras backend against keras-hub and transformers: BERT inference, fp32 and bf16.

    python -m benchmarks.backends [--quick] [--rounds 3] [--precisions fp32 bf16] [--json OUT]

A process holds one Keras backend, so each engine (kbert or keras-hub on
tensorflow, jax or torch, and Hugging Face transformers on torch) runs in a
worker process of its own, started once and kept for the whole run. The
rounds alternate: each round asks every worker in turn to time the same
number of forward passes on the same batch (`predict_on_batch` for both
Keras libraries, so both get their backend's compiled predict step), and
the table reports tokens per second as the median over rounds, then each
engine's median ratio to kbert on TensorFlow in fp32, with the range over
rounds.

An engine whose backend or library is not installed is left out and named.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List

from benchmarks.alternating import describe, median_ratio

BACKENDS = ("tensorflow", "jax", "torch")
ENGINES = [f"kbert/{backend}" for backend in BACKENDS] + [f"keras-hub/{backend}" for backend in BACKENDS] \
    + ["transformers/torch"]
BASELINE = "kbert/tensorflow fp32"


# --- worker: one engine in its own process -----------------------------------------------------

def serve(engine: str, precision: str, config_path: str, batch: int, length: int) -> None:
    """Builds the engine, warms it up, then answers each `N` on stdin with the seconds of N passes."""
    library, _ = engine.split("/")
    tokens, segments = _batch(config_path, batch, length)
    forward = {"kbert": _kbert, "keras-hub": _keras_hub, "transformers": _transformers}[library](
        config_path, precision)
    for _ in range(2):  # compilation and first-call allocations are not timed
        forward(tokens, segments)
    print("ready", flush=True)
    for line in sys.stdin:
        calls = int(line)
        start = time.perf_counter()
        for _ in range(calls):
            forward(tokens, segments)
        print((time.perf_counter() - start) / calls, flush=True)


def _batch(config_path: str, batch: int, length: int):
    import numpy as np

    vocab_size = json.load(open(config_path, encoding="utf-8"))["vocab_size"]
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, vocab_size, size=(batch, length)).astype("int32")
    return tokens, np.zeros_like(tokens)


def _set_keras_precision(precision: str) -> None:
    import keras

    keras.mixed_precision.set_global_policy("mixed_bfloat16" if precision == "bf16" else "float32")


def _kbert(config_path: str, precision: str):
    _set_keras_precision(precision)
    from kbert import build_transformer_model

    model = build_transformer_model(config_path)
    return lambda tokens, segments: model.predict_on_batch([tokens, segments])


def _keras_hub(config_path: str, precision: str):
    _set_keras_precision(precision)
    import keras_hub

    config = json.load(open(config_path, encoding="utf-8"))
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config["vocab_size"], num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"], hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"], max_sequence_length=config["max_position_embeddings"],
        num_segments=config["type_vocab_size"])

    def forward(tokens, segments):
        return backbone.predict_on_batch({"token_ids": tokens, "segment_ids": segments,
                                          "padding_mask": tokens != 0})

    return forward


def _transformers(config_path: str, precision: str):
    import torch
    import transformers

    config = transformers.BertConfig(**json.load(open(config_path, encoding="utf-8")))
    model = transformers.BertModel(config, add_pooling_layer=False).eval()
    if precision == "bf16":
        model = model.to(torch.bfloat16)

    def forward(tokens, segments):
        with torch.inference_mode():
            ids = torch.from_numpy(tokens).long()
            return model(input_ids=ids, token_type_ids=torch.from_numpy(segments).long(),
                         attention_mask=(ids != 0).long()).last_hidden_state.float().numpy()

    return forward


# --- the run: workers, alternating rounds, the table -------------------------------------------

def installed(engine: str) -> bool:
    library, backend = engine.split("/")
    module = {"kbert": None, "keras-hub": "keras_hub", "transformers": "transformers"}[library]
    return all(importlib.util.find_spec(name) is not None for name in (backend, module) if name)


class Worker:
    """One engine's process; `time(calls)` asks it for the seconds of one pass, averaged over `calls`."""

    def __init__(self, engine: str, precision: str, config_path: str, batch: int, length: int):
        self.name = f"{engine} {precision}"
        backend = engine.split("/")[1]
        env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.backends", "--worker", engine, "--precision", precision,
             "--config", config_path, "--batch", str(batch), "--length", str(length)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def ready(self) -> bool:
        line = self.process.stdout.readline().strip()
        if line != "ready":
            print(f"{self.name}: failed to start:\n{self.process.stderr.read()[-2000:]}", file=sys.stderr)
            return False
        return True

    def time(self, calls: int) -> float:
        self.process.stdin.write(f"{calls}\n")
        self.process.stdin.flush()
        return float(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def run(config_path: str, batch: int, length: int, rounds: int, calls: int, precisions: List[str]) -> dict:
    engines = [engine for engine in ENGINES if installed(engine)]
    missing = [engine for engine in ENGINES if engine not in engines]
    workers = [Worker(engine, precision, config_path, batch, length) for precision in precisions
               for engine in engines]
    workers = [worker for worker in workers if worker.ready()]
    seconds: Dict[str, List[float]] = {worker.name: [] for worker in workers}
    try:
        for _ in range(rounds):
            for worker in workers:
                seconds[worker.name].append(worker.time(calls))
    finally:
        for worker in workers:
            worker.close()
    tokens = batch * length
    rows = {}
    for name, times in seconds.items():
        rows[name] = {"tokens_per_s": tokens / statistics.median(times), "seconds": times}
        if BASELINE in seconds:
            rows[name]["vs_kbert_tf_fp32"] = median_ratio(seconds[BASELINE], times)
    return {"config": os.path.basename(config_path), "batch": batch, "length": length, "rounds": rounds,
            "calls_per_round": calls, "not_installed": missing, "engines": rows}


def print_table(results: dict) -> None:
    print(f"{results['config']}, {results['batch']} x {results['length']} tokens, {results['rounds']} alternating "
          f"rounds of {results['calls_per_round']} passes each; medians")
    print(f"{'engine':32} {'tokens/s':>10}  vs kbert/tensorflow fp32")
    for name, row in results["engines"].items():
        ratio = describe(row["vs_kbert_tf_fp32"]) if "vs_kbert_tf_fp32" in row else "-"
        print(f"{name:32} {row['tokens_per_s']:10,.0f}  {ratio}")
    if results["not_installed"]:
        print("not installed: " + ", ".join(results["not_installed"]))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="bert_tiny, 2 x 16 tokens (a smoke test)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=3, help="forward passes timed per engine per round")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--precision", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return serve(args.worker, args.precision, args.config, args.batch, args.length)
    from kbert.models.config import bundled_config_path

    config_path = bundled_config_path("bert_tiny" if args.quick else "bert_base_chinese")
    batch, length = (2, 16) if args.quick else (8, 128)
    results = run(config_path, batch, length, args.rounds, args.calls, args.precisions)
    print_table(results)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
