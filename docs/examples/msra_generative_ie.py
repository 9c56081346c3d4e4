"""MSRA NER as generative information extraction (`kbert train --task seq2seq`, UniLM or T5).

    python docs/examples/msra_generative_ie.py pairs ../shared/data/msra_ner runs/msra-ie-data
    kbert train --task seq2seq --config configs/roformer_small_chinese.json \\
        --vocab ../shared/vocab/chinese_vocab.txt --train runs/msra-ie-data/train.tsv \\
        --valid runs/msra-ie-data/dev.tsv --epochs 2 --batch-size 32 --lr 1e-3 --maxlen 256 --out runs/msra-ie
    python docs/examples/msra_generative_ie.py score runs/msra-ie runs/msra-ie-data/test.tsv
    python docs/examples/msra_generative_ie.py tokens runs/msra-ie runs/msra-ie-data/train.tsv \
        runs/msra-ie-data/dev.tsv

`pairs` writes `sentence<TAB>target` files, the target being the sentence's
entities in order of appearance as `TYPE:text` joined by `；` (empty when
there are none). `score` generates a target for every test sentence (with
a T5 model too), prints `kbert evaluate`'s exact match and character F1, and
scores the entities it names against the reference: an entity counts when
its type and text both match (as many times as it occurs), so the figures
compare with a tagger's exact-span entity F1 except that a generated entity
has no position. `tokens` shows what a model has learned: its target-token
accuracy with the reference target fed (as in training), split by whether the
token is copied from the source or is part of the format (types, `:`, `；`,
the end), and by how often it is a target in the training file.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from typing import List, Tuple

from kbert.tasks.labelling import read_tagged, spans

SEPARATOR, TYPE_MARK = "；", ":"


def target_of(text: str, tags) -> str:
    """The extraction target of one tagged sentence."""
    return SEPARATOR.join(f"{kind}{TYPE_MARK}{text[start:end]}" for kind, start, end in spans(tags))


def entities_of(target: str) -> List[Tuple[str, str]]:
    """`(TYPE, text)` pairs named by a target (types upper-cased: the tokenizer lower-cases them)."""
    found = []
    for item in "".join(target.split()).split(SEPARATOR):
        kind, mark, text = item.partition(TYPE_MARK)
        if mark and kind and text:
            found.append((kind.upper(), text))
    return found


def write_pairs(msra_dir: str, out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=False)  # never overwrite an earlier run's data
    for split in ("train", "dev", "test"):
        sentences, _ = read_tagged(os.path.join(msra_dir, f"msra.{split}.bmes"))
        with open(os.path.join(out_dir, f"{split}.tsv"), "w", encoding="utf-8") as handle:
            for sentence in sentences:
                handle.write(f"{sentence.text}\t{target_of(sentence.text, sentence.tags)}\n")
        print(f"{out_dir}/{split}.tsv: {len(sentences)} pairs")


def score(model_dir: str, data_path: str, beam_size: int) -> None:
    from kbert.tasks.seq2seq import evaluate, read_pairs

    pairs, _ = read_pairs(data_path)
    # One decoding pass gives `kbert evaluate`'s exact match and character F1, and the entities.
    report = evaluate(model_dir, data_path, beam_size=beam_size)
    generated = report["generated"]
    counts = collections.defaultdict(lambda: [0, 0, 0])  # type -> hits, predicted, true
    for pair, output in zip(pairs, generated):
        truth = collections.Counter(entities_of(pair.target))
        found = collections.Counter(entities_of(output))
        for (kind, _), number in found.items():
            counts[kind][1] += number
        for (kind, _), number in truth.items():
            counts[kind][2] += number
        for (kind, _), number in (truth & found).items():
            counts[kind][0] += number
    print(f"{data_path}: {len(pairs)} sentences, beam {beam_size}: exact match {report['exact_match']:.4f}, "
          f"character F1 {report['char_f1']:.4f}")
    print(f"{'type':8}  precision  recall     f1  support")
    kinds = sorted(kind for kind in counts if counts[kind][2])  # types that the references have
    for kind, (hits, predicted, true) in [(k, counts[k]) for k in kinds] + [
            ("overall", [sum(counts[k][i] for k in counts) for i in range(3)])]:
        precision, recall = hits / max(predicted, 1), hits / max(true, 1)
        f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
        print(f"{kind:8}  {precision:9.4f}  {recall:6.4f}  {f1:5.4f}  {true:7d}")


FREQUENCY_BANDS = (10, 50, 500)  # how often a token is a training target: up to 10, 50, 500 times, or more


def token_accuracy(model_dir: str, train_path: str, data_path: str, batch_size: int = 32) -> dict:
    """Teacher-forced target-token accuracy on `data_path`: `{(kind, band): (right, tokens)}`.

    `kind` is `"copied"` for a token of the source, `"format"` for any other;
    `band` the most times (`FREQUENCY_BANDS`, None: more) that a token is a
    target in `train_path`. UniLM or T5 alike, through the graph training used.
    """
    import numpy as np
    from keras import ops

    from kbert.tasks.seq2seq import Seq2SeqTask, encode_pairs, load_generator, read_pairs

    loaded = load_generator(model_dir)
    task, maxlen, tokenizer = Seq2SeqTask.from_options(loaded.options), loaded.options.maxlen, loaded.tokenizer
    trained = task.training_model(loaded.model)
    _, train_labels, _ = encode_pairs(tokenizer, read_pairs(train_path)[0], maxlen, task.encoder_decoder)
    targets = collections.Counter(token for row in train_labels for token in row)
    encoded, labels, _ = encode_pairs(tokenizer, read_pairs(data_path)[0], maxlen, task.encoder_decoder)
    counts = collections.defaultdict(lambda: [0, 0])
    for start in range(0, len(encoded), batch_size):
        rows = encoded[start:start + batch_size]
        features = [np.array([list(ids) + [0] * (max(map(len, column)) - len(ids)) for ids in column], "int32")
                    for column in zip(*rows)]
        guesses = ops.convert_to_numpy(trained.predict_on_batch(features)).argmax(-1)
        for row, row_labels, row_guesses in zip(rows, labels[start:start + batch_size], guesses):
            # T5's source is its first input; UniLM's the segment-0 tokens of its one sequence.
            source = set(row[0] if task.encoder_decoder else [t for t, s in zip(row[0], row[1]) if s == 0])
            source -= {tokenizer.cls_id, tokenizer.sep_id}
            for label, guess in zip(row_labels, row_guesses):
                band = next((most for most in FREQUENCY_BANDS if targets[label] <= most), None)
                count = counts["copied" if label in source else "format", band]
                count[0] += int(guess == label)
                count[1] += 1
    return {key: tuple(value) for key, value in counts.items()}


def print_token_accuracy(model_dir: str, train_path: str, data_path: str) -> None:
    counts = token_accuracy(model_dir, train_path, data_path)
    print(f"{model_dir} on {data_path}, teacher-forced target-token accuracy:")
    print(f"{'kind':7}  {'times a training target':>22}  accuracy  tokens")
    for kind in ("copied", "format"):
        bands = [band for band in (*FREQUENCY_BANDS, None) if (kind, band) in counts]
        for band, (right, total) in [(band, counts[kind, band]) for band in bands] + [
                ("all", [sum(counts[kind, band][i] for band in bands) for i in (0, 1)])]:
            label = {None: f"> {FREQUENCY_BANDS[-1]}", "all": "all"}.get(band, f"<= {band}")
            print(f"{kind:7}  {label:>22}  {right / total:8.3f}  {total:6d}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    pairs = commands.add_parser("pairs", help="write train/dev/test pairs from MSRA's tagged files")
    pairs.add_argument("msra_dir")
    pairs.add_argument("out_dir", help="a new directory")
    scoring = commands.add_parser("score", help="entity P/R/F1 of a trained model's generated targets")
    scoring.add_argument("model_dir")
    scoring.add_argument("data")
    scoring.add_argument("--beam-size", type=int, default=1)
    tokens = commands.add_parser("tokens", help="teacher-forced target-token accuracy, copied or format tokens, "
                                                "by how often each is a training target")
    tokens.add_argument("model_dir")
    tokens.add_argument("train", help="the training pairs (for the counts)")
    tokens.add_argument("data", help="the pairs to score")
    args = parser.parse_args(argv)
    if args.command == "pairs":
        write_pairs(args.msra_dir, args.out_dir)
    elif args.command == "tokens":
        print_token_accuracy(args.model_dir, args.train, args.data)
    else:
        score(args.model_dir, args.data, args.beam_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
