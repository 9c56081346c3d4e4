"""Writing files safely: atomically (a failed write never leaves a half-written file), and never over an input;
reading a model's folder once (`ModelFolder`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Callable, Dict, Iterator, Mapping, Optional, Tuple, TypeVar

from kbert.errors import KbertError

T = TypeVar("T")


class ModelFolder(os.PathLike):
    """A model's folder, each of its files parsed at most once: the one object a folder's loaders, its
    predictor and the server pass along, so that deciding what a folder holds and loading it read each file
    once (a sentence-transformers folder's settings, its `config.json`, its modules' configs).

    It is a path (`os.fspath`), so it goes wherever a folder's path goes; a sub-folder (`child`: a module's)
    shares its parsed files. A file is parsed by the reader a caller names (its errors name the file as that
    reader names it, and are raised again on the next call: only values are kept).

    Args:
        path: the folder.

    Example:
    >>> import json, tempfile
    >>> folder = ModelFolder(tempfile.mkdtemp())
    >>> with open(folder.file("config.json"), "w") as handle:
    ...     json.dump({"model_type": "bert"}, handle)
    >>> reads = []
    >>> def read(path):
    ...     reads.append(path)
    ...     with open(path) as handle:
    ...         return json.load(handle)
    >>> folder.parsed("config.json", read) is folder.child("").parsed("config.json", read), len(reads)
    (True, 1)
    """

    def __init__(self, path: "str | os.PathLike[str]", _parsed: Optional[Dict[Tuple[str, Callable], object]] = None):
        self.path = os.fspath(path)
        self._parsed = {} if _parsed is None else _parsed  # (file, reader) -> value, shared with its children

    @classmethod
    def of(cls, folder: "str | os.PathLike[str]") -> "ModelFolder":
        """`folder` itself where it is one (its parsed files kept), else a new one."""
        return folder if isinstance(folder, ModelFolder) else cls(folder)

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:  # in messages, the path
        return self.path

    def __repr__(self) -> str:
        return f"ModelFolder({self.path!r})"

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def has(self, name: str) -> bool:
        return os.path.isfile(self.file(name))

    def child(self, name: str) -> "ModelFolder":
        """The sub-folder `name` (`""`: this one), sharing the files parsed so far."""
        return ModelFolder(os.path.normpath(self.file(name)) if name else self.path, self._parsed)

    def parsed(self, name: str, reader: Callable[[str], T]) -> T:
        """`reader(path)` of the file `name`, read once: each later call with that reader gets the same value."""
        key = (os.path.normpath(self.file(name)), reader)
        if key not in self._parsed:
            self._parsed[key] = reader(key[0])
        return self._parsed[key]


@contextlib.contextmanager
def atomic_path(path: "str | os.PathLike[str]", mode: Optional[int] = None) -> Iterator[str]:
    """Yields a temporary path beside `path`; renames it onto `path` on success, with permissions `mode`
    (default: a new file's, from the umask).

    On an exception the temporary file is removed and `path` is untouched.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
    os.close(handle)
    try:
        yield temporary
        os.chmod(temporary, 0o666 & ~_umask() if mode is None else mode)  # mkstemp makes files private (0600)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_copy(source: "str | os.PathLike[str]", target: "str | os.PathLike[str]") -> None:
    """Copies `source` to `target` atomically."""
    with atomic_path(target) as temporary:
        shutil.copyfile(source, temporary)


def atomic_write_text(path: "str | os.PathLike[str]", text: str) -> None:
    """Writes `text` to `path` (UTF-8) atomically."""
    with atomic_path(path) as temporary:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(text)


def replace_files(staging: str, directory: str) -> None:
    """Moves every file of `staging` into `directory`, all or none.

    The files being replaced are first moved aside; if any move fails, they
    are put back, so the directory holds either the old set or the new one.
    """
    names = sorted(os.listdir(staging))
    backup = tempfile.mkdtemp(dir=directory, prefix=".old-")
    moved_aside, moved_in = [], []
    try:
        for name in names:
            if os.path.exists(os.path.join(directory, name)):
                os.replace(os.path.join(directory, name), os.path.join(backup, name))
                moved_aside.append(name)
        for name in names:
            os.replace(os.path.join(staging, name), os.path.join(directory, name))
            moved_in.append(name)
    except BaseException:
        for name in moved_in:
            os.remove(os.path.join(directory, name))
        for name in moved_aside:
            os.replace(os.path.join(backup, name), os.path.join(directory, name))
        raise
    finally:
        shutil.rmtree(backup, ignore_errors=True)


def is_within(path: "str | os.PathLike[str]", directory: "str | os.PathLike[str]") -> bool:
    """Whether `path` is `directory` or lies inside it (links resolved)."""
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return os.path.commonpath([path, directory]) == directory


def refuse_overlap(outputs: "list[str]", inputs: Mapping[str, Optional[str]]) -> None:
    """Refuses outputs that are, hold or lie inside an input of the run (`{option: path}`), `--overwrite` or not.

    A run replaces its output directory whole, so an input inside it would be
    lost, and an output inside an input directory mixes the two.

    >>> refuse_overlap(["data/model"], {"--train": "data/train.tsv", "--valid": None})
    >>> refuse_overlap(["data"], {"--train": "data/train.tsv"})
    Traceback (most recent call last):
    ...
    kbert.errors.KbertError: data holds --train (data/train.tsv): the run replaces data whole, so the input would be lost; choose an output apart from the run's inputs
    """
    for output in outputs:
        for option, path in inputs.items():
            if path is None:
                continue
            if is_within(path, output):
                raise KbertError(f"{output} {'is' if is_within(output, path) else 'holds'} {option} ({path}): the "
                                 f"run replaces {output} whole, so the input would be lost; choose an output "
                                 "apart from the run's inputs")
            if is_within(output, path):
                raise KbertError(f"{output} lies inside {option} ({path}): the run's files would mix with its "
                                 "input; choose an output apart from the run's inputs")


def refuse_replacing_the_working_directory(output: "str | os.PathLike[str]") -> None:
    """Refuses to replace a directory this process runs in (or one above it): the rename would fail, or
    leave the shell that ran the command in a deleted directory.

    >>> refuse_replacing_the_working_directory(tempfile.mkdtemp())
    >>> refuse_replacing_the_working_directory(".")
    Traceback (most recent call last):
    ...
    kbert.errors.KbertError: . is the current directory or holds it: replacing it would pull the directory out from under the shell; run the command from another directory
    """
    if os.path.lexists(output) and is_within(os.getcwd(), output):
        raise KbertError(f"{os.fspath(output)} is the current directory or holds it: replacing it would pull the "
                         "directory out from under the shell; run the command from another directory")


def digest_file(digest, path: "str | os.PathLike[str]") -> int:
    """Feeds the file at `path` into `digest` (a `hashlib` object) a block at a time; returns its size."""
    size = 0
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return size


def is_occupied(path: "str | os.PathLike[str]") -> bool:
    """Whether `path` is a file or a directory with something in it."""
    path = os.fspath(path)
    return os.path.isfile(path) or (os.path.isdir(path) and bool(os.listdir(path)))


def staging_directory(target: "str | os.PathLike[str]") -> str:
    """A new empty directory beside `target` (one file system, so it renames into place), with the
    permissions `mkdir` would give it: `mkdtemp`'s are private (0700), which the output would keep."""
    target = os.path.abspath(os.fspath(target))
    path = tempfile.mkdtemp(dir=os.path.dirname(target), prefix=f".{os.path.basename(target)}.tmp-")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o777 & ~umask)
    return path


def replace_directory(source: str, target: str) -> None:
    """Moves the directory `source` to `target`, replacing whatever `target` was, all or nothing.

    The old `target` is first renamed aside, then `source` renamed into place,
    then the old one deleted; if the second rename fails, the old one is put
    back. Both paths must be on one file system (`source` is made beside
    `target` for that).
    """
    target = os.path.normpath(target)
    if not os.path.lexists(target):
        os.rename(source, target)
        return
    holder = tempfile.mkdtemp(dir=os.path.dirname(os.path.abspath(target)),
                              prefix=f".{os.path.basename(target)}.old-")
    aside = os.path.join(holder, "old")
    try:
        os.rename(target, aside)
        try:
            os.rename(source, target)
        except BaseException:
            os.rename(aside, target)
            raise
    finally:  # the holder goes whatever happened, so no empty .old- folder is left beside target
        shutil.rmtree(holder, ignore_errors=True)
