"""Records from data files as people have them: the format and the columns are read from the content.

A task names the *fields* of its records (classification: `text`,
`text_b`, `label`; seq2seq: `source`, `target`) and, for each, the column
names that mean it (`sentence`, `review`, ... for `text`). A file is then:

- **JSON Lines** when its first non-blank line starts with `{` (whatever
  its extension: CLUE's `.json` files are JSON Lines): each object's keys
  name the fields;
- otherwise **delimited**: by tabs when the first line holds a tab, else by
  commas for a `.csv` file (or a first line of known column names). The
  first row is a **header** when one of its cells names the first field
  (`text`, `sentence`, `review`, ...; `source`, ...), two name known fields,
  or one is a `columns` entry; in a two-column header, a column left over is
  the one field missing (`review<TAB>sentiment`);
  else every row is data, its columns in the task's order (`text<TAB>label`,
  `text<TAB>text_b<TAB>label`, bert4keras's format). Tab-separated cells
  are taken as they are (a text may start with `"`) unless the header's
  cells are quoted; comma-separated cells follow CSV quoting.

`columns` (`kbert train --columns text=review,label=sentiment`) names the
column or key of a field when the names differ. Every refusal says what
was found and the option or edit that fixes it; `Layout.describe` says
what was read, for the training log.

Files are read as UTF-8; a byte-order mark at the start is ignored.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from kbert.errors import DataError


@dataclasses.dataclass
class DataReport:
    """What reading a file found: the format, records kept, rows skipped (by line)."""

    path: str
    examples: int = 0
    skipped: List[Tuple[int, str]] = dataclasses.field(default_factory=list)
    layout: str = ""

    def __str__(self) -> str:
        text = f"{self.path}: {self.examples} examples"
        if self.layout:
            text += f" ({self.layout})"
        if self.skipped:
            lines = ", ".join(str(line) for line, _ in self.skipped[:10])
            more = ", ..." if len(self.skipped) > 10 else ""
            text += f", {len(self.skipped)} malformed rows skipped (lines {lines}{more})"
        return text


@dataclasses.dataclass(frozen=True)
class Fields:
    """The fields of a task's records and how files name them.

    Args:
        names: each field and the column names (or JSON keys) that mean it, in
            the order of a headerless row's columns.
        required: the fields every record must have.
        headerless: the fields of a headerless row, by its number of columns.
    """

    names: Mapping[str, Tuple[str, ...]]
    required: Tuple[str, ...]
    headerless: Mapping[int, Tuple[str, ...]]

    def example(self) -> str:
        """The headerless rows this reads, for messages: `text<TAB>label` ..."""
        return " or ".join("<TAB>".join(fields) for fields in self.headerless.values())


def parse_columns(text: Optional[str]) -> Dict[str, str]:
    """`--columns text=review,label=sentiment` as `{field: column}`; a bad entry says the form.

    Example:
    >>> parse_columns("text=review, label=sentiment")
    {'text': 'review', 'label': 'sentiment'}
    """
    columns: Dict[str, str] = {}
    for entry in (text or "").split(","):
        if not entry.strip():
            continue
        field, equals, column = (part.strip() for part in entry.partition("="))
        if not equals or not field or not column:
            raise DataError(f"--columns: expected FIELD=COLUMN entries separated by commas (e.g. "
                            f"text=review,label=sentiment), got {entry.strip()!r}")
        columns[field] = column
    return columns


@contextlib.contextmanager
def open_data(path: str, newline: Optional[str] = None) -> Iterator:
    """A data file opened as UTF-8 text (a byte-order mark ignored); a missing or
    non-UTF-8 file, also one found so while reading, is a `DataError` naming it."""
    try:
        with open(path, encoding="utf-8-sig", newline=newline) as handle:
            yield handle
    except FileNotFoundError:
        raise DataError(f"{path}: data file not found") from None
    except IsADirectoryError:
        raise DataError(f"{path}: a directory, not a data file") from None
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None


def parse_rows(path: str, rows: Iterable[Tuple[int, object]], parse: Callable[[object, int], object],
               skip_malformed: bool, empty: str, layout: str = "") -> Tuple[list, DataReport]:
    """Parses each `(line, row)` of a data file: the records and a report.

    `parse(row, line)` raises `ValueError(message)` (or `ValueError(line,
    message)` to name another line) for a malformed row: a `DataError` naming
    the file and line, or with `skip_malformed` a skipped row in the report.
    No record at all is the error `"{path}: {empty}"`.
    """
    report, records = DataReport(path, layout=layout), []
    for line, row in rows:
        try:
            if isinstance(row, ValueError):
                raise row
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


Record = Dict[str, Optional[str]]
ONE_A_LINE = "one text a line"  # the layout of a headerless file of one column


def read_records(path: str, fields: Fields, columns: Optional[Mapping[str, str]] = None
                 ) -> Tuple[List[Tuple[int, "Record | ValueError"]], str, bool]:
    """The rows of a data file as `(line, {field: value})` (or a `ValueError` for a bad row).

    Returns the rows, a description of the format and columns read, and
    whether the file had a header. Blank lines are skipped.
    """
    columns = dict(columns or {})
    unknown = sorted(set(columns) - set(fields.names))
    if unknown:
        raise DataError(f"--columns names the field {unknown[0]!r}; the fields here are "
                        f"{', '.join(fields.names)}")
    with open_data(path, newline="") as handle:
        text = handle.read()
    lines = _lines(text)
    first = next((line for line in lines if line.strip()), None)
    if first is None:
        return [], "empty", False
    if first.lstrip().startswith("{"):
        return _json_lines(lines, fields, columns), "JSON Lines", True
    if first.lstrip().startswith("["):
        raise DataError(f"{path}: a JSON array; kbert reads JSON Lines, one object a line: write each "
                        "element on its own line")
    return _delimited(path, text, lines, first, fields, columns)


def _json_lines(lines: Sequence[str], fields: Fields, columns: Mapping[str, str]):
    keys = {field: ((columns[field],) if field in columns else aliases) for field, aliases in fields.names.items()}
    rows = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as error:
            rows.append((number, ValueError(f"not valid JSON ({error.msg})")))
            continue
        if not isinstance(record, dict):
            rows.append((number, ValueError("expected a JSON object")))
            continue
        lowered = {str(key).lower(): value for key, value in record.items()}
        values: Record = {}
        for field, names in keys.items():
            value = next((record[name] if name in record else lowered[name.lower()]
                          for name in names if name in record or name.lower() in lowered), None)
            values[field] = None if value is None else str(value) if not isinstance(value, str) else value
        missing = [field for field in fields.required if values[field] is None]
        if missing:
            found = ", ".join(map(str, record)) or "none"
            rows.append((number, ValueError(
                f"no key for {', '.join(missing)} (keys: {found}); name it with --columns "
                f"{missing[0]}=KEY, or use one of {', '.join(keys[missing[0]])}")))
            continue
        rows.append((number, values))
    return rows


def _delimited(path: str, text: str, lines: Sequence[str], first: str, fields: Fields,
               columns: Mapping[str, str]):
    if "\t" in first:
        delimiter = "\t"
    elif path.lower().endswith(".csv") or _is_header(next(csv.reader([first])), fields, columns):
        delimiter = ","
    else:
        delimiter = None
    separator = "comma" if delimiter == "," else "tab"  # for messages
    cells = next(csv.reader([first], delimiter=delimiter)) if delimiter else [first]
    if _is_header(cells, fields, columns):
        quoted = delimiter == "," or all(cell.strip().startswith('"') for cell in first.split(delimiter or "\t"))
        table = csv.reader(io.StringIO(text), delimiter=delimiter or "\t",
                           quoting=csv.QUOTE_MINIMAL if quoted else csv.QUOTE_NONE)
        rows = [(number, row) for number, row in enumerate(table, 1) if any(cell.strip() for cell in row)]
        header = [cell.strip() for cell in rows[0][1]]
        places, note = _header_places(path, header, fields, columns)
        return [(number, _by_header(row, header, places)) for number, row in rows[1:]], \
            f"{separator}-separated with a header: {note}", True
    if columns:
        raise DataError(f"{path}, line 1: the file has no header row (its first line is data: {first[:40]!r}), "
                        "so --columns names nothing; add a header row naming the columns, or drop --columns")
    if list(fields.headerless) == [1]:
        delimiter = None  # one field: the whole line, a tab or comma in it included
    if delimiter == ",":
        table = csv.reader(io.StringIO(text))
        rows = [(number, row) for number, row in enumerate(table, 1) if any(cell.strip() for cell in row)]
    else:  # one text a line: a later line's tab is a column it should not have, unless one field is all there is
        split = delimiter or (None if list(fields.headerless) == [1] else "\t")
        rows = [(number, line.split(split) if split else [line]) for number, line in enumerate(lines, 1)
                if line.strip()]
    width = len(rows[0][1])
    if width not in fields.headerless:
        raise DataError(f"{path}, line 1: {width} {separator}-separated columns and no header; expected "
                        f"{fields.example()} rows, or a header row naming the columns ({', '.join(fields.names)})")
    names = fields.headerless[width]
    kind = ONE_A_LINE if delimiter is None else f"{separator}-separated, no header: {', '.join(names)}"

    def record(row):
        if len(row) != width:
            return ValueError(f"expected {'<TAB>'.join(names)} ({width - 1} {separator}(s)) as on line 1, "
                              f"found {len(row) - 1}")
        return dict(zip(names, row))

    return [(number, record(row)) for number, row in rows], kind, False


def _lines(text: str) -> List[str]:
    """Lines ended by \\n or \\r\\n only: a U+2028 or \\x85 inside a text belongs to it."""
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]


def _is_header(cells: Sequence[str], fields: Fields, columns: Mapping[str, str]) -> bool:
    """A header names the first field (`text`, `review`, ...), two known columns, or a column given:
    a row `好<TAB>class` is data."""
    names = {cell.strip().strip('"').lower() for cell in cells}
    first = next(iter(fields.names))
    known = {alias for aliases in fields.names.values() for alias in aliases}
    return bool(names & set(fields.names[first])) or len(names & known) >= 2 \
        or bool(names & {column.lower() for column in columns.values()})


def _header_places(path: str, header: Sequence[str], fields: Fields, columns: Mapping[str, str]):
    """`{field: column index}` from a header, and how each field was found (for the log)."""
    lowered = [name.strip('"').lower() for name in header]
    places: Dict[str, int] = {}
    for field, aliases in fields.names.items():
        if field in columns:
            if columns[field].lower() not in lowered:
                raise DataError(f"{path}, line 1: --columns names {columns[field]!r} for {field}, but the "
                                f"header has {', '.join(header)}")
            places[field] = lowered.index(columns[field].lower())
        else:
            places.update({field: lowered.index(alias) for alias in aliases[::-1] if alias in lowered})
    missing = [field for field in fields.required if field not in places]
    spare = [index for index in range(len(header)) if index not in places.values()]
    if len(missing) == 1 and len(spare) == 1 and len(header) == 2:
        places[missing[0]] = spare[0]  # the one column left: `review<TAB>sentiment`
        missing = []
    if missing:
        raise DataError(f"{path}, line 1: the header has no column for {', '.join(missing)} (found: "
                        f"{', '.join(header)}); name it with --columns {missing[0]}=COLUMN, or rename the "
                        f"column to one of {', '.join(fields.names[missing[0]])}")
    note = ", ".join(f"{field}={header[index].strip(chr(34))}" for field, index in places.items())
    return places, note


def _by_header(row: Sequence[str], header: Sequence[str], places: Mapping[str, int]):
    if len(row) != len(header):
        return ValueError(f"expected {len(header)} columns as in the header, found {len(row)}")
    return {field: row[index] for field, index in places.items()}
