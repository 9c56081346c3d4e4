"""A small made-up Chinese corpus for trying every `kbert` command from a clone, in seconds.

    python docs/examples/toy_data.py runs/toy

writes into OUT, from templates and a fixed seed (the same files on every run):

- `vocab.txt`: a WordPiece vocabulary of the corpus's characters (the special tokens first);
- `config.json`: the bundled `configs/bert_tiny.json` (2 layers, H 32) with `vocab_size` that
  vocabulary's, so a model's outputs cover exactly its tokens;
- `reviews.{train,valid,test}.tsv`: `text<TAB>label` hotel reviews, 1 positive, 0 negative;
- `news.{train,valid,test}.bmes`: sentences tagged per character (BMES, PER/LOC/ORG);
- `entities.{train,valid,test}.tsv`: `sentence<TAB>its entities` (`人名:张伟；地名:北京`), for seq2seq;
- `text.{train,valid}.txt`: the reviews and sentences without labels, for `kbert pretrain` (and
  `kbert train --task embed`, SimCSE);
- `questions.{train,valid,test}.tsv`: `query<TAB>review<TAB>label`, a question about an aspect
  (`房间怎么样`) and a review, 1 when the review speaks of it: for `kbert train --task rerank`.

The sentences are too regular to say anything about a model's quality: they exist so that a
reader can run each command of the README, end to end, before fetching real data
(`../shared`'s corpora, or the datasets the guides in docs/ name).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from typing import List, Tuple

from kbert.io import atomic_write_text
from kbert.models.config import bundled_config_path

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SPLITS = {"train": 800, "valid": 100, "test": 100}
SEED = 20261125

ASPECTS = ["房间", "服务", "早餐", "位置", "价格", "前台", "床", "卫生"]
DEGREES = ["很", "非常", "特别", "比较", "真的"]
GOOD = ["干净", "热情", "方便", "实惠", "舒服", "安静", "好"]
BAD = ["脏", "冷淡", "偏远", "贵", "吵", "差", "旧"]
ENDINGS = ["", "，下次还来", "，推荐", "，不会再来了", "。"]

PEOPLE = ["张伟", "李娜", "王芳", "刘洋", "陈静", "赵磊"]
PLACES = ["北京", "上海", "广州", "杭州", "南京", "西安"]
ORGANISATIONS = ["国务院", "外交部", "新华社", "北京大学", "人民银行"]
EVENTS = ["{PER}在{LOC}会见了{PER}", "{ORG}发言人{PER}今天在{LOC}表示", "{PER}昨天从{LOC}回到{LOC}",
          "{ORG}在{LOC}举行会议", "今天的天气很好", "{PER}说{ORG}的工作很重要"]
KINDS = {"PER": PEOPLE, "LOC": PLACES, "ORG": ORGANISATIONS}
# A target names each entity's type in Chinese (人名:张伟), so its every character is in vocab.txt.
TYPE_NAMES = {"PER": "人名", "LOC": "地名", "ORG": "机构"}


def review(rng: random.Random) -> Tuple[str, str]:
    label = rng.choice("01")
    adjective = rng.choice(GOOD if label == "1" else BAD)
    ending = rng.choice(ENDINGS[:2] if label == "1" else ENDINGS[2:])
    return f"{rng.choice(ASPECTS)}{rng.choice(DEGREES)}{adjective}{ending}", label


def news(rng: random.Random) -> List[Tuple[str, str]]:
    """One sentence as `(piece, kind)` parts, kind "" for the words around the entities."""
    template = rng.choice(EVENTS)
    parts: List[Tuple[str, str]] = []
    while template:
        start = template.find("{")
        if start < 0:
            parts.append((template, ""))
            break
        if start:
            parts.append((template[:start], ""))
        kind = template[start + 1:start + 4]
        parts.append((rng.choice(KINDS[kind]), kind))
        template = template[start + 5:]
    return parts


def bmes(parts: List[Tuple[str, str]]) -> str:
    lines = []
    for piece, kind in parts:
        for index, char in enumerate(piece):
            if not kind:
                tag = "O"
            elif len(piece) == 1:
                tag = f"S-{kind}"
            else:
                tag = f"{'B' if index == 0 else 'E' if index == len(piece) - 1 else 'M'}-{kind}"
            lines.append(f"{char}\t{tag}")
    return "\n".join(lines) + "\n\n"


def questions(rng: random.Random, size: int) -> List[Tuple[str, str, str]]:
    """`(query, review, label)`: half the reviews are of the asked aspect (relevant), half of another."""
    rows = []
    for index in range(size):
        aspect = rng.choice(ASPECTS)
        text, _ = review(rng)
        if index % 2 == 0:
            text = aspect + text[len(next(a for a in ASPECTS if text.startswith(a))):]
        rows.append((f"{aspect}怎么样", text, str(int(text.startswith(aspect)))))
    return rows


def write_corpus(out_dir: str) -> None:
    rng = random.Random(SEED)
    os.makedirs(out_dir, exist_ok=True)
    characters = set()
    for split, size in SPLITS.items():
        reviews = [review(rng) for _ in range(size)]
        sentences = [news(rng) for _ in range(size)]
        texts = [text for text, _ in reviews] + ["".join(piece for piece, _ in parts) for parts in sentences]
        characters.update("".join(texts))
        entities = ["；".join(f"{TYPE_NAMES[kind]}:{piece}" for piece, kind in parts if kind) for parts in sentences]
        atomic_write_text(os.path.join(out_dir, f"reviews.{split}.tsv"),
                          "".join(f"{text}\t{label}\n" for text, label in reviews))
        atomic_write_text(os.path.join(out_dir, f"news.{split}.bmes"), "".join(bmes(parts) for parts in sentences))
        atomic_write_text(os.path.join(out_dir, f"entities.{split}.tsv"),
                          "".join(f"{text}\t{target}\n" for text, target in zip(texts[size:], entities)))
        if split != "test":
            atomic_write_text(os.path.join(out_dir, f"text.{split}.txt"), "".join(f"{text}\n" for text in texts))
    asked = random.Random(SEED + 1)  # its own draws: the files above stay as they were
    for split, size in SPLITS.items():
        atomic_write_text(os.path.join(out_dir, f"questions.{split}.tsv"),
                          "".join(f"{query}\t{text}\t{label}\n" for query, text, label in questions(asked, size)))
    characters.update("".join(TYPE_NAMES.values()) + ":；怎么样")  # the targets' and questions' own characters
    vocab = SPECIAL_TOKENS + sorted(characters)
    atomic_write_text(os.path.join(out_dir, "vocab.txt"), "\n".join(vocab) + "\n")
    with open(bundled_config_path("bert_tiny"), encoding="utf-8") as handle:
        config = {**json.load(handle), "vocab_size": len(vocab)}
    atomic_write_text(os.path.join(out_dir, "config.json"), json.dumps(config, indent=2) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the folder to write (made if missing; its files of these names replaced)")
    args = parser.parse_args(argv)
    write_corpus(args.out)
    print(f"{args.out}: reviews, news (BMES), entities, text and questions, {', '.join(f'{n} {s}' for s, n in SPLITS.items())}"
          " examples each; vocab.txt, config.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
