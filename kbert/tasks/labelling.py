"""Sequence labelling data: tagged files, tag schemes, entity spans and entity-level scores.

A tagged file has one token (for Chinese, one character) and its tag a line,
`token<TAB>tag`, and a blank line between sentences, as MSRA NER and CoNLL
files do. Tags are `O` or `PREFIX-TYPE`, with the prefixes of one scheme:

- BIO: `B` begins an entity, `I` continues it;
- BIOES: also `E` ends it and `S` is a one-token entity;
- BMES: `M` instead of `I` (MSRA's scheme).

`spans` turns tags into entities `(type, start, end)` (end exclusive); scores
compare entities by exact span and type.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from kbert.training.records import DataReport, open_data, parse_rows
from kbert.errors import DataError
from kbert.training.metrics import precision_recall_f1

SCHEMES = {"BIO": {"B", "I"}, "BIOES": {"B", "I", "E", "S"}, "BMES": {"B", "M", "E", "S"}}
Span = Tuple[str, int, int]


@dataclasses.dataclass(frozen=True)
class TaggedSentence:
    """One sentence: its tokens, their tags, and the line it starts on."""

    tokens: Tuple[str, ...]
    tags: Tuple[str, ...]
    line: int

    @property
    def text(self) -> str:
        """The tokens joined without spaces (character-level files give the sentence back)."""
        return "".join(self.tokens)


def read_tagged(path: "str | os.PathLike[str]", *,
                skip_malformed: bool = False) -> Tuple[List[TaggedSentence], DataReport]:
    """Reads a `token<TAB>tag` file with blank lines between sentences.

    A malformed line (not two tab-separated fields, or a tag that is neither
    `O` nor `PREFIX-TYPE`) raises `DataError` naming the file and line, or
    with `skip_malformed` drops its sentence and is counted in the report.

    Example:
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "train.bmes")
    >>> _ = open(path, "w", encoding="utf-8").write("张\\tB-PER\\n三\\tE-PER\\n好\\tO\\n\\n北\\tB-LOC\\n京\\tE-LOC\\n")
    >>> sentences, report = read_tagged(path)
    >>> [(s.text, s.tags) for s in sentences], str(report).endswith("2 examples")
    ([('张三好', ('B-PER', 'E-PER', 'O')), ('北京', ('B-LOC', 'E-LOC'))], True)
    """
    path = os.fspath(path)
    with open_data(path) as handle:
        return parse_rows(path, _blocks(handle), _sentence, skip_malformed, "no sentences")


def _blocks(lines: Iterable[str]):
    """(first line number, [(line number, text)]) for each run of non-blank lines."""
    rows: List[Tuple[int, str]] = []
    for number, raw in enumerate(lines, 1):
        raw = raw.rstrip("\r\n")
        if raw.strip():
            rows.append((number, raw))
        elif rows:
            yield rows[0][0], rows
            rows = []
    if rows:
        yield rows[0][0], rows


def _sentence(rows: List[Tuple[int, str]], start: int) -> TaggedSentence:
    tokens, tags = [], []
    for number, raw in rows:
        fields = raw.split("\t")
        if len(fields) != 2 or not fields[0] or not fields[1].strip():
            raise ValueError(number, f"expected 'token<TAB>tag', found {len(fields) - 1} tab(s)")
        tag = fields[1].strip()
        prefix, _, kind = tag.partition("-")
        if tag != "O" and (prefix not in {"B", "I", "M", "E", "S"} or not kind):
            raise ValueError(number, f"tag {tag!r} is neither O nor PREFIX-TYPE with a prefix of B, I, M, E, S")
        tokens.append(fields[0])
        tags.append(tag)
    return TaggedSentence(tuple(tokens), tuple(tags), start)


def detect_scheme(sentences: Sequence[TaggedSentence], path: str = "data") -> str:
    """The scheme whose prefixes the tags use: BMES if any `M-`, else BIOES if any `E-`/`S-`, else BIO.

    A file that mixes BMES's `M-` with BIO's `I-` is a `DataError` naming the
    first line of each.

    Example:
    >>> detect_scheme([TaggedSentence(("张", "三", "丰"), ("B-PER", "M-PER", "E-PER"), 1)])
    'BMES'
    >>> detect_scheme([TaggedSentence(("北", "京"), ("B-LOC", "I-LOC"), 1)])
    'BIO'
    """
    first: Dict[str, int] = {}
    for sentence in sentences:
        for index, tag in enumerate(sentence.tags):
            first.setdefault(tag.partition("-")[0], sentence.line + index)
    if "M" in first:
        if "I" in first:
            raise DataError(f"{path}, line {max(first['M'], first['I'])}: the tags mix BMES's prefix M- "
                            f"(first on line {first['M']}) with BIO's prefix I- (first on line {first['I']}); "
                            "use one scheme in the file")
        return "BMES"
    return "BIOES" if {"E", "S"} & first.keys() else "BIO"


def spans(tags: Sequence[str]) -> List[Span]:
    """Entities `(type, start, end)` of a tag sequence, end exclusive, in any of the schemes.

    An entity begins at `B-X` or `S-X`, continues through `I-X`/`M-X` and
    ends at `E-X` (or where the next tag cannot continue it). As conlleval
    does, a continuing tag that follows nothing it can continue (`E-X` after
    `O`, `M-Y` after `B-X`) begins a new entity.

    Example:
    >>> spans(["B-PER", "M-PER", "E-PER", "O", "S-LOC", "B-ORG", "E-ORG"])
    [('PER', 0, 3), ('LOC', 4, 5), ('ORG', 5, 7)]
    >>> spans(["O", "M-ORG", "E-ORG", "B-LOC", "I-PER"])
    [('ORG', 1, 3), ('LOC', 3, 4), ('PER', 4, 5)]
    """
    found: List[Span] = []
    current: Optional[Tuple[str, int]] = None
    for position, tag in enumerate(list(tags) + ["O"]):
        prefix, _, kind = tag.partition("-")
        continues = current is not None and kind == current[0] and prefix in ("I", "M", "E")
        if current is not None and not continues:
            found.append((current[0], current[1], position))
            current = None
        if tag != "O" and current is None:
            current = (kind, position)
        if prefix in ("E", "S") and current is not None:
            found.append((current[0], current[1], position + 1))
            current = None
    return found


def tags_from_spans(length: int, entities: Iterable[Span], scheme: str) -> List[str]:
    """The tags of `length` tokens holding `entities`, in `scheme` (the inverse of `spans`).

    Example:
    >>> tags_from_spans(5, [("PER", 0, 3), ("LOC", 4, 5)], "BMES")
    ['B-PER', 'M-PER', 'E-PER', 'O', 'S-LOC']
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme: expected one of {', '.join(SCHEMES)}, got {scheme!r}")
    inside = "M" if scheme == "BMES" else "I"
    tags = ["O"] * length
    for kind, start, end in entities:
        if scheme != "BIO" and end - start == 1:
            tags[start] = f"S-{kind}"
            continue
        tags[start] = f"B-{kind}"
        for position in range(start + 1, end):
            tags[position] = f"{inside}-{kind}"
        if scheme != "BIO":
            tags[end - 1] = f"E-{kind}"
    return tags


def entity_scores(truth: Sequence[Sequence[Span]], predicted: Sequence[Sequence[Span]]) -> Dict[str, dict]:
    """Precision, recall, F1 and support per entity type and overall (exact span and type).

    `truth` and `predicted` hold each sentence's entities.

    Example:
    >>> scores = entity_scores([[("PER", 0, 2), ("LOC", 3, 5)]], [[("PER", 0, 2), ("LOC", 3, 4)]])
    >>> scores["PER"]["f1"], scores["LOC"]["f1"], scores["overall"]["precision"]
    (1.0, 0.0, 0.5)
    """
    if len(truth) != len(predicted):
        raise ValueError(f"{len(truth)} sentences of truth but {len(predicted)} predicted")
    counts: Dict[str, List[int]] = {}  # type -> [hits, predicted, true]
    for true_spans, predicted_spans in zip(truth, predicted):
        true_set, predicted_set = set(true_spans), set(predicted_spans)
        for kind, *_ in true_set | predicted_set:
            counts.setdefault(kind, [0, 0, 0])
        for entity in predicted_set:
            counts[entity[0]][1] += 1
            counts[entity[0]][0] += entity in true_set
        for entity in true_set:
            counts[entity[0]][2] += 1
    totals = [sum(column) for column in zip(*counts.values())] if counts else [0, 0, 0]
    return {**{kind: precision_recall_f1(*counts[kind]) for kind in sorted(counts)},
            "overall": precision_recall_f1(*totals)}
