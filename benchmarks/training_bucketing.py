"""Training steps with and without length bucketing, in alternating rounds.

    python -m benchmarks.training_bucketing --task ner \\
        --train ../shared/data/msra_ner/msra.train.bmes --config configs/bert_small_chinese.json

Builds the task's model as `kbert train` does and its training batches both
ways (the same examples, shuffled; bucketed batches hold one 16-token band of
lengths), then alternates `fit` on `--steps` batches of each for `--rounds`
rounds after a warm-up, and prints training examples/s, the median per-round
ratio with its range, and the padded tokens per real token of a whole epoch.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

import keras
import numpy as np

from benchmarks.alternating import alternate, describe, median_ratio
from kbert.builder import build_transformer_model
from kbert.config import BertConfig
from kbert.options import TrainingOptions
from kbert.tasks import get_task
from kbert.tokenizer import Tokenizer
from kbert.train import make_optimizer


def epoch_tokens(dataset) -> tuple:
    """(real tokens, padded tokens, examples) over one pass of a batched dataset."""
    real = padded = examples = 0
    for (tokens, _), _ in dataset:
        real += int(np.count_nonzero(tokens.numpy()))
        padded += int(np.prod(tokens.shape))
        examples += int(tokens.shape[0])
    return real, padded, examples


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=["classify", "ner"], default="classify")
    parser.add_argument("--train", required=True, help="training data for the task")
    parser.add_argument("--config", default="configs/bert_small_chinese.json")
    parser.add_argument("--vocab", default="../shared/vocab/chinese_vocab.txt")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--maxlen", type=int, default=128)
    parser.add_argument("--steps", type=int, default=30, help="batches per engine per round (default: 30)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default: 5)")
    args = parser.parse_args(argv)
    options = TrainingOptions(task=args.task, batch_size=args.batch_size, maxlen=args.maxlen)
    task = get_task(options)
    tokenizer = Tokenizer(args.vocab)
    datasets = {bucketing: task.read(tokenizer, args.train, None, None,
                                     dataclasses.replace(options, bucketing=bucketing))
                for bucketing in (True, False)}
    model = task.build(build_transformer_model(BertConfig.from_json_file(args.config)),
                       len(datasets[True].labels), options)
    model.compile(make_optimizer(options, datasets[True].steps_per_epoch), **task.compile_args(model))
    batches = {bucketing: data.train.repeat() for bucketing, data in datasets.items()}
    sizes = {bucketing: epoch_tokens(data.train) for bucketing, data in datasets.items()}

    def fit(bucketing: bool):
        model.fit(batches[bucketing], steps_per_epoch=args.steps, epochs=1, verbose=0, shuffle=False)

    for bucketing in (True, False):  # warm-up: tracing for the batch shapes
        model.fit(batches[bucketing], steps_per_epoch=3 * args.steps, epochs=1, verbose=0, shuffle=False)
    seconds = alternate({True: lambda: fit(True), False: lambda: fit(False)}, args.rounds)
    ratio = median_ratio(seconds[False], seconds[True])
    print(f"{args.task} on {args.train}: {sizes[True][2]} training examples, batch {args.batch_size}, "
          f"{args.steps} steps per engine per round, {args.rounds} alternating rounds, keras {keras.__version__}\n")
    print("| batching | batches/s (median) | examples/s (median) | padded tokens per real token (epoch) |")
    print("|---|---:|---:|---:|")
    for bucketing, name in ((True, "bucketed (16-token bands)"), (False, "shuffled order (0.1)")):
        real, padded, examples = sizes[bucketing]
        per_batch = examples / datasets[bucketing].steps_per_epoch
        rate = args.steps / statistics.median(seconds[bucketing])
        print(f"| {name} | {rate:.2f} | {rate * per_batch:.1f} | {padded / real:.3f} |")
    print(f"\nbucketed / unbucketed, time per batch: median {describe(ratio)} faster; batches per epoch "
          f"{datasets[True].steps_per_epoch} vs {datasets[False].steps_per_epoch}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
