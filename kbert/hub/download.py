"""Downloading one file as users expect: resumed, verified, shown, and moved into place whole.

The bytes go to `<target>.part`; a cut connection keeps them, and the next
try (at once, up to `ATTEMPTS` times, or a later run) asks the server for the
rest with an HTTP `Range` request. Beside the part, `<target>.part.json`
records what it is a part of (the URL, the server's `ETag` or
`Last-Modified`, the full length): the rest is asked for with `If-Range`, so a
file that changed on the server is fetched whole again, and a part is taken
as finished only when the server says the file has exactly its length. Only a
complete file whose SHA-256 matches (when one is given) is renamed to
`target`, so an interrupted, stale or corrupt download is never taken for a
checkpoint.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request
from typing import Iterator, Optional

from kbert.errors import SourceError
from kbert.io import digest_file

ATTEMPTS = 3
_CHUNK = 1 << 20
_TIMEOUT_S = 60


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """Holds an exclusive lock on `path` (created if need be): two processes never fetch one file at once."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as handle:
        _lock(handle, True)
        try:
            yield
        finally:
            _lock(handle, False)


def _lock(handle, take: bool) -> None:
    try:
        import fcntl
    except ImportError:  # Windows: a lock on the file's first byte, waited for
        import msvcrt

        handle.seek(0)
        while take:
            try:
                return msvcrt.locking(handle.fileno(), msvcrt.LK_LOCK, 1)
            except OSError:  # LK_LOCK gives up after 10 s; keep waiting for the other download
                continue
        return msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)
    fcntl.flock(handle, fcntl.LOCK_EX if take else fcntl.LOCK_UN)


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    digest_file(digest, path)
    return digest.hexdigest()


def download(url: str, target: str, sha256: Optional[str] = None, progress: Optional[bool] = None,
             max_bytes: Optional[int] = None) -> str:
    """Fetches `url` into `target` (resuming `target.part`), checks `sha256`, returns the file's SHA-256.

    `progress`: a progress line on stderr (default: when stderr is a terminal). `max_bytes`: the largest file
    taken (None: any); a larger one is refused, by its declared length before any byte, else once it passes.
    """
    partial = target + ".part"
    show = sys.stderr.isatty() if progress is None else progress
    for attempt in range(1, ATTEMPTS + 1):
        try:
            _fetch(url, partial, show, max_bytes)
            break
        except (OSError, http.client.HTTPException) as error:  # a cut connection, a timeout, a reset
            if isinstance(error, urllib.error.HTTPError):
                raise SourceError(_http_error(url, error)) from None
            if attempt == ATTEMPTS:
                kept = os.path.getsize(partial) if os.path.exists(partial) else 0
                what = (f"{kept:,} bytes are kept in {partial} and the next run resumes from there" if kept
                        else "nothing was kept")
                raise SourceError(f"{url}: download failed ({error}) after {ATTEMPTS} tries; {what}. Offline, "
                                  "download the archive elsewhere and pass file:///PATH/TO/IT, or pass its "
                                  "unpacked directory") from None
            time.sleep(attempt / 2)  # a moment for a dropped connection or a busy server
    found = sha256_of(partial)
    if sha256 and found != sha256.lower():
        _discard(partial)  # a wrong file is not resumed: the next run starts afresh
        raise SourceError(f"{url}: SHA-256 {found} does not match the expected {sha256}; the download was "
                          "deleted. The file on the server changed or was corrupted on the way")
    os.replace(partial, target)
    _discard(partial, keep_part=True)
    return found


def _discard(partial: str, keep_part: bool = False) -> None:
    for path in ((partial + ".json",) if keep_part else (partial, partial + ".json")):
        if os.path.exists(path):
            os.remove(path)


def _too_large(url: str, partial: str, size: int, max_bytes: int) -> SourceError:
    _discard(partial)
    return SourceError(f"{url}: {size:,} bytes or more, over the limit of {max_bytes:,} for a download; nothing "
                       "was kept. Download it yourself and pass the unpacked directory")


def _fetch(url: str, partial: str, show: bool, max_bytes: Optional[int] = None) -> None:
    """Appends the rest of `url` to `partial`; returns when the server has sent all it has."""
    record = _part_record(url, partial)
    have = os.path.getsize(partial) if record else 0
    request = urllib.request.Request(url, headers={"User-Agent": "kbert"})
    if have:
        request.add_header("Range", f"bytes={have}-")
        if record.get("validator"):  # the rest only if the file is still the one the part began
            request.add_header("If-Range", record["validator"])
    try:
        response = urllib.request.urlopen(request, timeout=_TIMEOUT_S)
    except urllib.error.HTTPError as error:
        if error.code == 416 and have:
            if _whole_length(error.headers) == have and _same_file(record, error.headers):
                return  # nothing after what we hold, and the server's file is that long: complete
            _discard(partial)  # a part of some other file (changed on the server): start afresh
            raise ConnectionError("the part kept from an earlier try is not a part of the file on the server now; "
                                  "starting again") from None
        raise
    with response:
        resumed = bool(have) and getattr(response, "status", None) == 206 and _same_file(record, response.headers)
        length = response.headers.get("Content-Length")
        if not resumed:  # the server (or a file:// URL) sends the whole file: record what it is a part of
            have = 0
            record = {"url": url, "validator": _validator(response.headers),
                      "length": int(length) if length else None}
            with open(partial + ".json", "w", encoding="utf-8") as handle:
                json.dump(record, handle)
        total = have + int(length) if length else record.get("length")
        if max_bytes is not None and total is not None and total > max_bytes:
            raise _too_large(url, partial, total, max_bytes)
        with open(partial, "ab" if resumed else "wb") as handle:
            meter = _Progress(url, total, have, show)
            for block in iter(lambda: response.read(_CHUNK), b""):
                handle.write(block)
                meter.advance(len(block))
                size = handle.tell()
                if max_bytes is not None and size > max_bytes:  # a length the server did not declare
                    handle.close()
                    raise _too_large(url, partial, size, max_bytes)
            meter.finish()
        received = os.path.getsize(partial)
    if total is not None and received < total:
        raise ConnectionError(f"the connection closed after {received:,} of {total:,} bytes")


def _part_record(url: str, partial: str) -> dict:
    """What `partial` is a part of, when it is a part of `url`; else {} (and a stale part is dropped)."""
    try:
        with open(partial + ".json", encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        record = {}
    if not (os.path.exists(partial) and isinstance(record, dict) and record.get("url") == url):
        _discard(partial)  # a part without its record (or of another URL) cannot be checked: not resumed
        return {}
    return record


def _validator(headers) -> Optional[str]:
    """The server's name for this version of the file: a strong ETag, else Last-Modified (If-Range's rule)."""
    etag = headers.get("ETag")
    if etag and not etag.startswith("W/"):
        return etag
    return headers.get("Last-Modified")


def _same_file(record: dict, headers) -> bool:
    """False when the server names its file differently from when the part began (a changed file)."""
    now = _validator(headers)
    return not (record.get("validator") and now and now != record["validator"])


def _whole_length(headers) -> Optional[int]:
    """The file's length from a 416 answer's `Content-Range: bytes */LENGTH`."""
    match = re.fullmatch(r"bytes \*/(\d+)", (headers.get("Content-Range") or "").strip())
    return int(match.group(1)) if match else None


def _http_error(url: str, error: urllib.error.HTTPError) -> str:
    meaning = {401: "it needs credentials", 403: "access is refused", 404: "there is no such file"}
    return f"{url}: the server answered HTTP {error.code} ({meaning.get(error.code, error.reason)})"


class _Progress:
    """`chinese_L-12_H-768_A-12.zip  120.5 / 381.9 MB  32%  12.3 MB/s`, redrawn at most twice a second."""

    def __init__(self, url: str, total: Optional[int], done: int, show: bool):
        self.name, self.total, self.done, self.show = url.rsplit("/", 1)[-1], total, done, show
        self.start, self.started_at, self.drawn = done, time.monotonic(), 0.0

    def advance(self, count: int) -> None:
        self.done += count
        if self.show and time.monotonic() - self.drawn > 0.5:
            self.draw()

    def draw(self, end: str = "") -> None:
        self.drawn = time.monotonic()
        rate = (self.done - self.start) / max(self.drawn - self.started_at, 1e-6) / 1e6
        size = f"{self.done / 1e6:,.1f}" + (f" / {self.total / 1e6:,.1f} MB  {self.done / self.total:4.0%}"
                                            if self.total else " MB")
        print(f"\r{self.name}  {size}  {rate:,.1f} MB/s", end=end, file=sys.stderr, flush=True)

    def finish(self) -> None:
        if self.show:
            self.draw(end="\n")
