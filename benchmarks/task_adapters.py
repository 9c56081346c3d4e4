"""Several task LoRA adapters from one set of weights against one task merged in: a forward's cost, and the memory.

    python -m benchmarks.task_adapters --layers 4 --batch 16 --length 128 --rounds 5

Builds `configs/jina_embeddings_v3.json` (cut to `--layers` blocks) twice with random weights: once plain (a task
merged into its weights at load: what `--adapter TASK` serves) and once with five tasks' rank-4 pairs beside every
weight (`task_lora`, random pairs), run through task 1's graph (`kbert.layers.task_lora.task_graph`: what
`--adapter all` serves). After a warm-up of each, every round times one forward of `--batch` × `--length` random
ids through each model in turn. Prints the seconds per round, the median ratio (task graph / merged) with its
range, the weights' MiB of each model, and for the whole jina-embeddings-v3 config the pairs' share of its weights
and what five merged copies would hold instead. The CPU is named.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from benchmarks.alternating import REPOSITORY
from benchmarks.long_inputs import cpu_name

CONFIG = os.path.join(REPOSITORY, "configs", "jina_embeddings_v3.json")
TASKS, RANK = 5, 4


def pair_parameters(config: dict) -> int:
    """The task pairs' parameters for `config`: `tasks · rank · (rows + columns)` of every embedding table and
    every block's four kernels (query/key/value, output, the feed-forward's two)."""
    h, i = config["hidden_size"], config["intermediate_size"]
    tables = [(config["vocab_size"], h), (config.get("type_vocab_size", 1), h)]
    block = [(h, 3 * h), (h, h), (h, i), (i, h)]
    shapes = tables + block * config["num_hidden_layers"]
    return sum(TASKS * RANK * (rows + columns) for rows, columns in shapes)


def megabytes(model) -> float:
    return sum(int(np.prod(variable.shape)) * 4 for variable in model.weights) / 2 ** 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import keras

    from kbert import build_transformer_model
    from kbert.analysis.params import analyze
    from kbert.layers.task_lora import task_graph
    from kbert.models.registry import resolve

    with open(CONFIG, encoding="utf-8") as handle:
        full = json.load(handle)
    config = {**full, "num_hidden_layers": args.layers}
    merged = build_transformer_model(config)
    shared = build_transformer_model(config, task_lora={"tasks": TASKS, "rank": RANK, "scale": 0.25})
    rng = np.random.default_rng(0)
    for variable in shared.weights:
        if "task_lora" in variable.path:
            variable.assign(rng.normal(0, 0.02, variable.shape).astype(np.float32))
    task = task_graph(shared, 1)
    ids = rng.integers(5, full["vocab_size"], (args.batch, args.length)).astype("int32")
    features = [ids, np.zeros_like(ids)]
    engines = {"merged": merged, "task graph": task}
    for model in engines.values():
        model.predict_on_batch(features)
    seconds = {name: [] for name in engines}
    for _ in range(args.rounds):
        for name, model in engines.items():
            start = time.perf_counter()
            model.predict_on_batch(features)
            seconds[name].append(time.perf_counter() - start)
    ratios = np.array(seconds["task graph"]) / np.array(seconds["merged"])
    print(f"CPU: {cpu_name()}; Keras backend {keras.backend.backend()}; {args.layers} of jina-embeddings-v3's "
          f"blocks, {args.batch} x {args.length} tokens, {TASKS} tasks at rank {RANK}")
    print(f"{'round':>5} {'merged s':>9} {'task graph s':>13} {'ratio':>6}")
    for index, (mine, theirs, ratio) in enumerate(zip(seconds["merged"], seconds["task graph"], ratios), 1):
        print(f"{index:>5} {mine:>9.3f} {theirs:>13.3f} {ratio:>6.3f}")
    print(f"task graph / merged: median {np.median(ratios):.3f} (range {ratios.min():.3f}-{ratios.max():.3f})")
    print(f"weights: merged {megabytes(merged):.1f} MiB, with every task's pairs {megabytes(shared):.1f} MiB")
    base = analyze(resolve(full)[1]).total
    pairs = pair_parameters(full)
    print(f"jina-embeddings-v3 (whole): weights {base:,} parameters, every task's pairs {pairs:,} "
          f"({100 * pairs / base:.2f}%); five merged copies {5 * base * 4 / 2 ** 30:.2f} GiB against "
          f"{(base + pairs) * 4 / 2 ** 30:.2f} GiB float32")


if __name__ == "__main__":
    main()
