"""Classification data: reading files, label maps, and `tf.data` pipelines.

Three file formats, chosen by extension:

- `.jsonl` / `.json`: JSON Lines, one object a line with `text`, optional
  `text_b`, and `label`;
- `.csv` / `.tsv`: a header row naming `text`, optional `text_b`, and `label`;
  CSV cells may be quoted, TSV cells are taken as they are (a text may start
  with `"`);
- anything else (`.data`, `.txt`, ...): `text<TAB>label` lines without a
  header, the format of bert4keras's examples. A first line that looks like a
  header (`text<TAB>label`) is an error, not a class named `label`.

Files are read as UTF-8; a byte-order mark at the start is ignored.

A malformed row raises `DataError` naming the file and line, or, with
`skip_malformed=True`, is skipped and counted in the `DataReport`.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import os
from typing import Callable, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from kbert.errors import DataError
from kbert.io import atomic_write_text


@dataclasses.dataclass(frozen=True)
class Example:
    """One text (or text pair) with its label as written in the file."""

    text: str
    text_b: Optional[str]
    label: Optional[str]
    line: int


@dataclasses.dataclass
class DataReport:
    """What reading a file found: examples kept, rows skipped (by line)."""

    path: str
    examples: int = 0
    skipped: List[Tuple[int, str]] = dataclasses.field(default_factory=list)

    def __str__(self) -> str:
        text = f"{self.path}: {self.examples} examples"
        if self.skipped:
            lines = ", ".join(str(line) for line, _ in self.skipped[:10])
            more = ", ..." if len(self.skipped) > 10 else ""
            text += f", {len(self.skipped)} malformed rows skipped (lines {lines}{more})"
        return text


def read_examples(path: "str | os.PathLike[str]", *, labelled: bool = True,
                  skip_malformed: bool = False) -> Tuple[List[Example], DataReport]:
    """Reads a classification file; see the module docstring for the formats.

    Args:
        path: the file.
        labelled: whether every row must have a label (False for prediction
            input, where a plain-text file is one text a line).
        skip_malformed: skip bad rows (counted in the report) instead of
            raising `DataError`.
    """
    path = os.fspath(path)
    extension = os.path.splitext(path)[1].lower()
    reader = {".jsonl": _json_lines, ".json": _json_lines, ".csv": _delimited, ".tsv": _delimited}.get(
        extension, _tab_separated)
    with open_data(path, newline="") as handle:
        return parse_rows(path, reader(handle, extension, labelled),
                          lambda row, line: _example(row, line, labelled), skip_malformed, "no examples")


def parse_rows(path: str, rows: Iterable[Tuple[int, object]], parse: Callable[[object, int], object],
               skip_malformed: bool, empty: str) -> Tuple[list, "DataReport"]:
    """Parses each `(line, row)` of a data file: the records and a report.

    `parse(row, line)` raises `ValueError(message)` (or `ValueError(line,
    message)` to name another line) for a malformed row: a `DataError` naming
    the file and line, or with `skip_malformed` a skipped row in the report.
    No record at all is the error `"{path}: {empty}"`.
    """
    report, records = DataReport(path), []
    for line, row in rows:
        try:
            records.append(parse(row, line))
        except ValueError as error:
            line, message = error.args if len(error.args) == 2 else (line, str(error))
            if not skip_malformed:
                raise DataError(f"{path}, line {line}: {message}") from None
            report.skipped.append((line, message))
    if not records:
        raise DataError(f"{path}: {empty}")
    report.examples = len(records)
    return records, report


@contextlib.contextmanager
def open_data(path: str, newline: Optional[str] = None) -> Iterator:
    """A data file opened as UTF-8 text (a byte-order mark ignored); a missing or
    non-UTF-8 file, also one found so while reading, is a `DataError` naming it."""
    try:
        with open(path, encoding="utf-8-sig", newline=newline) as handle:
            yield handle
    except FileNotFoundError:
        raise DataError(f"{path}: data file not found") from None
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None


def _example(row, line: int, labelled: bool) -> Example:
    if isinstance(row, ValueError):
        raise row
    text, text_b, label = row
    if not isinstance(text, str) or not text.strip():
        raise ValueError("empty or missing text")
    if labelled and (label is None or str(label).strip() == ""):
        raise ValueError("missing label")
    return Example(text, text_b or None, None if label is None else str(label).strip(), line)


def _tab_separated(handle, extension, labelled):
    for line, raw in enumerate(handle, 1):
        raw = raw.rstrip("\r\n")
        if not raw.strip():
            continue
        if not labelled:  # one text a line; a labelled file's label column is ignored
            yield line, (raw.split("\t", 1)[0], None, None)
            continue
        parts = raw.split("\t")
        if len(parts) != 2:
            yield line, ValueError(f"expected 'text<TAB>label', found {len(parts) - 1} tab(s)")
            continue
        if line == 1 and parts[1].strip().lower() in _HEADER_LABELS:
            raise DataError(f"{handle.name}, line 1: {raw!r} looks like a header, but a "
                            "text<TAB>label file has none: remove the line, or name the file "
                            "*.tsv to read it as a table with a header")
        yield line, (parts[0], None, parts[1])


# Column names that mark a first line as a header rather than an example.
_HEADER_LABELS = {"label", "labels", "class", "category", "target", "y", "tag"}


def _delimited(handle, extension, labelled):
    # Tab-separated text is not quoted: a `"` is part of the text, not a CSV quote.
    rows = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE) if extension == ".tsv" \
        else csv.reader(handle)
    header = next(rows, None)
    if header is None:
        return
    columns = {name.strip(): index for index, name in enumerate(header)}
    needed = ["text"] + (["label"] if labelled else [])
    missing = [name for name in needed if name not in columns]
    if missing:
        raise DataError(f"{handle.name}, line 1: the header lacks column(s) {', '.join(missing)} "
                        f"(found: {', '.join(header)})")
    for line, row in enumerate(rows, 2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            yield line, ValueError(f"expected {len(header)} columns, found {len(row)}")
            continue
        yield line, (row[columns["text"]], row[columns["text_b"]] if "text_b" in columns else None,
                     row[columns["label"]] if "label" in columns else None)


def _json_lines(handle, extension, labelled):
    for line, raw in enumerate(handle, 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as error:
            yield line, ValueError(f"not valid JSON ({error.msg})")
            continue
        if not isinstance(record, dict):
            yield line, ValueError("expected a JSON object")
            continue
        yield line, (record.get("text"), record.get("text_b"), record.get("label"))


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
    def from_examples(cls, examples: Sequence[Example]) -> "LabelMap":
        names = {example.label for example in examples}
        numeric = all(name.lstrip("-").isdigit() for name in names)
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


def encode_examples(tokenizer, examples: Sequence[Example], maxlen: int) -> List[Tuple[List[int], List[int]]]:
    """Token and segment ids of each example, truncated to `maxlen`."""
    return tokenizer.encode_all([e.text for e in examples], [e.text_b for e in examples], maxlen=maxlen)


PAD_MULTIPLE = 16


def make_dataset(encoded: Sequence[Tuple[List[int], List[int]]], labels, batch_size: int, *,
                 shuffle: bool = False, seed: int = 0, bucketing: bool = False):
    """A `tf.data.Dataset` of `((token_ids, segment_ids), labels)` batches.

    `labels` is None (features only), an array with one label per example,
    or a list with a sequence per example: a label per token (padded with 0
    like the tokens) or rows of numbers such as entity spans (padded with -1
    to the most rows in the batch).

    Each batch is padded to its own longest sequence, rounded up to a multiple
    of 16 (never past the longest sequence in the data): little padding, and
    few distinct shapes for XLA, which Keras's `fit` compiles once per shape.
    With `bucketing`, a batch holds sequences of one such 16-token band only
    (drawn in shuffled order, so batches still mix the data), which pads
    far less when lengths vary. The whole pipeline runs in TensorFlow, with no
    Python per batch.
    """
    import tensorflow as tf

    lengths = np.array([len(ids) for ids, _ in encoded], dtype=np.int64)
    tokens = tf.RaggedTensor.from_row_lengths(
        np.concatenate([ids for ids, _ in encoded]).astype(np.int32), lengths)
    segments = tf.RaggedTensor.from_row_lengths(
        np.concatenate([segs for _, segs in encoded]).astype(np.int32), lengths)
    features = tf.data.Dataset.from_tensor_slices((tokens, segments))
    dataset = features if labels is None else tf.data.Dataset.zip(
        features, tf.data.Dataset.from_tensor_slices(_label_tensor(labels)))
    if shuffle:
        dataset = dataset.shuffle(len(encoded), seed=seed, reshuffle_each_iteration=True)
    pad = _Padder(int(lengths.max()))
    if bucketing:
        bands = np.bincount((lengths - 1) // PAD_MULTIPLE)
        dataset = dataset.group_by_window(_band, lambda _, window: window.ragged_batch(batch_size),
                                          window_size=batch_size)
        # Known size: Keras's progress bar and the schedule's step count stay exact.
        batches = int(sum(-(-count // batch_size) for count in bands))
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))
    else:
        dataset = dataset.ragged_batch(batch_size)
    return dataset.map(pad.unlabelled if labels is None else pad.labelled,
                       num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def _band(features, labels=None):
    """The 16-token band of an example's length: the key of `make_dataset`'s buckets."""
    import tensorflow as tf

    tokens = features[0] if isinstance(features, tuple) else features
    return tf.cast((tf.shape(tokens)[0] - 1) // PAD_MULTIPLE, tf.int64)


def _label_tensor(labels):
    """An array of labels as it is; a list of sequences as a ragged tensor."""
    import tensorflow as tf

    if isinstance(labels, np.ndarray):
        return labels
    rows = [np.asarray(row, dtype=np.int32) for row in labels]
    width = next((row.shape[1:] for row in rows if len(row)), ())
    flat = np.concatenate([row.reshape(-1, *width) for row in rows])
    return tf.RaggedTensor.from_row_lengths(flat, [len(row) for row in rows])


class _Padder:
    """Makes ragged batches dense, padded with 0 to a rounded-up length."""

    def __init__(self, longest: int):
        self.longest = longest

    def features(self, tokens, segments):
        import tensorflow as tf

        length = tf.cast(tf.reduce_max(tokens.row_lengths()), tf.int32)
        rounded = tf.minimum((length + PAD_MULTIPLE - 1) // PAD_MULTIPLE * PAD_MULTIPLE, self.longest)
        shape = tf.stack([tf.cast(tokens.nrows(), tf.int32), tf.maximum(rounded, length)])
        return tokens.to_tensor(shape=shape), segments.to_tensor(shape=shape)

    def unlabelled(self, tokens, segments):
        # A 1-tuple: Keras reads a pair as (inputs, labels).
        return (self.features(tokens, segments),)

    def labelled(self, features, labels):
        import tensorflow as tf

        tokens, segments = self.features(*features)
        if isinstance(labels, tf.RaggedTensor):
            # A label per token is padded as the tokens are; rows (spans) with -1.
            labels = labels.to_tensor(shape=tf.shape(tokens)) if labels.shape.rank == 2 \
                else labels.to_tensor(default_value=-1)
        return (tokens, segments), labels
