"""Atomic file writing: a failed write never leaves a half-written file."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Iterator


@contextlib.contextmanager
def atomic_path(path: "str | os.PathLike[str]") -> Iterator[str]:
    """Yields a temporary path beside `path`; renames it onto `path` on success.

    On an exception the temporary file is removed and `path` is untouched.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
    os.close(handle)
    try:
        yield temporary
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes files private (0600)
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
