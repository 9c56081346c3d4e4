"""Unpacking a downloaded zip or tar archive, refusing what could write outside its folder.

Every member is checked before anything is written: an absolute name, a `..`
that climbs out, a link (symbolic or hard) whose target lies outside, a device
or pipe, too many members, and a total size over the limit are refused with
the member named (the "zip slip"). Paths are followed through the links the
archive made before them, as the file system will, so a chain of links that
each look harmless as text (`s2 -> .`, `s1 -> s2/..`, `s1/x`) is caught too.
Archives are data: nothing in one is executed or unpickled.
"""

from __future__ import annotations

import os
import posixpath
import stat
import tarfile
import zipfile
import zlib
from typing import Dict, Iterator, List, Optional, Tuple

from kbert.errors import SourceError

#: The most an archive may unpack to, unless the caller says otherwise (a BERT-large checkpoint
#: with its optimizer slots is under 4 GiB).
MAX_UNPACKED_BYTES = 16 * 2**30
#: The most members an archive may hold: a checkpoint is a handful of files, and every member costs
#: memory and a cache entry before the total size says anything.
MAX_MEMBERS = 10_000
#: A zip link's target is a path of a few bytes; a longer one is not read.
MAX_LINK_BYTES = 4096
#: How many links one path may pass through before it is taken for a loop (Linux's own limit).
_MAX_HOPS = 40

# The errors a truncated or corrupt archive raises while its members are read or written.
_CORRUPT = (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, OSError)


def archive_kind(path: str, label: str = "") -> str:
    """`"zip"` or `"tar"` (plain, gzip, bzip2 or xz), read from the file's contents, not its name."""
    if zipfile.is_zipfile(path):
        return "zip"
    if tarfile.is_tarfile(path):
        return "tar"
    raise SourceError(f"{label or path}: not a zip or tar archive, or a truncated one; a URL checkpoint must be "
                      "an archive of the checkpoint's files (e.g. chinese_L-12_H-768_A-12.zip)")


def unpack(archive: str, target: str, max_bytes: int = MAX_UNPACKED_BYTES, label: str = "",
           max_members: Optional[int] = None) -> None:
    """Unpacks `archive` into the empty or new directory `target`, once every member has been checked.

    `label` names the archive in errors (its URL) when `archive` is a download's temporary file;
    `max_members` defaults to `MAX_MEMBERS`. On an error, part of the archive may lie in `target`: the
    caller unpacks into a staging folder.
    """
    label, max_members = label or archive, max_members or MAX_MEMBERS
    try:
        if archive_kind(archive, label) == "zip":
            with zipfile.ZipFile(archive) as bundle:
                _check(label, _zip_members(label, bundle, max_members), max_bytes)
                bundle.extractall(target)
        else:
            with tarfile.open(archive) as bundle:
                _check(label, _tar_members(label, bundle, max_members), max_bytes)
                _extract_tar(label, bundle, target)
    except _CORRUPT as error:
        raise SourceError(f"{label}: the archive is truncated or corrupt ({type(error).__name__}: {error}); "
                          "nothing was kept. Fetch it again, or check the file") from None


def _extract_tar(label: str, bundle: tarfile.TarFile, target: str) -> None:
    """Extracts with the standard library's "data" filter where this Python has it (3.11.4+, 3.10.12+).

    kbert's own checks above already refuse what the filter would; the filter also drops set-uid bits and
    owners, and is a second guard. Without it (older Pythons) the checks alone stand.
    """
    if not hasattr(tarfile, "data_filter"):
        bundle.extractall(target)
        return
    try:
        bundle.extractall(target, filter="data")
    except tarfile.FilterError as error:
        raise SourceError(f"{label}: member {getattr(error, 'tarinfo', None) and error.tarinfo.name!r} was "
                          f"refused ({error}); the archive was refused") from None


# (name, size, kind, link target); kind is "file", "dir", "symlink", "hardlink" or "special"
Member = Tuple[str, int, str, str]


def _counted(label: str, members: Iterator, most: int) -> Iterator:
    for count, member in enumerate(members, 1):
        if count > most:
            raise SourceError(f"{label}: holds more than {most:,} members (the limit); nothing was unpacked. "
                              "A checkpoint archive holds a few files: unpack this one yourself if it is trusted")
        yield member


def _zip_members(label: str, bundle: zipfile.ZipFile, most: int) -> List[Member]:
    members = []
    for info in _counted(label, iter(bundle.infolist()), most):
        if stat.S_ISLNK(info.external_attr >> 16):
            members.append((info.filename, 0, "symlink", _zip_link_target(label, bundle, info)))
        else:
            members.append((info.filename, info.file_size, "dir" if info.is_dir() else "file", ""))
    return members


def _zip_link_target(label: str, bundle: zipfile.ZipFile, info: zipfile.ZipInfo) -> str:
    """A zip link's target, read only when it is a path's length (the size field of a crafted zip can lie)."""
    with bundle.open(info) as member:
        target = member.read(MAX_LINK_BYTES + 1)
    if info.file_size > MAX_LINK_BYTES or len(target) > MAX_LINK_BYTES:
        raise SourceError(f"{label}: member {info.filename!r} is a link whose target is over {MAX_LINK_BYTES:,} "
                          "bytes; the archive was refused and nothing was unpacked")
    return target.decode("utf-8", "replace")


def _tar_members(label: str, bundle: tarfile.TarFile, most: int) -> List[Member]:
    members = []
    for info in _counted(label, iter(bundle), most):  # read one header at a time, to stop at the limit
        kind = ("file" if info.isfile() else "dir" if info.isdir() else "symlink" if info.issym()
                else "hardlink" if info.islnk() else "special")
        members.append((info.name, info.size, kind, info.linkname))
    return members


def _check(label: str, members: List[Member], max_bytes: int) -> None:
    tree = _Tree(label)
    total = 0
    for name, size, kind, link in members:
        if kind == "special":
            raise SourceError(f"{label}: member {name!r} is a device or pipe; nothing was unpacked")
        if kind == "symlink":
            tree.add_link(name, link)
            continue
        tree.resolve(name, tree.parts(name, name))
        if kind == "hardlink":  # relative to the archive's root
            tree.resolve(name, tree.parts(name, link, f"links to {link!r}"), f"links to {link!r}")
        total += size
        if total > max_bytes:
            raise SourceError(f"{label}: unpacks to more than {max_bytes:,} bytes (the limit); nothing was "
                              "unpacked. Pass a larger max_unpacked_bytes if the archive is trusted")


class _Tree:
    """The folder an archive unpacks into, as far as its links go: paths are followed as the file system will.

    A link is recorded by the path it stands for. A link may not be made where an earlier member's path
    already passed (its meaning there would change under the earlier, already-checked paths).
    """

    def __init__(self, label: str):
        self.label = label
        self.links: Dict[str, str] = {}  # a symbolic link made so far → the folder-relative path it stands for
        self.passed: set = set()  # every folder-relative path some member's path went through

    def add_link(self, name: str, target: str) -> None:
        what = f"links to {target!r}"
        parts = self.parts(name, name)
        folder = self.resolve(name, parts[:-1])
        here = posixpath.join(folder, parts[-1]) if parts else folder
        if here in self.passed or here in self.links or not parts:
            raise SourceError(f"{self.label}: member {name!r} makes a link where the archive already has a path "
                              "(a link over a folder changes where earlier members go); the archive was refused "
                              "and nothing was unpacked")
        self.links[here] = self.resolve(name, self.parts(name, posixpath.join(folder, target), what), what)

    def parts(self, member: str, path: str, what: str = "") -> List[str]:
        """`path`'s components; an absolute path or a drive is refused."""
        path = path.replace("\\", "/")
        if path.startswith("/") or os.path.splitdrive(path)[0]:
            raise self._outside(member, what)
        return [part for part in path.split("/") if part not in ("", ".")]

    def resolve(self, member: str, parts: List[str], what: str = "") -> str:
        """The folder-relative path `parts` names once earlier links are followed; outside is refused."""
        pending, resolved, hops = list(parts), [], 0
        while pending:
            part = pending.pop(0)
            if part == "..":
                if not resolved:
                    raise self._outside(member, what)
                resolved.pop()
                continue
            resolved.append(part)
            self.passed.add("/".join(resolved))
            target = self.links.get("/".join(resolved))
            if target is not None:
                hops += 1
                if hops > _MAX_HOPS:
                    raise SourceError(f"{self.label}: member {member!r} passes through more than {_MAX_HOPS} "
                                      "links (a loop); the archive was refused and nothing was unpacked")
                resolved = target.split("/") if target else []
        return "/".join(resolved)

    def _outside(self, member: str, what: str = "") -> SourceError:
        where = "outside the folder it unpacks into" + (f" ({what})" if what else "")
        return SourceError(f"{self.label}: member {member!r} would be written {where}; the archive was refused "
                           "and nothing was unpacked")
