"""A UniLM training step with the MLM head on the target positions only, against every position.

    python -m benchmarks.seq2seq_step --msra ../shared/data/msra_ner --config configs/roformer_small_chinese.json

`kbert train --task seq2seq` trains UniLM through `build_masked_lm`: the
vocabulary-wide head runs on the positions whose next token is in the target
(`Seq2SeqTask.training_model`). Before, it ran on every position of the batch
and the loss ignored the source and padding ones. This script builds both
training graphs on the same weights (random, from `--config`), batches real
MSRA generative-extraction pairs (`docs/examples/msra_generative_ie.py`'s
targets) at `--batch-size` × `--maxlen`, each padded to `--maxlen`, checks that
both give the same loss on the first batch, then alternates `--steps` training
steps of each for `--rounds` rounds after a warm-up, and prints steps/s and the
median per-round speed-up with its range.
"""

from __future__ import annotations

import argparse
import os
import statistics

import keras
import numpy as np

from benchmarks.alternating import alternate, describe, median_ratio
from kbert.builder import build_masked_lm, build_transformer_model
from kbert.tasks.labelling import read_tagged, spans
from kbert.tasks.seq2seq import IGNORED, Pair, Seq2SeqTask, encode_pairs
from kbert.tokenizers.wordpiece import Tokenizer
from kbert.training.optimizers import make_optimizer
from kbert.training.options import TrainingOptions


def msra_pairs(msra_dir: str, count: int):
    """The first `count` training sentences of MSRA, each with its entities as `TYPE:text` joined by `；`."""
    sentences, _ = read_tagged(os.path.join(msra_dir, "msra.train.bmes"))
    return [Pair(s.text, "；".join(f"{kind}:{s.text[a:b]}" for kind, a, b in spans(s.tags)), line)
            for line, s in enumerate(sentences[:count], 1)]


def batches(tokenizer, pairs, batch_size: int, maxlen: int):
    """Fixed-shape batches both ways: (inputs, labels) for every position, and for the target positions."""
    encoded, labels, _ = encode_pairs(tokenizer, pairs, maxlen)
    pad = lambda rows, width: np.array([list(row) + [0] * (width - len(row)) for row in rows], "int32")
    most = max(len(row) for row in labels)
    every, targets = [], []
    for start in range(0, len(encoded) - batch_size + 1, batch_size):
        rows, row_labels = encoded[start:start + batch_size], labels[start:start + batch_size]
        tokens, segments = pad([r[0] for r in rows], maxlen), pad([r[1] for r in rows], maxlen)
        dense = np.full((batch_size, maxlen), IGNORED, "int32")  # the label of every position, as before
        for row, ((_, _, positions), values) in enumerate(zip(rows, row_labels)):
            dense[row, positions] = values
        every.append(((tokens, segments), dense))
        targets.append(((tokens, segments, pad([r[2] for r in rows], most)), pad(row_labels, most)))
    return every, targets


def trainer(model: keras.Model, steps: int, jit_compile="auto") -> keras.Model:
    model.compile(make_optimizer(TrainingOptions(task="seq2seq"), steps, model),
                  loss=keras.losses.SparseCategoricalCrossentropy(ignore_class=IGNORED), jit_compile=jit_compile)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--msra", required=True, help="the folder of msra.train.bmes")
    parser.add_argument("--config", default="configs/roformer_small_chinese.json")
    parser.add_argument("--vocab", default="../shared/vocab/chinese_vocab.txt")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--maxlen", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10, help="training steps per engine per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jit-compile", action="store_true",
                        help="also time the target positions compiled with XLA (kbert train --jit-compile)")
    args = parser.parse_args()

    keras.utils.set_random_seed(0)
    tokenizer = Tokenizer(args.vocab)
    every, targets = batches(tokenizer, msra_pairs(args.msra, args.batch_size * args.steps), args.batch_size,
                             args.maxlen)
    task = Seq2SeqTask()
    before = build_transformer_model(args.config, **task.backbone_args())
    after = build_transformer_model(args.config, **task.backbone_args())
    after.set_weights(before.get_weights())
    engines = {"every position": trainer(before, args.steps), "target positions": trainer(build_masked_lm(after),
                                                                                          args.steps)}
    if args.jit_compile:
        xla = build_transformer_model(args.config, **task.backbone_args())
        xla.set_weights(before.get_weights())
        engines["target positions, XLA"] = trainer(build_masked_lm(xla), args.steps, jit_compile=True)
    data = {name: every if name == "every position" else targets for name in engines}
    losses = [float(model.evaluate(*data[name][0], verbose=0)) for name, model in engines.items()]
    real = np.mean([np.count_nonzero(inputs[0]) for inputs, _ in every]) / args.batch_size
    labelled = np.mean([np.count_nonzero(labels) for _, labels in targets]) / args.batch_size
    print(f"{args.config}, UniLM, batch {args.batch_size} x {args.maxlen}: {real:.1f} real tokens and "
          f"{labelled:.1f} target positions a row; first-batch loss "
          + ", ".join(f"{loss:.6f} ({name})" for name, loss in zip(engines, losses)))

    def run(model, data):
        return lambda: [model.train_on_batch(*batch) for batch in data]

    calls = {name: run(model, data[name]) for name, model in engines.items()}
    alternate(calls, rounds=1)  # warm-up: tracing and compilation
    seconds = alternate(calls, rounds=args.rounds)
    print("| engine | steps/s (median of rounds) |\n|---|---|")
    for name, values in seconds.items():
        print(f"| {name} | {args.steps / statistics.median(values):.2f} |")
    for name in list(engines)[1:]:
        speedup = median_ratio(seconds["every position"], seconds[name])
        print(f"{name} against every position: {describe(speedup)} ({args.rounds} alternating rounds "
              f"of {args.steps} steps)")


if __name__ == "__main__":
    main()
