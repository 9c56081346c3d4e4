"""Classification data: reading files and label maps (`kbert.training.pipeline` batches them).

A file is read by `kbert.training.records`, which looks at its content:
JSON Lines, or tab-/comma-separated rows with or without a header. The
fields are `text`, optional `text_b` and `label`; a header may call them
`sentence`/`text_a`/`sentence1`/`content`/`review`, `sentence2`, and
`labels`/`class` (or any name, given with `columns`). Headerless rows are
`text<TAB>label` or `text<TAB>text_b<TAB>label`, bert4keras's format.

Prediction input (`labelled=False`) without a header is one text a line,
the whole line (a tab is part of the text).

A malformed row raises `DataError` naming the file and line, or, with
`skip_malformed=True`, is skipped and counted in the `DataReport`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from typing import Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from kbert.errors import DataError
from kbert.io import atomic_write_text
from kbert.training.records import DataReport, Fields, parse_rows, read_records

TEXT_NAMES = ("text", "sentence", "text_a", "sentence1", "content", "review")
TEXT_B_NAMES = ("text_b", "sentence2")
LABEL_NAMES = ("label", "labels", "class")
LABELLED = Fields({"text": TEXT_NAMES, "text_b": TEXT_B_NAMES, "label": LABEL_NAMES}, ("text", "label"),
                  {2: ("text", "label"), 3: ("text", "text_b", "label")})
UNLABELLED = Fields({"text": TEXT_NAMES, "text_b": TEXT_B_NAMES}, ("text",), {1: ("text",)})


@dataclasses.dataclass(frozen=True)
class Example:
    """One text (or text pair) with its label as written in the file."""

    text: str
    text_b: Optional[str]
    label: Optional[str]
    line: int


def read_examples(path: "str | os.PathLike[str]", *, labelled: bool = True, skip_malformed: bool = False,
                  columns: Optional[Mapping[str, str]] = None) -> Tuple[List[Example], DataReport]:
    """Reads a classification file; see the module docstring for the formats.

    Args:
        path: the file.
        labelled: whether every row must have a label (False for prediction
            input, where a headerless file is one text a line).
        skip_malformed: skip bad rows (counted in the report) instead of
            raising `DataError`.
        columns: `{field: column}` for columns (or JSON keys) with other names,
            e.g. `{"text": "review", "label": "sentiment"}`.

    Example:
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "train.csv")
    >>> _ = open(path, "w", encoding="utf-8").write("sentence,label\\n很好,1\\n不好,0\\n")
    >>> examples, report = read_examples(path)
    >>> [(e.text, e.label) for e in examples], report.layout
    ([('很好', '1'), ('不好', '0')], 'comma-separated with a header: text=sentence, label=label')
    """
    path = os.fspath(path)
    rows, layout, header = read_records(path, LABELLED if labelled else UNLABELLED, columns)
    examples, report = parse_rows(path, rows, _example, skip_malformed, "no examples", layout)
    if labelled and not header:
        _check_first_row_is_data(path, examples)
    return examples, report


def _example(row: dict, line: int) -> Example:
    text, label = row["text"], row.get("label")
    if not isinstance(text, str) or not text.strip():
        raise ValueError("empty or missing text")
    if "label" in row and (label is None or label.strip() == ""):
        raise ValueError("missing label")
    return Example(text, row.get("text_b") or None, None if label is None else label.strip(), line)


def _check_first_row_is_data(path: str, examples: Sequence[Example]) -> None:
    """A headerless file whose first label alone is not a number has a header kbert did not know."""
    first, rest = examples[0], examples[1:]
    if rest and not is_integer(first.label) and all(is_integer(example.label) for example in rest):
        raise DataError(f"{path}, line {first.line}: the row of {first.text[:20]!r} labelled {first.label!r} looks "
                        "like a header (every other label is a number): if it is, name its text and label columns "
                        "with --columns text=COLUMN,label=COLUMN; if not, remove the line")


def is_integer(label: Optional[str]) -> bool:
    """Whether a label is written as a whole number in ASCII digits (`²` is not).

    >>> is_integer("-3"), is_integer("²"), is_integer("1.0")
    (True, False, False)
    """
    return label is not None and re.fullmatch(r"-?[0-9]+", label) is not None


class LabelMap:
    """Label names <-> class ids, built from the training file and saved with the model.

    Labels that are all integers keep their numeric order (`0`, `1`, ... `10`);
    others are sorted as strings.

    Example:
    >>> examples = [Example("好", None, "1", 1), Example("坏", None, "0", 2), Example("还行", None, "10", 3)]
    >>> labels = LabelMap.from_examples(examples)
    >>> labels.names
    ['0', '1', '10']
    >>> labels.ids(examples, "train.data").tolist()
    [1, 0, 2]
    """

    FILE_NAME = "labels.json"

    def __init__(self, names: Sequence[str]):
        self.names = list(names)
        self._ids = {name: index for index, name in enumerate(self.names)}

    @classmethod
    def from_examples(cls, examples: Sequence[Example], path: str = "the training data") -> "LabelMap":
        """The labels of `examples`; spellings of one label (`1`/`1.0`, `Pos`/`pos`) are a `DataError`."""
        names = {example.label for example in examples}
        _check_one_spelling_each(names, examples, path)
        numeric = all(is_integer(name) for name in names)
        return cls(sorted(names, key=int) if numeric else sorted(names))

    def __len__(self) -> int:
        return len(self.names)

    def ids(self, examples: Sequence[Example], path: str) -> np.ndarray:
        """Class ids of labelled examples; an unknown label names its file and line."""
        out = np.empty(len(examples), dtype=np.int32)
        for row, example in enumerate(examples):
            if example.label not in self._ids:
                raise DataError(f"{path}, line {example.line}: label {example.label!r} is not among "
                                f"the training labels ({', '.join(self.names)})")
            out[row] = self._ids[example.label]
        return out

    def save(self, directory: str) -> None:
        atomic_write_text(os.path.join(directory, self.FILE_NAME),
                          json.dumps(self.names, ensure_ascii=False, indent=1) + "\n")

    @classmethod
    def load(cls, directory: str) -> "LabelMap":
        path = os.path.join(directory, cls.FILE_NAME)
        try:
            with open(path, encoding="utf-8") as handle:
                names = json.load(handle)
        except (OSError, json.JSONDecodeError) as error:
            raise DataError(f"{path}: cannot read the label map ({error})") from None
        return cls(names)


def _check_one_spelling_each(names, examples: Sequence[Example], path: str) -> None:
    """Two labels that differ only in case or number format would silently become two classes."""
    spellings = {}
    for name in names:
        spellings.setdefault(_label_key(name), []).append(name)
    clashes = [sorted(group) for group in spellings.values() if len(group) > 1]
    if clashes:
        counts = {name: 0 for group in clashes for name in group}
        for example in examples:
            if example.label in counts:
                counts[example.label] += 1
        described = "; ".join(" and ".join(f"{name!r} ({counts[name]} row{'s' * (counts[name] != 1)})" for name in group) for group in clashes)
        raise DataError(f"{path}: labels {described} look like one label written in different ways, which would "
                        "make separate classes; write each label one way")


def _label_key(name: str) -> str:
    """A label's meaning: numbers by value (`1`, `1.0`, `01`), words without case."""
    try:
        return repr(float(name))
    except ValueError:
        return name.casefold()


def encode_examples(tokenizer, examples: Sequence[Example], maxlen: int) -> List[Tuple[List[int], List[int]]]:
    """Token and segment ids of each example, truncated to `maxlen`."""
    return tokenizer.encode_all([e.text for e in examples], [e.text_b for e in examples], maxlen=maxlen)


UNKNOWN_REFUSED, UNKNOWN_WARNED = 0.5, 0.05  # shares of the text's tokens that are [UNK]


def check_known_tokens(path: str, rows: Iterable[Sequence[int]], tokenizer, refuse: bool = False) -> float:
    """The share of the text's tokens (`rows` of ids; padding, [CLS] and [SEP] aside) that are [UNK].

    Text the vocabulary does not cover (another language's vocabulary, a truncated one, --cased with an
    uncased one) teaches the model [UNK] alone: a loud warning with the rate above `UNKNOWN_WARNED`, and above
    `UNKNOWN_REFUSED` a `DataError` where `refuse` (pre-training, which would learn to predict [UNK]).
    """
    unknown_id = tokenizer.unk_id  # a byte-level BPE's tokenizer.json has none: it reads every byte
    if unknown_id is None:
        return 0.0
    ignored = {0, getattr(tokenizer, "pad_token_id", 0), getattr(tokenizer, "cls_id", 0),
               getattr(tokenizer, "sep_id", 0)}
    tokens = unknown = 0
    for row in rows:
        row = np.asarray(row).ravel()
        text = ~np.isin(row, list(ignored))
        tokens += int(text.sum())
        unknown += int(np.count_nonzero(row[text] == unknown_id))
    share = unknown / tokens if tokens else 0.0
    message = (f"{path}: {share:.0%} of the text's tokens are [UNK] for this vocabulary ({tokenizer.vocab_size} "
               "tokens); is it the vocabulary of this text (and its case: --cased keeps capitals an uncased "
               "vocabulary does not have)?")
    if refuse and share > UNKNOWN_REFUSED:
        raise DataError(message + " Pre-training on it would teach the model to predict [UNK]")
    if share > UNKNOWN_WARNED:
        logging.getLogger("kbert").warning("warning: %s%s", message, "" if refuse else
                                           " The model would be trained on what it cannot read")
    return share
