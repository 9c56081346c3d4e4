"""LoRA fine-tuning against full fine-tuning: step time and peak memory of a classifier's training step.

    python -m benchmarks.lora [--config bert_small_chinese] [--rank 8] [--batch-size 32] [--maxlen 128]
    python -m benchmarks.lora --config qwen3_embedding_0_6b --engines lora,lora-remat --batch-size 4 --maxlen 64

Each engine (`full` fine-tuning; `lora`: `kbert.training.lora.enable_lora` at `--rank`; `lora-remat` and
`full-remat`: built under `kbert train --remat`'s scope, the feed-forward layers recomputed in the backward
pass) runs in a process of its own, so its peak resident memory is its own: the
model is built as `kbert train` builds a classifier, compiled with
`kbert train`'s AdamW, and fed batches of real reviews
(`../shared/data/sentiment`, encoded and batched as `kbert train` does them,
one 16-token band a batch). The rounds alternate: each times `--steps`
`train_on_batch` steps of every engine in turn, on the same batches. The table
gives the trainable parameters, steps/s (median over rounds), the per-round
ratio to full fine-tuning (median and range), and each process's peak
resident memory with how much of it the training steps added over the built
and compiled model.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from benchmarks.alternating import describe, median_ratio
from benchmarks.memory import peak_rss_mib, rss_mib

SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.pardir, "shared")
ENGINES = ("full", "lora", "full-remat", "lora-remat")


def _batches(batch_size: int, maxlen: int, count: int):
    """`count` batches of the sentiment training split, as `kbert train` encodes and bands them."""
    import numpy as np

    from kbert.tokenizers.wordpiece import Tokenizer
    from kbert.training.data import encode_examples, read_examples
    from kbert.training.pipeline import PaddedBatches

    tokenizer = Tokenizer(os.path.join(SHARED, "vocab", "chinese_vocab.txt"))
    examples, _ = read_examples(os.path.join(SHARED, "data", "sentiment", "sentiment.train.data"))
    examples = examples[:batch_size * count * 4]
    labels = [int(example.label) for example in examples]
    batches = PaddedBatches(encode_examples(tokenizer, examples, maxlen), np.array(labels), batch_size,
                            shuffle=True, seed=0, bucketing=True)
    return [batches[index] for index in range(min(count, len(batches)))]


def worker(engine: str, config_path: str, rank: int, batch_size: int, maxlen: int) -> None:
    """Builds the engine, then answers `N` with the seconds of N steps (cycling over the batches), `peak`
    with `trainable rss_after_build peak_rss` in MiB."""
    import numpy as np

    from kbert import build_transformer_model
    from kbert.builder import build_classifier
    from kbert.models.registry import load_config
    from kbert.training.lora import enable_lora
    from kbert.training.loop import remat_scope
    from kbert.training.optimizers import make_optimizer
    from kbert.training.options import TrainingOptions

    options = TrainingOptions(learning_rate=3e-4, batch_size=batch_size, maxlen=maxlen,
                              remat=engine.endswith("-remat"))
    with remat_scope(options, load_config(config_path)):
        model = build_classifier(build_transformer_model(config_path), 2)
    if engine.startswith("lora"):
        enable_lora(model, rank)
    model.compile(optimizer=make_optimizer(options, 1000, model), loss="sparse_categorical_crossentropy")
    batches = _batches(batch_size, maxlen, count=20)
    built = rss_mib()
    step = 0
    for features, labels in batches[:3]:  # the first steps of each shape compile
        model.train_on_batch(list(features), labels)
    trainable = sum(int(np.prod(weight.shape)) for weight in model.trainable_weights)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "peak":
            print(f"{trainable} {built:.1f} {peak_rss_mib():.1f}", flush=True)
            continue
        start = time.perf_counter()
        for _ in range(int(line)):
            features, labels = batches[step % len(batches)]
            model.train_on_batch(list(features), labels)
            step += 1
        print((time.perf_counter() - start) / int(line), flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="bert_small_chinese")
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--maxlen", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="steps timed per engine per round")
    parser.add_argument("--engines", default="full,lora",
                        help=f"comma-separated, the first the others are compared with ({', '.join(ENGINES)})")
    parser.add_argument("--worker", choices=ENGINES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from kbert.models.config import bundled_config_path

    config_path = bundled_config_path(args.config)
    if args.worker:
        return worker(args.worker, config_path, args.rank, args.batch_size, args.maxlen)
    engines = args.engines.split(",")
    unknown = [engine for engine in engines if engine not in ENGINES]
    if unknown:
        parser.error(f"--engines: unknown {unknown}; expected some of {', '.join(ENGINES)}")
    workers = {engine: subprocess.Popen(
        [sys.executable, "-m", "benchmarks.lora", "--worker", engine, "--config", args.config, "--rank",
         str(args.rank), "--batch-size", str(args.batch_size), "--maxlen", str(args.maxlen)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) for engine in engines}

    def ask(engine: str, line: str) -> str:
        workers[engine].stdin.write(line + "\n")
        workers[engine].stdin.flush()
        return workers[engine].stdout.readline().strip()

    for engine, process in workers.items():
        if process.stdout.readline().strip() != "ready":
            raise SystemExit(f"the {engine} worker failed to start")
    seconds = {engine: [] for engine in engines}
    for _ in range(args.rounds):
        for engine in engines:
            seconds[engine].append(float(ask(engine, str(args.steps))))
    memory = {engine: ask(engine, "peak").split() for engine in engines}
    for process in workers.values():
        process.stdin.close()
        process.wait(timeout=60)
    print(f"{args.config} two-label classifier, batch {args.batch_size}, maxlen {args.maxlen}, real reviews; "
          f"{args.rounds} alternating rounds of {args.steps} steps; LoRA rank {args.rank}")
    print(f"{'engine':10} {'trainable':>11} {'steps/s':>8}  {'vs ' + engines[0]:28} {'peak MiB':>9} "
          f"{'steps added MiB':>16}")
    for engine in engines:
        trainable, built, peak = memory[engine]
        ratio = describe(median_ratio(seconds[engines[0]], seconds[engine]))
        print(f"{engine:10} {int(trainable):11,} {1 / statistics.median(seconds[engine]):8.2f}  {ratio:28} "
              f"{float(peak):9.0f} {float(peak) - float(built):16.0f}")


if __name__ == "__main__":
    main()
