"""The unlabelled Chinese text of ../shared/data, for `kbert pretrain` (training and validation splits only).

    python docs/examples/pretraining_corpus.py ../shared/data runs/pretraining-text

writes `OUT/train.txt` (the sentiment corpus's training reviews and MSRA's
training sentences, one a line) and `OUT/valid.txt` (the validation reviews
and MSRA's dev sentences), without their labels. No test text goes into
either, so the fine-tuned models' test figures are on text the pre-training
never saw.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Iterator

from kbert.io import atomic_write_text
from kbert.tasks.labelling import read_tagged

SPLITS = {"train": ("sentiment.train.data", "msra.train.bmes"), "valid": ("sentiment.valid.data", "msra.dev.bmes")}


def reviews(path: str) -> Iterator[str]:
    """The text column of `text<TAB>label` rows."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            text = line.rstrip("\n").rsplit("\t", 1)[0].strip()
            if text:
                yield text


def sentences(path: str) -> Iterator[str]:
    """The sentences of a tagged file, tags dropped."""
    for sentence in read_tagged(path)[0]:
        yield sentence.text


def write_corpus(data_dir: str, out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    for split, (review_file, msra_file) in SPLITS.items():
        lines = [*reviews(os.path.join(data_dir, "sentiment", review_file)),
                 *sentences(os.path.join(data_dir, "msra_ner", msra_file))]
        path = os.path.join(out_dir, f"{split}.txt")
        atomic_write_text(path, "".join(f"{line}\n" for line in lines))
        print(f"{path}: {len(lines)} lines, {sum(map(len, lines))} characters")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", help="../shared/data (sentiment/ and msra_ner/)")
    parser.add_argument("out_dir", help="where train.txt and valid.txt go")
    args = parser.parse_args(argv)
    write_corpus(args.data_dir, args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
