"""Batch prediction by length (cheapest cut, or a batch per band) and in file order, in alternating rounds.

    python -m benchmarks.bucketing --model runs/sentiment-small \\
        --data ../shared/data/sentiment/sentiment.test.data
    python -m benchmarks.bucketing --model runs/sentiment-base \\
        --data ../shared/data/sentiment/sentiment.test.data --limit 256 --chunk 16   # a server's batches of 16

Times a classifier's prediction of the file's examples three ways, each once
a round for `--rounds` alternating rounds: by length, cut where the calls
cost least (`batches_by_length`'s default: each call counted as
`CALL_COST_TOKENS` padded tokens); by length, a batch per 16-token band
(call cost 0, kbert's batching before); and in file order. `--chunk N`
predicts the examples N at a time, as a server does the texts of N
concurrent requests. Prints examples/s, model calls and padded tokens per
real token of each, the median per-round ratios with their ranges, and
whether the predicted labels agree.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Dict, List

import keras
import numpy as np

from benchmarks.alternating import alternate, describe, median_ratio
from kbert.tasks.classification import load_classifier
from kbert.training.data import encode_examples, read_examples
from kbert.training.pipeline import CALL_COST_TOKENS, batches_by_length

BATCHINGS = {  # name: (bucketing, call_cost)
    f"by length, cheapest cut (a call = {CALL_COST_TOKENS} tokens)": (True, CALL_COST_TOKENS),
    "by length, a batch per 16-token band": (True, 0),
    "in file order": (False, 0),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a classifier's model directory from kbert train")
    parser.add_argument("--data", required=True, help="a labelled or plain data file")
    parser.add_argument("--batch-size", type=int, default=64, help="examples per batch at most (default: 64)")
    parser.add_argument("--chunk", type=int, help="predict the examples this many at a time, as a server's batch "
                                                  "(default: all at once, as kbert predict)")
    parser.add_argument("--limit", type=int, help="the file's first N examples only (default: all)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default: 5)")
    args = parser.parse_args(argv)
    classifier = load_classifier(args.model)
    examples, _ = read_examples(args.data, labelled=False)
    encoded = encode_examples(classifier.tokenizer, examples[:args.limit], classifier.maxlen)
    chunk = args.chunk or len(encoded)
    chunks = [encoded[start:start + chunk] for start in range(0, len(encoded), chunk)]
    labels: Dict[str, np.ndarray] = {}
    calls: Dict[str, int] = {}
    padded: Dict[str, int] = {}

    def predict(name: str) -> None:
        bucketing, call_cost = BATCHINGS[name]
        predicted: List[np.ndarray] = []
        calls[name] = padded[name] = 0
        for examples_of_chunk in chunks:
            rows_out = np.empty(len(examples_of_chunk), dtype=np.int64)
            for rows, features in batches_by_length(examples_of_chunk, args.batch_size, bucketing,
                                                    maxlen=classifier.maxlen, call_cost=call_cost):
                probabilities = keras.ops.convert_to_numpy(classifier.model.predict_on_batch(list(features)))
                rows_out[rows] = probabilities[:len(rows)].argmax(-1)
                calls[name] += 1
                padded[name] += features[0].size
            predicted.append(rows_out)
        labels[name] = np.concatenate(predicted)

    for name in BATCHINGS:  # warm-up: tracing each shape once
        predict(name)
    seconds = alternate({name: (lambda name=name: predict(name)) for name in BATCHINGS}, args.rounds)
    real = sum(len(ids) for ids, _ in encoded)
    cheapest, by_band, in_order = BATCHINGS
    print(f"{len(encoded)} examples from {args.data}, {chunk} at a time, batches of at most {args.batch_size}, "
          f"{args.rounds} alternating rounds\n")
    print("| batching | examples/s (median) | model calls | padded tokens per real token |")
    print("|---|---:|---:|---:|")
    for name in BATCHINGS:
        rate = len(encoded) / statistics.median(seconds[name])
        print(f"| {name} | {rate:.1f} | {calls[name]} | {padded[name] / real:.3f} |")
    print(f"\ncheapest cut / a batch per band: {describe(median_ratio(seconds[by_band], seconds[cheapest]))}")
    print(f"cheapest cut / file order: {describe(median_ratio(seconds[in_order], seconds[cheapest]))}")
    print(f"same labels: {all(np.array_equal(labels[cheapest], labels[name]) for name in BATCHINGS)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
