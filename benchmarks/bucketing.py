"""Batch prediction with and without length bucketing, in alternating rounds.

    python -m benchmarks.bucketing --model runs/sentiment-small \\
        --data ../shared/data/sentiment/sentiment.test.data

Times `predict_proba` on every example of the file, bucketed (batches of
similar length) and in file order, alternating the two for `--rounds` rounds,
and prints examples/s, the median per-round ratio with its range, the padded
tokens per real token of each, and whether the predicted labels agree.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from benchmarks.alternating import alternate, median_ratio
from kbert.training.data import PAD_MULTIPLE, encode_examples, read_examples
from kbert.tasks.classification import load_classifier


def padded_tokens(lengths, batch_size: int) -> int:
    """Tokens in the batches make_dataset builds: each padded to its longest, rounded up to 16."""
    longest = max(lengths)
    total = 0
    for start in range(0, len(lengths), batch_size):
        batch = lengths[start:start + batch_size]
        total += len(batch) * min(-(-max(batch) // PAD_MULTIPLE) * PAD_MULTIPLE, longest)
    return total


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a model directory from kbert train")
    parser.add_argument("--data", required=True, help="a labelled or plain data file")
    parser.add_argument("--batch-size", type=int, default=64, help="examples per batch (default: 64)")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (default: 7)")
    args = parser.parse_args(argv)
    classifier = load_classifier(args.model)
    examples, _ = read_examples(args.data, labelled=False)
    lengths = [len(ids) for ids, _ in encode_examples(classifier.tokenizer, examples, classifier.maxlen)]
    labels = {}

    def predict(bucketing: bool):
        labels[bucketing] = classifier.predict_proba(examples, args.batch_size, bucketing).argmax(-1)

    classifier.predict_proba(examples[:args.batch_size], args.batch_size)  # warm-up: tracing
    seconds = alternate({True: lambda: predict(True), False: lambda: predict(False)}, args.rounds)
    ratio = median_ratio(seconds[False], seconds[True])
    real = sum(lengths)
    print(f"{len(examples)} examples from {args.data}, batch {args.batch_size}, {args.rounds} alternating rounds\n")
    print("| batching | examples/s (median) | padded tokens per real token |")
    print("|---|---:|---:|")
    for bucketing, name in ((True, "by length (bucketed)"), (False, "in file order")):
        order = sorted(lengths) if bucketing else lengths
        rate = len(examples) / statistics.median(seconds[bucketing])
        print(f"| {name} | {rate:.1f} | {padded_tokens(order, args.batch_size) / real:.3f} |")
    print(f"\nbucketed / file order: median {ratio['median']:.2f}x (rounds {ratio['min']:.2f}-{ratio['max']:.2f}x); "
          f"same labels: {bool(np.all(labels[True] == labels[False]))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
