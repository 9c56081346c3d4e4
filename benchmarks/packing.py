"""Pre-training rows one document each (padded) against several documents a row, in alternating rounds.

    python -m benchmarks.packing --train ../shared/data/sentiment/sentiment.train.data \\
        --config configs/bert_small_chinese.json --maxlen 256

Reads `--documents` lines of the file (a TSV's text column: what precedes the
last tab), and makes `kbert pretrain`'s batches of them three ways
(`--pack none`, `documents`, `stream`; `kbert.training.masking`), each with
the model `kbert pretrain` trains on them (the same config; `documents` with
`build_masked_lm(packed=True)`). Then it alternates `fit` on `--steps` batches
of each for `--rounds` rounds after a warm-up, and prints real (not padding)
tokens per second, the padded tokens per real token of the whole epoch, and
the per-round median ratio of real tokens per second against `none`.
"""

from __future__ import annotations

import argparse
import statistics

import keras
import numpy as np

from benchmarks.alternating import alternate, describe, median_ratio
from kbert.builder import build_masked_lm, build_transformer_model
from kbert.models.config import BertConfig
from kbert.tasks.pretraining import tokenize_words
from kbert.tokenizers.wordpiece import Tokenizer
from kbert.training.masking import MaskedBatches, max_predictions, pack_documents, pack_sequences

PACKINGS = ("none", "documents", "stream")


def batches(packing: str, words, tokenizer, args) -> MaskedBatches:
    mask_args = {"rate": 0.15, "mask_id": tokenizer.token_to_id("[MASK]"), "vocab_size": tokenizer.vocab_size}
    if packing == "stream":
        rows = pack_sequences(words, args.maxlen, tokenizer.cls_id, tokenizer.sep_id)
        return MaskedBatches(rows, args.batch_size, shuffle=True, segments=True, **mask_args)
    documents = pack_documents(words, args.maxlen, tokenizer.cls_id, tokenizer.sep_id, several=packing == "documents")
    return MaskedBatches(documents, args.batch_size, shuffle=True, segments=True, positions=packing == "documents",
                         **mask_args)


def engine(packing: str, data: MaskedBatches, args):
    """`fit` on `--steps` batches of `data`, drawn at random from the whole epoch, as `kbert pretrain` runs."""
    keras.utils.set_random_seed(0)
    bert = build_transformer_model(BertConfig.from_json_file(args.config), with_mlm="linear")
    slots = data.slots or max_predictions(args.maxlen, 0.15)
    model = build_masked_lm(bert, slots, packed=packing == "documents")
    model.compile(keras.optimizers.AdamW(1e-4),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                  reduction="mean_with_sample_weight"))
    epoch = [data[index] for index in range(len(data))]
    real = [int(np.count_nonzero(inputs["Input-Token"])) for inputs, _, _ in epoch]
    rng = np.random.default_rng(0)
    drawn = []

    def fit():
        chosen = rng.choice(len(epoch), size=args.steps, replace=len(epoch) < args.steps)
        drawn.append(sum(real[index] for index in chosen))
        for index in chosen:
            inputs, labels, weights = epoch[index]
            model.train_on_batch([inputs[tensor.name] for tensor in model.inputs], labels, sample_weight=weights)

    padded = sum(inputs["Input-Token"].size for inputs, _, _ in epoch) / sum(real)
    return fit, drawn, padded, len(data.token_ids)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", default="../shared/data/sentiment/sentiment.train.data")
    parser.add_argument("--config", default="configs/bert_small_chinese.json")
    parser.add_argument("--vocab", default="../shared/vocab/chinese_vocab.txt")
    parser.add_argument("--documents", type=int, default=2000, help="lines read (default: 2000)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--maxlen", type=int, default=256)
    parser.add_argument("--steps", type=int, default=10, help="batches per engine per round (default: 10)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default: 5)")
    args = parser.parse_args(argv)
    with open(args.train, encoding="utf-8") as handle:
        lines = [line.rstrip("\n").rsplit("\t", 1)[0] for line, _ in zip(handle, range(args.documents))]
    tokenizer = Tokenizer(args.vocab)
    words = list(tokenize_words(tokenizer, [line for line in lines if line.strip()], "jieba"))
    engines = {packing: engine(packing, batches(packing, words, tokenizer, args), args) for packing in PACKINGS}
    for fit, drawn, _, _ in engines.values():  # warm-up: tracing, the first steps' allocations
        fit()
        fit()
        drawn.clear()
    seconds = alternate({packing: item[0] for packing, item in engines.items()}, args.rounds)
    print(f"kbert pretrain's rows on {len(words)} lines of {args.train}, {args.config}, batch {args.batch_size}, "
          f"maxlen {args.maxlen}; {args.steps} steps per engine per round, {args.rounds} alternating rounds, "
          f"keras {keras.__version__} ({keras.backend.backend()})\n")
    print("| --pack | rows | padded tokens per real token | real tokens/s (median) |")
    print("|---|---:|---:|---:|")
    rates = {}
    for packing, (_, drawn, padded, rows) in engines.items():
        rates[packing] = [tokens / value for tokens, value in zip(drawn, seconds[packing])]
        print(f"| {packing} | {rows} | {padded:.2f} | {statistics.median(rates[packing]):,.0f} |")
    print()
    for packing in PACKINGS[1:]:
        print(f"{packing} / none, real tokens/s: median {describe(median_ratio(rates[packing], rates['none']))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
