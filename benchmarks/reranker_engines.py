"""Every CPU engine for one CrossEncoder, kbert's and sentence-transformers', in alternating rounds: pairs scored
per second, and how far each engine's logits are from float32 Keras's.

    python -m benchmarks.reranker_engines --make-folder DIR --backbone PATH/TO/all-MiniLM-L6-v2
    python -m benchmarks.reranker_engines --model DIR --st-python PYTHON_WITH_SENTENCE_TRANSFORMERS
    python -m benchmarks.reranker_engines --model /tmp/qwen3_reranker --engines "kbert float32 (Keras),st torch float32"

`--engines` picks some of the engines (a causal LM's CrossEncoder, `benchmarks.random_folder --reranker`, runs on
Keras and on sentence-transformers' torch).

`--make-folder` writes a CrossEncoder folder on a real backbone (its weights, a pooler and a one-logit head from
a fixed seed), as `tests/test_reranking.py` does. The pairs are real reviews' halves (`--count` of them from the
validation split: each review's first half with its own second half, or with another review's); OpenVINO's static
int8 is calibrated on 64 pairs made the same way from other reviews. Each engine is a worker process, loaded and
warmed up first; each round asks every engine in turn to score all the pairs (`--batch-size` a call). Prints the
CPU, then per engine the pairs/s (median), the median per-round ratio to sentence-transformers' `CrossEncoder` on
torch float32 with its range, and the largest difference of its logits from kbert's float32 ones with the
Spearman correlation of their orders.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

from benchmarks.alternating import alternate_workers, cpu_name, describe, median_ratio
from benchmarks.embedding_quality import read_reviews

REFERENCE = "st torch float32"
ENGINES = {  # engine: its interpreter ("kbert": this one; "st": --st-python)
    "kbert float32 (Keras)": "kbert", "kbert openvino": "kbert", "kbert openvino int8": "kbert",
    REFERENCE: "st", "st openvino": "st"}


def pairs(count: int, start: int = 0):
    """`count` (query, passage) pairs of the validation reviews from `start`: a half with its own other half
    (even rows) or another review's (odd rows)."""
    halves = [(text[:len(text) // 2], text[len(text) // 2:]) for text, _ in read_reviews("valid")[start:]]
    size = count // 2
    return [(halves[i][0], halves[(i + shift) % size][1]) for i in range(size) for shift in (0, 7)]


def make_folder(out: str, backbone: str) -> None:
    import keras

    from kbert import build_transformer_model
    from kbert.checkpoints.hf import load_hf_weights
    from kbert.io import ModelFolder
    from kbert.tasks.reranking import reranker_model, write_cross_encoder
    from kbert.tokenizers.tokenizer_json import folder_tokenizer

    source = ModelFolder(backbone)
    tokenizer = folder_tokenizer(source)
    keras.utils.set_random_seed(3)
    bert = build_transformer_model(source, padding=tokenizer.padding)
    load_hf_weights(bert, source)
    write_cross_encoder(reranker_model(bert), bert, tokenizer, 128, out)


def _scorer(engine: str, model: str, batch_size: int):
    """`score(pairs) -> logits` of the engine, loaded."""
    if engine.startswith("st"):
        import torch
        from sentence_transformers import CrossEncoder

        encoder = CrossEncoder(model, backend="openvino" if "openvino" in engine else "torch")
        return lambda rows: np.asarray(encoder.predict(rows, batch_size=batch_size,
                                                       activation_fn=torch.nn.Identity()), np.float32)
    from kbert.serving.runtimes import Runtime, onnx_reranker
    from kbert.tasks.reranking import Reranker

    reranker = Reranker.load(model, dtype="float32")
    if "openvino" in engine:
        calibration = tuple(f"{q}\t{p}" for q, p in pairs(64, start=1000)) if "int8" in engine else None
        runtime = Runtime("openvino", "int8" if "int8" in engine else None, "auto", calibration)
        reranker.model = onnx_reranker(reranker, runtime)
    return lambda rows: reranker.logits([q for q, _ in rows], [p for _, p in rows], batch_size)


def worker(engine: str, model: str, count: int, batch_size: int) -> None:
    rows = pairs(count)
    score = _scorer(engine, model, batch_size)
    score(rows[:batch_size])  # warmed up
    print("ready", flush=True)
    for _ in sys.stdin:
        start = time.perf_counter()
        logits = score(rows)
        print(json.dumps({"seconds": time.perf_counter() - start, "logits": logits.tolist()}), flush=True)


def spearman(a, b) -> float:
    return float(np.corrcoef(np.argsort(np.argsort(a)), np.argsort(np.argsort(b)))[0, 1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model")
    parser.add_argument("--make-folder", metavar="DIR")
    parser.add_argument("--backbone")
    parser.add_argument("--st-python", default=sys.executable)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker")
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma-separated (default: every engine)")
    args = parser.parse_args(argv)
    if args.make_folder:
        make_folder(args.make_folder, args.backbone)
        return 0
    if args.worker:
        worker(args.worker, args.model, args.count, args.batch_size)
        return 0
    chosen = args.engines.split(",")
    pythons = {name: sys.executable if side == "kbert" else args.st_python for name, side in ENGINES.items()
               if name in chosen}
    answers = alternate_workers("benchmarks.reranker_engines", ["--model", os.path.abspath(args.model), "--count",
                                                                str(args.count), "--batch-size", str(args.batch_size)],
                                pythons, args.rounds)
    seconds = {name: [answer["seconds"] for answer in rounds] for name, rounds in answers.items()}
    float32 = np.asarray(answers["kbert float32 (Keras)"][0]["logits"])
    print(f"{cpu_name()}; {args.count} review pairs, batch {args.batch_size}, {args.rounds} alternating rounds")
    print("| engine | pairs/s | / st torch float32 | largest logit difference from kbert float32 | Spearman |")
    print("|---|---:|---:|---:|---:|")
    for name in answers:
        logits = np.asarray(answers[name][0]["logits"])
        rate = statistics.median(args.count / value for value in seconds[name])
        ratio = describe(median_ratio([1 / s for s in seconds[name]], [1 / s for s in seconds[REFERENCE]]))
        print(f"| {name} | {rate:.3g} | {ratio} | {np.abs(logits - float32).max():.4f} | "
              f"{spearman(logits, float32):.4f} |")
    print(f"logits' spread (kbert float32): {np.ptp(float32):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
