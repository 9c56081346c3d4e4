"""One classifier training step of a family's base shape: kbert against transformers, in alternating rounds.

    KERAS_BACKEND=torch python -m benchmarks.training_step --config deberta_v3_base --batch 16 --length 256 \\
        --hf-python PYTHON_WITH_TRANSFORMERS

Both engines build the bundled config (random weights, float32 on the CPU) with a two-label classifier on
`[CLS]` (kbert's `build_classifier`; transformers' `AutoModelForSequenceClassification`), each in a worker
process of its own, and train it with AdamW (kbert's, which `kbert train` uses; PyTorch's) on one fixed batch of `--batch` × `--length` random token ids and
labels. Each worker warms up with `--warmup` steps; then each round asks every worker in turn for `--steps`
steps and reports its seconds a step. Prints the seconds per engine and round, the median per-round speed ratio
kbert / transformers (transformers' seconds over kbert's: above 1, kbert is faster) with its range, and the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from benchmarks.alternating import REPOSITORY, alternate_workers, describe, median_ratio
from benchmarks.long_inputs import cpu_name


def _step(engine: str, config_path: str, batch: int, length: int):
    """`step()`: one optimizer step of the engine's classifier on a fixed batch."""
    rng = np.random.default_rng(0)
    with open(config_path, encoding="utf-8") as handle:
        config = json.load(handle)
    ids = rng.integers(5, config["vocab_size"], (batch, length)).astype(np.int32)
    labels = rng.integers(0, 2, (batch,))
    if engine == "kbert":
        from kbert import build_classifier, build_transformer_model
        from kbert.training.optimizers import AdamW

        model = build_classifier(build_transformer_model(config_path), num_labels=2)
        model.compile(optimizer=AdamW(2e-5), loss="sparse_categorical_crossentropy")  # kbert train's AdamW
        segments = np.zeros_like(ids)
        return lambda: model.train_on_batch([ids, segments], labels)
    import torch
    import transformers

    model = transformers.AutoModelForSequenceClassification.from_config(
        transformers.AutoConfig.for_model(**{"model_type": "bert", **{key: value for key, value in config.items()
                                                                      if key != "architectures"}}, num_labels=2))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    inputs = {"input_ids": torch.from_numpy(ids.astype(np.int64)), "labels": torch.from_numpy(labels)}

    def step():
        optimizer.zero_grad()
        model(**inputs).loss.backward()
        optimizer.step()

    return step


def worker(engine: str, config_path: str, batch: int, length: int, warmup: int, steps: int) -> None:
    step = _step(engine, config_path, batch, length)
    for _ in range(warmup):
        step()
    print("ready", flush=True)
    for _ in sys.stdin:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        print(json.dumps({"seconds": (time.perf_counter() - start) / steps}), flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="deberta_v3_base", help="a bundled config (default: deberta_v3_base)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2, help="steps timed per engine per round (default: 2)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first (default: 1)")
    parser.add_argument("--hf-python", default=sys.executable, help="the Python that runs transformers")
    parser.add_argument("--worker", choices=("kbert", "transformers"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    config_path = os.path.join(REPOSITORY, "configs", f"{args.config}.json")
    if args.worker:
        worker(args.worker, config_path, args.batch, args.length, args.warmup, args.steps)
        return 0
    answers = alternate_workers("benchmarks.training_step",
                                ["--config", args.config, "--batch", str(args.batch), "--length", str(args.length),
                                 "--steps", str(args.steps), "--warmup", str(args.warmup)],
                                {"kbert": sys.executable, "transformers": args.hf_python}, args.rounds)
    seconds = {name: [answer["seconds"] for answer in rows] for name, rows in answers.items()}
    print(f"{args.config}, a two-label classifier, AdamW, {args.batch} x {args.length} tokens, float32; "
          f"{args.rounds} alternating rounds of {args.steps} steps; CPU: {cpu_name()}; kbert on Keras's "
          f"{os.environ.get('KERAS_BACKEND', 'tensorflow')} backend, transformers on PyTorch")
    for name, rows in seconds.items():
        print(f"{name:<13} seconds a step by round: " + " ".join(f"{value:7.2f}" for value in rows))
    print("kbert speed / transformers': " + describe(median_ratio(seconds["transformers"], seconds["kbert"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
