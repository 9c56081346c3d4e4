"""Checkpoints by name (`kbert.hub`): archives by URL, the Hugging Face cache, presets, and what is refused.

No network: archives are served by `file://` and by an HTTP server on
loopback (the real download, resume, verify, unpack and cache code runs),
and `hf://` reads a Hugging Face cache laid out with huggingface_hub's own
folder naming, in its offline mode.
"""

import http.server
import io
import json
import os
import pathlib
import sys
import tarfile
import threading
import zipfile

import numpy as np
import pytest

from conftest import HUB_FILES, HUB_REPOSITORY, kbert_in_process, minilm_dir, shared_path, write_hub_cache
from kbert.errors import SourceError
from kbert.hub import fetch_checkpoint, is_checkpoint_name, resolve_checkpoint


def _zip(path: pathlib.Path, files: dict) -> pathlib.Path:
    """A zip archive of {member name: bytes or a file to read}."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as bundle:
        for name, content in files.items():
            bundle.writestr(name, content if isinstance(content, bytes) else pathlib.Path(content).read_bytes())
    return path


def _checkpoint_members(folder: pathlib.Path, prefix: str = "release/") -> dict:
    return {prefix + entry.name: entry for entry in sorted(folder.iterdir()) if entry.is_file()}


def _cache_holds_nothing(cache: pathlib.Path) -> None:
    """Nothing a later run could take for a checkpoint: no unpacked folder, no download (whole or partial)."""
    for folder in ("archives", "downloads"):
        assert not any((cache / folder).iterdir()) if (cache / folder).exists() else True, folder


# --- archives: file:// -------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_a_file_url_archive_is_unpacked_into_the_cache_and_loads_as_the_checkpoint(kind, tmp_path):
    from kbert import build_transformer_model

    source = shared_path("fixtures", "google_tiny")
    archive = tmp_path / f"google_tiny.{kind}"
    if kind == "zip":
        _zip(archive, _checkpoint_members(source))
    else:
        with tarfile.open(archive, "w:gz") as bundle:
            bundle.add(source, arcname="release")
    cache = tmp_path / "cache"
    fetched = fetch_checkpoint(archive.as_uri(), cache_dir=str(cache))
    assert pathlib.Path(fetched.path).parent.parent == cache / "archives"
    assert sorted(os.listdir(fetched.path)) == sorted(os.listdir(source))
    assert os.listdir(cache / "downloads") == []  # the archive is not kept once unpacked

    os.environ["KBERT_CACHE"] = str(cache)  # the builder's own lookup: config beside the weights, by URL
    try:
        archive.unlink()  # from now on the cache alone answers
        by_name = build_transformer_model(checkpoint_path=archive.as_uri())
    finally:
        del os.environ["KBERT_CACHE"]
    by_path = build_transformer_model(str(source / "bert_config.json"), str(source / "bert_model.ckpt"))
    for named, explicit in zip(by_name.weights, by_path.weights):
        np.testing.assert_array_equal(named.numpy(), explicit.numpy())


def test_an_archive_without_a_checkpoint_is_refused_and_not_cached(tmp_path):
    archive = _zip(tmp_path / "notes.zip", {"notes/README.txt": b"no weights here"})
    with pytest.raises(SourceError, match=r"holds no checkpoint kbert reads .* notes/README.txt"):
        fetch_checkpoint(archive.as_uri(), cache_dir=str(tmp_path / "cache"))
    _cache_holds_nothing(tmp_path / "cache")


# --- archives: what could write outside the cache ---------------------------------------------

def _tar_with(path: pathlib.Path, member: tarfile.TarInfo, content: bytes = b"") -> pathlib.Path:
    with tarfile.open(path, "w:gz") as bundle:
        bundle.addfile(member, io.BytesIO(content) if content else None)
    return path


def _link(name: str, target: str, kind=tarfile.SYMTYPE) -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.type, member.linkname = kind, target
    return member


def _file(name: str, size: int) -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.size = size
    return member


@pytest.mark.parametrize("case", ["dot-dot", "absolute", "symlink", "hardlink"])
def test_an_archive_member_that_escapes_is_refused_before_anything_is_written(case, tmp_path):
    outside = tmp_path / "outside.txt"
    archive = {
        "dot-dot": lambda: _zip(tmp_path / "a.zip", {"release/../../outside.txt": b"x"}),
        "absolute": lambda: _tar_with(tmp_path / "a.tar.gz", _file(str(outside), 1), b"x"),
        "symlink": lambda: _tar_with(tmp_path / "a.tar.gz", _link("release/link", "../../../outside.txt")),
        "hardlink": lambda: _tar_with(tmp_path / "a.tar.gz", _link("release/link", "../outside.txt",
                                                                    tarfile.LNKTYPE)),
    }[case]()
    with pytest.raises(SourceError, match="would be written outside the folder it unpacks into"):
        fetch_checkpoint(archive.as_uri(), cache_dir=str(tmp_path / "cache"))
    assert not outside.exists()
    _cache_holds_nothing(tmp_path / "cache")


def test_an_archive_over_the_size_limit_is_refused(tmp_path):
    archive = _zip(tmp_path / "big.zip", {"release/model.safetensors": b"0" * 4096})
    with pytest.raises(SourceError, match="unpacks to more than 1,000 bytes"):
        fetch_checkpoint(archive.as_uri(), cache_dir=str(tmp_path / "cache"), max_unpacked_bytes=1000)
    _cache_holds_nothing(tmp_path / "cache")


# --- archives over HTTP: resume, checksum, the lock ---------------------------------------------

class _Server:
    """An HTTP server on loopback serving one file, with Range support; it can cut its first answer short."""

    def __init__(self, payload: bytes, cut_first_at: int = 0):
        self.payload, self.cut_first_at, self.requests = payload, cut_first_at, []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.requests.append(self.headers.get("Range"))
                start = int(self.headers["Range"][len("bytes="):].rstrip("-")) if self.headers.get("Range") else 0
                body = server.payload[start:]
                self.send_response(206 if start else 200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if len(server.requests) == 1 and server.cut_first_at:
                    self.wfile.write(body[:server.cut_first_at])  # then the connection drops
                    self.close_connection = True
                    return
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/release.zip"

    def close(self):
        self.httpd.shutdown()


@pytest.fixture
def release_zip(tmp_path) -> bytes:
    return _zip(tmp_path / "release.zip", _checkpoint_members(shared_path("fixtures", "google_tiny"))).read_bytes()


def test_a_cut_download_resumes_where_it_stopped(release_zip, tmp_path):
    import hashlib

    server = _Server(release_zip, cut_first_at=len(release_zip) // 2)
    try:
        digest = hashlib.sha256(release_zip).hexdigest()
        fetched = fetch_checkpoint(f"{server.url}#sha256={digest}", cache_dir=str(tmp_path / "cache"))
    finally:
        server.close()
    assert server.requests == [None, f"bytes={len(release_zip) // 2}-"]  # the second asks for the rest only
    assert (pathlib.Path(fetched.path) / "bert_model.ckpt.index").exists()


def test_a_checksum_mismatch_is_refused_and_nothing_is_cached(release_zip, tmp_path):
    server = _Server(release_zip)
    try:
        with pytest.raises(SourceError, match=r"SHA-256 [0-9a-f]{64} does not match the expected 0{64}"):
            fetch_checkpoint(f"{server.url}#sha256={'0' * 64}", cache_dir=str(tmp_path / "cache"))
    finally:
        server.close()
    _cache_holds_nothing(tmp_path / "cache")


def test_two_fetches_at_once_download_once(release_zip, tmp_path):
    server = _Server(release_zip)
    paths, errors = [], []

    def fetch():
        try:
            paths.append(fetch_checkpoint(server.url, cache_dir=str(tmp_path / "cache")).path)
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=fetch) for _ in range(3)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        server.close()
    assert not errors and len(set(paths)) == 1
    assert server.requests == [None]


def test_http_errors_name_the_url(tmp_path):
    server = _Server(b"")
    server.httpd.RequestHandlerClass.do_GET = lambda handler: handler.send_error(404)
    try:
        with pytest.raises(SourceError, match=r"release.zip: the server answered HTTP 404 \(there is no such file\)"):
            fetch_checkpoint(server.url, cache_dir=str(tmp_path / "cache"))
    finally:
        server.close()


def test_an_unreachable_url_says_how_to_place_the_archive_by_hand(tmp_path):
    with pytest.raises(SourceError, match=r"127.0.0.1:9/release.zip: download failed .* after 3 tries; 0 bytes "
                                          r"are kept .* pass file:///PATH/TO/IT, or pass its unpacked directory"):
        fetch_checkpoint("http://127.0.0.1:9/release.zip", cache_dir=str(tmp_path / "cache"))
    _cache_holds_nothing(tmp_path / "cache")


# --- the Hugging Face hub, offline on its own cache ---------------------------------------------

@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> pathlib.Path:
    """A Hugging Face cache holding all-MiniLM-L6-v2's files as the hub lays them out, offline mode on."""
    huggingface_hub = pytest.importorskip("huggingface_hub")
    from huggingface_hub import constants

    cache = tmp_path / "hf"
    snapshot = write_hub_cache(cache)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert huggingface_hub.snapshot_download(HUB_REPOSITORY) == str(snapshot)  # laid out as the hub reads it
    return snapshot


def test_hf_name_reads_the_hugging_face_cache(hub_cache):
    assert resolve_checkpoint(f"hf://{HUB_REPOSITORY}") == str(hub_cache)
    assert resolve_checkpoint(f"hf://{HUB_REPOSITORY}@main") == str(hub_cache)


def test_hf_offline_without_the_files_says_how_to_place_them(hub_cache):
    with pytest.raises(SourceError) as caught:
        fetch_checkpoint("hf://someone/not-cached")
    message = str(caught.value)
    assert message.startswith("hf://someone/not-cached: not in the Hugging Face cache and the hub cannot be reached")
    assert "HF_HUB_OFFLINE=1" in message and "--checkpoint DIR" in message


def test_hf_without_huggingface_hub_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(SourceError, match=r"needs huggingface_hub: pip install 'kbert\[hub\]'"):
        fetch_checkpoint("hf://hfl/chinese-roberta-wwm-ext")


def test_modelscope_without_its_package_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "modelscope", None)
    with pytest.raises(SourceError, match=r"needs modelscope: pip install 'kbert\[hub\]'"):
        fetch_checkpoint("modelscope://damo/nlp_bert_base")


def test_names_and_paths():
    assert is_checkpoint_name("hf://a/b") and is_checkpoint_name("chinese_roberta_wwm_ext")
    assert not is_checkpoint_name("runs/model") and resolve_checkpoint("runs/model") == "runs/model"
    with pytest.raises(SourceError, match=r"hf://a: expected hf://OWNER/NAME\[@REVISION\]"):
        fetch_checkpoint("hf://a")


def test_presets_lists_the_known_names():
    result = kbert_in_process("presets", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["chinese_roberta_wwm_ext"]["source"] == "hf://hfl/chinese-roberta-wwm-ext"
    assert rows["chinese_L-12_H-768_A-12"]["params"] == 101_677_056  # the bundled bert_base_chinese's count


# --- kbert train --checkpoint NAME is the three-path form ----------------------------------------

def _weights(model_dir: pathlib.Path) -> list:
    import h5py

    arrays = []
    with h5py.File(model_dir / "model.weights.h5", "r") as handle:
        handle.visititems(lambda name, item: arrays.append((name, item[()])) if isinstance(item, h5py.Dataset) else None)
    return arrays


def test_train_by_name_is_train_by_three_paths(hub_cache, tmp_path):
    texts = ["a good film", "a bad film", "great acting", "awful plot", "i loved it", "i hated it"] * 4
    (tmp_path / "train.tsv").write_text("".join(f"{text}\t{index % 2}\n" for index, text in enumerate(texts)))
    minilm = minilm_dir()
    archive = _zip(tmp_path / "minilm.zip", {f"minilm/{name}": minilm / name for name in HUB_FILES})
    run = ["train", "--train", tmp_path / "train.tsv", "--epochs", 1, "--maxlen", 12, "--batch-size", 8,
           "--seed", 3]
    forms = {"paths": ["--config", minilm / "config.json", "--vocab", minilm / "vocab.txt",
                       "--checkpoint", minilm / "model.safetensors"],
             "hf": ["--checkpoint", f"hf://{HUB_REPOSITORY}"],
             "archive": ["--checkpoint", archive.as_uri(), "--cache-dir", tmp_path / "cache"]}
    for form, arguments in forms.items():
        result = kbert_in_process(*run, *arguments, "--out", tmp_path / f"out-{form}")
        assert result.returncode == 0, f"{form}: {result.stderr[-2000:]}"
    expected = _weights(tmp_path / "out-paths")
    for form in ("hf", "archive"):
        for (name, array), (_, wanted) in zip(_weights(tmp_path / f"out-{form}"), expected):
            np.testing.assert_array_equal(array, wanted, err_msg=f"{form}: {name}")
