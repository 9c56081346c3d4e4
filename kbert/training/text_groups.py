"""Files of text groups: a text a line, pairs, triplets, or scored pairs (what embedding models train and are scored
on), by their columns or a header naming them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import List, Optional, Tuple

from kbert.errors import DataError
from kbert.training.records import Fields, parse_rows, read_records


PAIR_FIELDS = Fields({"text": ("text", "anchor", "query", "sentence1", "sentence", "text_a"),
                      "text_b": ("text_b", "positive", "sentence2", "passage", "document"),
                      "score": ("score", "label", "similarity"),
                      "negative": ("negative", "hard_negative")},
                     ("text",), {1: ("text",), 2: ("text", "text_b"), 3: ("text", "text_b", "score")})


@dataclasses.dataclass(frozen=True)
class TextGroup:
    """One training example of an embedding model: its texts (query, positive, hard negative) and a score."""

    texts: Tuple[str, ...]
    score: Optional[float]
    line: int


def read_text_groups(path: str, *, skip_malformed: bool = False, columns=None) -> Tuple[List[TextGroup], object]:
    """An embedding model's training file, by its columns: one text a line (SimCSE: each text and itself),
    `text<TAB>text_b` (a text and its positive), `text<TAB>text_b<TAB>score` (a pair scored by similarity,
    CoSENT) or `query<TAB>positive<TAB>negative` (a third column that is not a number: a hard negative).
    A header may name the columns (`anchor`, `positive`, `negative`, `sentence1`, `sentence2`, `score`, ...)."""
    rows, layout, header = read_records(path, PAIR_FIELDS, columns)
    if not header:  # the third column is a score only where every row's reads as a number (a negative may: "1998")
        scores = all(is_number(row.get("score")) for _, row in rows
                     if not isinstance(row, ValueError) and row.get("score") is not None)
        rows = [(line, row if isinstance(row, ValueError) or scores else _with_negative(row)) for line, row in rows]
    groups, report = parse_rows(path, rows, _text_group, skip_malformed, "no texts", layout)
    if len(groups[0].texts) == 3 and layout.endswith("score"):  # a headerless third column read as texts
        report.layout = layout[:-len("score")] + "negative"
    widths = {len(group.texts) for group in groups}
    scored = {group.score is not None for group in groups}
    if len(widths) > 1 or len(scored) > 1:
        first = next(group for group in groups if len(group.texts) != len(groups[0].texts)
                     or (group.score is None) != (groups[0].score is None))
        raise DataError(f"{path}, line {first.line}: {shape_of(first)}, but line {groups[0].line} has "
                        f"{shape_of(groups[0])}; every row of a file must have the same columns")
    return groups, report


def _with_negative(row: dict) -> dict:
    """A headerless third column read as a hard negative."""
    if row.get("score") is not None and "negative" not in row:
        row = {**{key: value for key, value in row.items() if key != "score"}, "negative": row["score"]}
    return row


def is_number(value) -> bool:
    """Whether a cell reads as a number (a score), not a text."""
    try:
        float(value)
        return True
    except (TypeError, ValueError):
        return False


def _text_group(row: dict, line: int) -> TextGroup:
    texts = [row.get("text"), row.get("text_b"), row.get("negative")]
    for name, text in zip(("text", "text_b", "negative"), texts):
        if name in row and (not isinstance(text, str) or not text.strip()):
            raise ValueError(f"empty or missing {name}")
    score = row.get("score")
    if score is not None and not is_number(score):
        raise ValueError(f"the score {score!r} is not a number")
    if score is not None and not math.isfinite(float(score)):
        raise ValueError(f"the score {score!r} is not a finite number; a pair's similarity is a number such as 0.8")
    if score is not None and "text_b" not in row:
        raise ValueError("a score needs two texts (text<TAB>text_b<TAB>score)")
    present = tuple(text for text in texts if isinstance(text, str))
    return TextGroup(present, None if score is None else float(score), line)


def shape_of(group: TextGroup) -> str:
    """How a row of `group`'s columns is described in an error ("2 texts and a score")."""
    return f"{len(group.texts)} text{'s' if len(group.texts) > 1 else ''}" + (" and a score" if group.score
                                                                              is not None else "")
