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
import time

import numpy as np

from kbert.data import PAD_MULTIPLE, encode_examples, read_examples
from kbert.train import load_classifier


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
    seconds = {True: [], False: []}
    labels = {}
    classifier.predict_proba(examples[:args.batch_size], args.batch_size)  # warm-up: tracing
    for _ in range(args.rounds):
        for bucketing in (True, False):
            start = time.perf_counter()
            labels[bucketing] = classifier.predict_proba(examples, args.batch_size, bucketing).argmax(-1)
            seconds[bucketing].append(time.perf_counter() - start)
    ratios = [plain / bucketed for bucketed, plain in zip(seconds[True], seconds[False])]
    real = sum(lengths)
    print(f"{len(examples)} examples from {args.data}, batch {args.batch_size}, {args.rounds} alternating rounds\n")
    print("| batching | examples/s (median) | padded tokens per real token |")
    print("|---|---:|---:|")
    for bucketing, name in ((True, "by length (bucketed)"), (False, "in file order")):
        order = sorted(lengths) if bucketing else lengths
        rate = len(examples) / statistics.median(seconds[bucketing])
        print(f"| {name} | {rate:.1f} | {padded_tokens(order, args.batch_size) / real:.3f} |")
    print(f"\nbucketed / file order: median {statistics.median(ratios):.2f}x "
          f"(rounds {min(ratios):.2f}-{max(ratios):.2f}x); same labels: {bool(np.all(labels[True] == labels[False]))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
