"""A checkpoint by name: `hf://`, `modelscope://`, an archive's URL, or a preset, fetched into a cache.

    hf://OWNER/NAME[@REVISION]        through huggingface_hub: its cache, HF_HUB_OFFLINE, its login
    modelscope://OWNER/NAME[@REV]     through the modelscope package and its cache
    https://.../NAME.zip[#sha256=HEX] an archive (zip, tar.gz, ...) unpacked into kbert's cache
    file:///.../NAME.tar.gz           the same from a local file
    chinese_roberta_wwm_ext           a preset (`kbert.hub.presets`) standing for its source

Whatever the source, the answer is a local directory holding the checkpoint
(a Google checkpoint or `model.safetensors`) with its config and vocabulary,
which every kbert loader reads as if the user had passed it. Archives are
cached under `KBERT_CACHE` (default `~/.cache/kbert`): downloaded whole and
verified, unpacked after every member is checked, then moved into place, all
under a lock; a failure leaves nothing in the cache that a later run could
take for a checkpoint.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import os
import re
import shutil
import urllib.parse
from typing import Callable, List, Optional, Tuple

from kbert.errors import SourceError, first_line
from kbert.hub.archives import MAX_UNPACKED_BYTES, unpack
from kbert.hub.download import download, locked
from kbert.hub.presets import PRESETS
from kbert.io import atomic_write_text, replace_directory, staging_directory

SCHEMES = ("hf://", "modelscope://", "https://", "http://", "file://")
# What kbert reads from a hub repository: weights as data (never a pickled pytorch_model.bin), the
# config and the vocabulary; the rest of a repository (other frameworks' weights) is not fetched.
HUB_FILES = ["*.safetensors", "model.safetensors.index.json", "config.json", "bert_config.json", "vocab.txt",
             "spiece.model", "tokenizer.json", "spm.model", "*.ckpt.index", "*.ckpt.data-*", "checkpoint",
             # a sentence-transformers model's modules: their list, the pooling, projections' configs and weights
             "modules.json", "sentence_bert_config.json", "tokenizer_config.json", "*/config.json",
             "*/model.safetensors", "config_sentence_transformers.json",
             # the older layout, its transformer in 0_Transformer/ with its own settings and tokenizer
             "*/sentence_bert_config.json", "*/tokenizer_config.json", "*/tokenizer.json", "*/vocab.txt",
             "*/spiece.model", "*/sentencepiece.bpe.model",
             # a Stanford ColBERT checkpoint's settings (colbert-ir/colbertv2.0)
             "artifact.metadata"]


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A fetched checkpoint: the directory that holds it, and the family a preset names (else None)."""

    path: str
    family: Optional[str]
    source: str


def is_checkpoint_name(text: "str | os.PathLike[str]") -> bool:
    """True for a source (`hf://...`, a URL) or a preset's name; False for a path on disk."""
    text = os.fspath(text)
    return text.startswith(SCHEMES) or (text in PRESETS and not os.path.exists(text))


def cache_root(cache_dir: Optional[str] = None) -> str:
    """kbert's download cache: `cache_dir`, else `$KBERT_CACHE`, else `$XDG_CACHE_HOME/kbert` (~/.cache/kbert)."""
    default = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kbert")
    return os.path.abspath(cache_dir or os.environ.get("KBERT_CACHE") or default)


def resolve_checkpoint(path_or_name: "str | os.PathLike[str]", cache_dir: Optional[str] = None) -> str:
    """A checkpoint's local path: `path_or_name` itself when it is a path, else the fetched directory."""
    if not is_checkpoint_name(path_or_name):
        return os.fspath(path_or_name)
    return fetch_checkpoint(os.fspath(path_or_name), cache_dir).path


def fetch_checkpoint(name: str, cache_dir: Optional[str] = None,
                     max_unpacked_bytes: int = MAX_UNPACKED_BYTES) -> Checkpoint:
    """Fetches the checkpoint `name` stands for (or finds it in the cache); see the module's docstring.

    Example:
    >>> fetch_checkpoint("hf://no-owner")
    Traceback (most recent call last):
    ...
    kbert.errors.SourceError: hf://no-owner: expected hf://OWNER/NAME[@REVISION], e.g. hf://hfl/chinese-roberta-wwm-ext
    """
    preset = PRESETS.get(name)
    source = preset.source if preset else name
    if source.startswith("hf://"):
        path = _from_hub(source, _hugging_face_snapshot, cache_dir and os.path.join(cache_dir, "huggingface"))
    elif source.startswith("modelscope://"):
        path = _from_hub(source, _modelscope_snapshot, cache_dir and os.path.join(cache_dir, "modelscope"))
    elif source.startswith(SCHEMES):
        url, pinned = _pinned_url(source)
        path = _from_archive(url, (preset and preset.sha256) or pinned, cache_root(cache_dir), max_unpacked_bytes)
    else:
        raise SourceError(f"{name}: not a checkpoint source; expected a path, hf://OWNER/NAME, "
                          f"modelscope://OWNER/NAME, an archive's URL, or a preset ({', '.join(PRESETS)})")
    return Checkpoint(path, preset.family if preset else None, source)


# --- hubs ---------------------------------------------------------------------------------------

def _pinned_url(source: str) -> Tuple[str, Optional[str]]:
    """`https://.../x.zip#sha256=HEX` → (the URL, the digest); any other fragment, or a malformed one, is refused."""
    url, hash_mark, fragment = source.partition("#")
    if url.startswith("file://") and urllib.parse.urlsplit(url).netloc not in ("", "localhost"):
        raise SourceError(f"{source}: a file URL names no host: file:///ABSOLUTE/PATH (three slashes), e.g. "
                          f"file:///{urllib.parse.urlsplit(url).netloc}{urllib.parse.urlsplit(url).path}")
    if not hash_mark:
        return url, None
    if not re.fullmatch(r"sha256=[0-9a-fA-F]{64}", fragment):
        raise SourceError(f"{source}: the fragment {'#' + fragment!r} is not a pin kbert checks; expected "
                          "#sha256= and the file's 64 hex digits (sha256sum prints them), or no fragment")
    return url, fragment[len("sha256="):].lower()


# A hub repository's owner and name: letters, digits, '_', '-', '.', not starting or ending with '-' or '.',
# and no '--' or '..' (the hub's own rule, which also keeps '..' out of a cache path).
_HUB_NAME = r"(?!.*(--|\.\.))[A-Za-z0-9_](?:[\w.-]*[A-Za-z0-9_])?"


def _repository(source: str) -> Tuple[str, Optional[str]]:
    """`hf://owner/name@rev` → ("owner/name", "rev")."""
    scheme, _, rest = source.partition("://")
    repository, _, revision = rest.partition("@")
    if not re.fullmatch(f"{_HUB_NAME}/{_HUB_NAME}", repository):
        raise SourceError(f"{source}: expected {scheme}://OWNER/NAME[@REVISION], e.g. "
                          f"{scheme}://hfl/chinese-roberta-wwm-ext")
    return repository, revision or None


def _from_hub(source: str, snapshot: Callable[[str, str, Optional[str], Optional[str]], str],
              cache_dir: Optional[str]) -> str:
    repository, revision = _repository(source)
    return checkpoint_directory(snapshot(source, repository, revision, cache_dir), source)


_PLACE_BY_HAND = ("or download the repository's files yourself (e.g. hf download OWNER/NAME --local-dir DIR) and "
                  "pass DIR in the name's place")


def _missing(source: str, hub: str, package: str) -> SourceError:
    return SourceError(f"{source}: reading {hub} needs {package}: pip install 'kbert[hub]' (or pip install {package})")


def _hugging_face_snapshot(source: str, repository: str, revision: Optional[str], cache_dir: Optional[str]) -> str:
    try:
        import huggingface_hub
        from huggingface_hub import errors
    except ImportError:
        raise _missing(source, "the Hugging Face hub", "huggingface_hub") from None
    try:
        return huggingface_hub.snapshot_download(repository, revision=revision, cache_dir=cache_dir,
                                                 allow_patterns=HUB_FILES)
    except errors.GatedRepoError:
        raise SourceError(f"{source}: a gated repository: accept its terms on huggingface.co, then log in "
                          "(hf auth login, or set HF_TOKEN)") from None
    except errors.RepositoryNotFoundError:
        raise SourceError(f"{source}: no such repository, or a private one: check the name; for a private "
                          "repository log in first (hf auth login, or set HF_TOKEN)") from None
    except errors.RevisionNotFoundError:
        raise SourceError(f"{source}: the repository has no revision {revision!r}") from None
    except errors.HFValidationError as error:
        raise SourceError(f"{source}: not a Hugging Face repository name ({first_line(error)})") from None
    except errors.LocalEntryNotFoundError:
        raise SourceError(f"{source}: not in the Hugging Face cache and the hub cannot be reached (offline, "
                          "or HF_HUB_OFFLINE=1). Run the command once where the hub is reachable (the files "
                          f"are cached; HF_HUB_OFFLINE=1 then uses them), {_PLACE_BY_HAND}") from None
    except (OSError, errors.HfHubHTTPError) as error:
        raise SourceError(f"{source}: the Hugging Face hub failed ({error}); {_PLACE_BY_HAND}") from None


def _modelscope_snapshot(source: str, repository: str, revision: Optional[str], cache_dir: Optional[str]) -> str:
    try:
        from modelscope import snapshot_download
    except ImportError:
        raise _missing(source, "ModelScope", "modelscope") from None
    try:
        return snapshot_download(repository, revision=revision, cache_dir=cache_dir)
    except Exception as error:  # modelscope's errors share no base class beyond Exception
        raise SourceError(f"{source}: ModelScope failed ({type(error).__name__}: {error}); "
                          f"{_PLACE_BY_HAND}") from None


# --- archives -----------------------------------------------------------------------------------

def _from_archive(url: str, sha256: Optional[str], root: str, max_bytes: int) -> str:
    """The unpacked archive in the cache, fetched first unless a copy with the pinned digest (if any) is there.

    Beside each unpacked archive, `<key>.sha256` records the digest of the archive it came from: a pin is
    checked against it on every hit, so an unpinned fetch never stands in for a pinned one.
    """
    name = re.sub(r"[^\w.-]", "_", url.rstrip("/").rsplit("/", 1)[-1])[:80]
    key = f"{hashlib.sha256(url.encode()).hexdigest()[:16]}-{name}"
    unpacked = os.path.join(root, "archives", key)
    recorded = unpacked + ".sha256"
    with locked(os.path.join(root, "locks", f"{key}.lock")):
        # else another run (perhaps one we waited for) fetched it
        if not os.path.isdir(unpacked) or (sha256 and _recorded_digest(recorded) != sha256):
            for folder in ("downloads", "archives"):
                os.makedirs(os.path.join(root, folder), exist_ok=True)
            archive = os.path.join(root, "downloads", key)
            digest = download(url, archive, sha256, max_bytes=max_bytes)  # packed, it is no larger than unpacked
            staging = staging_directory(unpacked)
            try:
                unpack(archive, staging, max_bytes, label=url)
                checkpoint_directory(staging, url, shown_root="the archive")  # none: not cached
                replace_directory(staging, unpacked)
                atomic_write_text(recorded, digest + "\n")
            finally:
                shutil.rmtree(staging, ignore_errors=True)
                os.remove(archive)  # unpacked (or refused): the archive itself is not kept
    return checkpoint_directory(unpacked, url)


def _recorded_digest(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return None


def checkpoint_directory(root: str, source: str, shown_root: Optional[str] = None) -> str:
    """The one directory under `root` that holds a checkpoint (`model.safetensors` or a TF `.index`).

    `shown_root`: how errors name `root` when it is a staging folder the user will never see.
    """
    # a sentence-transformers folder is one model, its modules' weights (2_Dense/, 0_Transformer/) included
    modules = sorted(os.path.dirname(path) for path in glob.glob(os.path.join(root, "**", "modules.json"),
                                                                 recursive=True))
    if len(modules) == 1:
        return modules[0]
    found = sorted({os.path.dirname(path) for pattern in ("**/*.safetensors", "**/*.index")
                    for path in glob.glob(os.path.join(root, pattern), recursive=True)})
    if len(found) == 1:
        return found[0]
    if not found:
        raise SourceError(f"{source}: holds no checkpoint kbert reads (a model.safetensors, or a TF checkpoint's "
                          f".index and .data files); it has {_listing(root)}. kbert never loads a pickled "
                          "pytorch_model.bin: convert one to safetensors with transformers first")
    folders = ", ".join(os.path.relpath(p, root) + "/" for p in found)
    if shown_root:
        raise SourceError(f"{source}: {shown_root} holds {len(found)} checkpoints ({folders}) and kbert takes one; "
                          "nothing was cached. Unpack it yourself and pass the directory of the one to use")
    raise SourceError(f"{source}: holds {len(found)} checkpoints ({folders}); pass the directory of the one to "
                      f"use, under {root}")


def _listing(root: str, most: int = 8) -> str:
    names: List[str] = sorted(os.path.relpath(os.path.join(folder, file), root)
                              for folder, _, files in os.walk(root) for file in files)
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "") or "no files"
