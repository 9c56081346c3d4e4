"""float32 against bfloat16 (`--mixed-precision bf16`): speed, output difference, accuracy.

    python -m benchmarks.precision --model runs/sentiment-small \\
        --data ../shared/data/sentiment/sentiment.test.data

Prints the CPU's bf16 units (`avx512_bf16`, `amx_bf16`); without them bf16 is
emulated, and the bf16 rows are skipped. Then, in alternating rounds:

- BERT-base (`--config`, random weights, the same weights in both precisions),
  batch 8 x 128: tokens/s of the backbone's forward pass in a `tf.function`,
  and the largest difference of its outputs;
- the fine-tuned classifier of `--model` on `--data`: examples/s of
  `predict_proba` (bucketed), test accuracy in both, and how many labels differ.
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks.alternating import alternate, describe, median_ratio  # noqa: E402
from kbert.builder import build_transformer_model  # noqa: E402
from kbert.models.config import BertConfig  # noqa: E402
from kbert.training.data import read_examples  # noqa: E402
from kbert.training.precision import cpu_bf16_units, precision_policy  # noqa: E402
from kbert.tasks.classification import load_classifier  # noqa: E402

PRECISIONS = {"float32": None, "bf16": "bf16"}


def backbones(config_path: str, batch: int, length: int):
    """The forward pass of one BERT in each precision (same weights), and a random batch."""
    config = BertConfig.from_json_file(config_path)
    models = {}
    for name, precision in PRECISIONS.items():
        with precision_policy(precision):
            models[name] = build_transformer_model(config)
    models["bf16"].set_weights(models["float32"].get_weights())
    rng = np.random.default_rng(0)
    tokens = tf.constant(rng.integers(1, config.vocab_size, size=(batch, length)), tf.int32)
    segments = tf.zeros_like(tokens)
    calls = {name: tf.function(lambda t, s, m=model: tf.cast(m([t, s], training=False), tf.float32))
             for name, model in models.items()}
    return calls, (tokens, segments)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a fine-tuned classifier's directory (kbert train)")
    parser.add_argument("--data", required=True, help="its labelled test file")
    parser.add_argument("--config", default="configs/bert_base_chinese.json", help="the backbone to time")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (default: 7)")
    args = parser.parse_args(argv)
    units = cpu_bf16_units()
    print(f"CPU bf16 units: {', '.join(units) if units else 'none'}; TensorFlow {tf.__version__}, "
          f"{os.cpu_count()} CPUs")
    if not units:
        print("No bf16 units: bfloat16 would be emulated, so the bf16 rows are skipped.")
        return 0

    batch, length = 8, 128
    calls, inputs = backbones(args.config, batch, length)
    outputs = {name: call(*inputs).numpy() for name, call in calls.items()}  # also the warm-up
    seconds = alternate({name: (lambda call=call: call(*inputs).numpy()) for name, call in calls.items()},
                        args.rounds)
    difference = np.abs(outputs["bf16"] - outputs["float32"])
    print(f"\n{os.path.basename(args.config)}, batch {batch} x {length}, {args.rounds} alternating rounds\n")
    print("| precision | tokens/s (median) |")
    print("|---|---:|")
    for name in calls:
        print(f"| {name} | {batch * length / statistics.median(seconds[name]):,.0f} |")
    print(f"\nbf16 / float32 speed: median {describe(median_ratio(seconds['float32'], seconds['bf16']))}; "
          f"outputs differ by at most {difference.max():.4f} (mean {difference.mean():.5f}; "
          f"outputs' std {outputs['float32'].std():.3f})")

    examples, _ = read_examples(args.data)
    classifiers = {}
    for name, precision in PRECISIONS.items():
        with precision_policy(precision):
            classifiers[name] = load_classifier(args.model)
    truth = classifiers["float32"].labels.ids(examples, args.data)
    probabilities = {name: classifier.predict_proba(examples) for name, classifier in classifiers.items()}
    seconds = alternate({name: (lambda c=classifier: c.predict_proba(examples))
                         for name, classifier in classifiers.items()}, args.rounds)
    print(f"\n{args.model} on {args.data} ({len(examples)} examples, bucketed batches of 64)\n")
    print("| precision | examples/s (median) | accuracy |")
    print("|---|---:|---:|")
    for name in classifiers:
        accuracy = float(np.mean(probabilities[name].argmax(-1) == truth))
        print(f"| {name} | {len(examples) / statistics.median(seconds[name]):.1f} | {accuracy:.4f} |")
    changed = int(np.sum(probabilities["bf16"].argmax(-1) != probabilities["float32"].argmax(-1)))
    largest = np.abs(probabilities["bf16"] - probabilities["float32"]).max()
    print(f"\nbf16 / float32 speed: median {describe(median_ratio(seconds['float32'], seconds['bf16']))}; "
          f"{changed} labels differ; probabilities differ by at most {largest:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
