"""What the input checks cost: BERT-base inference against the checks alone.

The embedding layers assert that token and segment ids are in range and the
position layer that the sequence fits (see `kbert.layers.checked_ids`); those
assertions run inside every forward pass. This times, in alternating rounds
on the same batch, the full forward pass (checks included) and a function
that runs only the checks, and reports the median per-round ratio: an upper
bound on the checks' share of inference time.

    python -m benchmarks.input_checks            # BERT-base, batch 8 x 128, 9 rounds
    python -m benchmarks.input_checks --quick    # tiny config
"""

from __future__ import annotations

import argparse
import statistics

import tensorflow as tf

from benchmarks.alternating import alternate, median_ratio
from benchmarks.run import kbert_inference, random_batch
from kbert.models.config import BertConfig, bundled_config_path
from kbert.layers import checked_ids


def checks_only(config: BertConfig):
    @tf.function
    def run(tokens, segments):
        length_check = tf.debugging.assert_less_equal(tf.shape(tokens)[1], config.max_position_embeddings)
        with tf.control_dependencies([length_check]):
            checked = (checked_ids(tokens, config.vocab_size, "Embedding-Token (vocab_size)"),
                       checked_ids(segments, config.type_vocab_size, "Embedding-Segment (type_vocab_size)"))
        return tf.reduce_sum(checked[0]) + tf.reduce_sum(checked[1])

    return lambda t, s: run(t, s).numpy()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny config, few rounds (default: off)")
    parser.add_argument("--rounds", type=int, default=9, help="alternating rounds (default: 9)")
    args = parser.parse_args(argv)
    config = BertConfig.from_json_file(bundled_config_path("bert_tiny" if args.quick else "bert_base_chinese"))
    batch, length, repeats = 8, 64 if args.quick else 128, 20
    tokens, segments = random_batch(config, batch, length)
    engines = {"forward pass (with checks)": kbert_inference(config, xla=False), "checks alone": checks_only(config)}
    for engine in engines.values():
        engine(tokens, segments)
    rounds = 3 if args.quick else args.rounds
    times = alternate({name: (lambda engine=engine: engine(tokens, segments)) for name, engine in engines.items()},
                      rounds, calls=repeats)
    ratio = median_ratio(times["checks alone"], times["forward pass (with checks)"])
    print(f"batch {batch} x {length}, {rounds} alternating rounds of {repeats} calls each\n")
    print("| function | median ms per call |")
    print("|---|---:|")
    for name, values in times.items():
        print(f"| {name} | {1000 * statistics.median(values):.3f} |")
    print(f"\nchecks / forward pass: median {100 * ratio['median']:.3f} % "
          f"(rounds {100 * ratio['min']:.3f}-{100 * ratio['max']:.3f} %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
