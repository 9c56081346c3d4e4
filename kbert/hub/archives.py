"""Unpacking a downloaded zip or tar archive, refusing what could write outside its folder.

Every member is checked before anything is written: an absolute name, a `..`
that climbs out, a link (symbolic or hard) whose target lies outside, a device
or pipe, and a total size over the limit are refused with the member named
(the "zip slip"). Archives are data: nothing in one is executed or unpickled.
"""

from __future__ import annotations

import os
import posixpath
import stat
import tarfile
import zipfile
from typing import Iterable, List, Tuple

from kbert.errors import SourceError

#: The most an archive may unpack to, unless the caller says otherwise (a BERT-large checkpoint
#: with its optimizer slots is under 4 GiB).
MAX_UNPACKED_BYTES = 16 * 2**30


def archive_kind(path: str) -> str:
    """`"zip"` or `"tar"` (plain, gzip, bzip2 or xz), read from the file's contents, not its name."""
    if zipfile.is_zipfile(path):
        return "zip"
    if tarfile.is_tarfile(path):
        return "tar"
    raise SourceError(f"{path}: not a zip or tar archive; a URL checkpoint must be an archive of the "
                      "checkpoint's files (e.g. chinese_L-12_H-768_A-12.zip)")


def unpack(archive: str, target: str, max_bytes: int = MAX_UNPACKED_BYTES, label: str = "") -> None:
    """Unpacks `archive` into the empty or new directory `target`, once every member has been checked.

    `label` names the archive in errors (its URL) when `archive` is a download's temporary file.
    """
    label = label or archive
    if archive_kind(archive) == "zip":
        with zipfile.ZipFile(archive) as bundle:
            _check(label, _zip_members(bundle), max_bytes)
            bundle.extractall(target)
    else:
        with tarfile.open(archive) as bundle:
            _check(label, _tar_members(bundle), max_bytes)
            # The checks above are kbert's own; the "data" filter (Python >= 3.11.4) repeats them
            # and also drops set-uid bits and owners.
            bundle.extractall(target, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))


# (name, size, kind, link target); kind is "file", "dir", "symlink", "hardlink" or "special"
Member = Tuple[str, int, str, str]


def _zip_members(bundle: zipfile.ZipFile) -> List[Member]:
    members = []
    for info in bundle.infolist():
        mode = info.external_attr >> 16
        if stat.S_ISLNK(mode):
            members.append((info.filename, info.file_size, "symlink", bundle.read(info).decode("utf-8", "replace")))
        else:
            members.append((info.filename, info.file_size, "dir" if info.is_dir() else "file", ""))
    return members


def _tar_members(bundle: tarfile.TarFile) -> List[Member]:
    members = []
    for info in bundle.getmembers():
        kind = ("file" if info.isfile() else "dir" if info.isdir() else "symlink" if info.issym()
                else "hardlink" if info.islnk() else "special")
        members.append((info.name, info.size, kind, info.linkname))
    return members


def _check(label: str, members: Iterable[Member], max_bytes: int) -> None:
    total = 0
    for name, size, kind, link in members:
        if kind == "special":
            raise SourceError(f"{label}: member {name!r} is a device or pipe; nothing was unpacked")
        _inside(label, name, name)
        if kind == "symlink":  # relative to the link's own folder
            _inside(label, name, posixpath.join(posixpath.dirname(name), link), f"links to {link!r}")
        elif kind == "hardlink":  # relative to the archive's root
            _inside(label, name, link, f"links to {link!r}")
        total += size
        if total > max_bytes:
            raise SourceError(f"{label}: unpacks to more than {max_bytes:,} bytes (the limit); nothing was "
                              "unpacked. Pass a larger max_unpacked_bytes if the archive is trusted")


def _inside(label: str, member: str, path: str, what: str = "") -> None:
    """Refuses `path` unless it stays inside the folder the archive unpacks into."""
    normal = posixpath.normpath(path.replace("\\", "/"))
    if path.startswith(("/", "\\")) or os.path.splitdrive(path)[0] or normal == ".." \
            or normal.startswith("../"):
        where = "outside the folder it unpacks into" + (f" ({what})" if what else "")
        raise SourceError(f"{label}: member {member!r} would be written {where}; the archive was refused "
                          "and nothing was unpacked")
