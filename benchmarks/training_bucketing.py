"""Training steps with and without length bucketing (and keras-hub's), in alternating rounds.

    python -m benchmarks.training_bucketing \\
        --train ../shared/data/sentiment/sentiment.train.data --config configs/bert_small_chinese.json
    python -m benchmarks.training_bucketing --task ner \\
        --train ../shared/data/msra_ner/msra.train.bmes --config configs/bert_small_chinese.json

Builds the task's model as `kbert train` does and its training batches both
ways (the same examples, shuffled; bucketed batches hold one 16-token band of
lengths). For `classify`, when keras-hub is installed, it also builds
`keras_hub.models.BertTextClassifier` on a backbone of the same size, with its
own preprocessor (`BertTextClassifierPreprocessor`, the same vocabulary,
`sequence_length=maxlen`) applied once to the same examples beforehand, so only
its training steps are timed. Then it alternates `fit` on `--steps` batches of
each engine (drawn at random from one whole epoch of its batches) for
`--rounds` rounds after a warm-up, and prints training examples/s, the median
per-round ratios with their range, and the padded tokens per real token of a
whole epoch.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import statistics
from typing import Callable, Dict, NamedTuple

import keras
import numpy as np
import tensorflow as tf

from benchmarks.alternating import alternate, describe, median_ratio
from kbert.builder import build_transformer_model
from kbert.models.config import BertConfig
from kbert.training.data import read_examples
from kbert.training.options import TrainingOptions
from kbert.tasks import get_task
from kbert.tokenizers.wordpiece import Tokenizer
from kbert.training.optimizers import make_optimizer


class Engine(NamedTuple):
    fit: Callable[[int], None]  # trains on this many batches
    examples_per_batch: float
    padded_per_real: float  # padded tokens per real token over one epoch


def engine(model: keras.Model, dataset, token_ids: Callable, seed: int = 0) -> Engine:
    """Times `model.fit` on random samples of the batches of one epoch of `dataset`.

    Each call draws its batches anew from the whole epoch, so every round sees
    the epoch's mix of lengths (the first batches of a bucketed epoch are not
    typical: short bands fill first).
    """
    batches = list(dataset)
    tokens = [token_ids(batch).numpy() for batch in batches]
    real = sum(int(np.count_nonzero(batch)) for batch in tokens)
    padded = sum(int(batch.size) for batch in tokens)
    examples = sum(int(batch.shape[0]) for batch in tokens)
    rng = np.random.default_rng(seed)

    def fit(steps: int) -> None:
        chosen = rng.choice(len(batches), size=steps, replace=False)
        sample = tf.data.Dataset.from_generator(lambda: (batches[index] for index in chosen),
                                                output_signature=dataset.element_spec)
        model.fit(sample, steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False)

    return Engine(fit, examples / len(batches), padded / real)


def kbert_engines(args, options: TrainingOptions) -> Dict[str, Engine]:
    task = get_task(options)
    tokenizer = Tokenizer(args.vocab)
    engines = {}
    for bucketing, name in ((True, "kbert, bucketed (16-token bands)"), (False, "kbert, shuffled order (0.1)")):
        data = task.read(tokenizer, args.train, None, None, dataclasses.replace(options, bucketing=bucketing))
        model = task.build(build_transformer_model(BertConfig.from_json_file(args.config)),
                           len(data.labels), options)
        model.compile(make_optimizer(options, data.steps_per_epoch), **task.compile_args(model))
        engines[name] = engine(model, data.train, lambda batch: batch[0][0])
    return engines


def keras_hub_engine(args, options: TrainingOptions) -> Engine:
    """keras-hub's BertTextClassifier, of the same size, on the same (shuffled) examples."""
    import keras_hub

    config = BertConfig.from_json_file(args.config)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config.vocab_size, num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads, hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size, dropout=config.hidden_dropout_prob,
        max_sequence_length=config.max_position_embeddings, num_segments=config.type_vocab_size)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
        keras_hub.models.BertTokenizer(vocabulary=args.vocab, lowercase=True), sequence_length=args.maxlen)
    examples, _ = read_examples(args.train)
    names = sorted({example.label for example in examples})
    texts = tf.constant([example.text for example in examples])
    labels = tf.constant([names.index(example.label) for example in examples])
    dataset = (tf.data.Dataset.from_tensor_slices((texts, labels))
               .shuffle(len(examples), seed=options.seed).batch(options.batch_size)
               .map(preprocessor, num_parallel_calls=tf.data.AUTOTUNE).cache())
    classifier = keras_hub.models.BertTextClassifier(backbone, num_classes=len(names), preprocessor=None)
    steps = -(-len(examples) // options.batch_size)
    classifier.compile(optimizer=make_optimizer(options, steps),
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return engine(classifier, dataset, lambda batch: batch[0]["token_ids"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=["classify", "ner"], default="classify")
    parser.add_argument("--train", required=True, help="training data for the task")
    parser.add_argument("--config", default="configs/bert_small_chinese.json")
    parser.add_argument("--vocab", default="../shared/vocab/chinese_vocab.txt")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--maxlen", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20, help="batches per engine per round (default: 20)")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (default: 7)")
    parser.add_argument("--no-peers", action="store_true", help="kbert only (no keras-hub)")
    args = parser.parse_args(argv)
    options = TrainingOptions(task=args.task, batch_size=args.batch_size, maxlen=args.maxlen)
    engines = kbert_engines(args, options)
    if args.task == "classify" and not args.no_peers and importlib.util.find_spec("keras_hub"):
        engines["keras-hub BertTextClassifier"] = keras_hub_engine(args, options)
    for item in engines.values():  # warm-up: tracing for the batch shapes
        item.fit(3 * args.steps)
    seconds = alternate({name: (lambda item=item: item.fit(args.steps)) for name, item in engines.items()},
                        args.rounds)
    print(f"{args.task} on {args.train}, {args.config}, batch {args.batch_size}, maxlen {args.maxlen}; "
          f"{args.steps} steps per engine per round, {args.rounds} alternating rounds, keras {keras.__version__}\n")
    print("| engine | batches/s (median) | examples/s (median) | padded tokens per real token (epoch) |")
    print("|---|---:|---:|---:|")
    rates = {}
    for name, item in engines.items():
        per_second = [args.steps * item.examples_per_batch / value for value in seconds[name]]
        rates[name] = per_second
        print(f"| {name} | {args.steps / statistics.median(seconds[name]):.2f} | "
              f"{statistics.median(per_second):.1f} | {item.padded_per_real:.3f} |")
    bucketed, *others = engines
    print()
    for name in others:
        # examples/s ratio per round: the engines' batches hold different numbers of examples
        ratio = median_ratio(rates[bucketed], rates[name])
        print(f"{bucketed} / {name}, examples/s: median {describe(ratio)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
