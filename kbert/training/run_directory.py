"""A run's output directory `OUT` and its working copy `OUT.partial/`.

A run never harms an earlier one: it is written into `OUT.partial/` (with
`resume/`, the last completed epoch's weights, optimizer state and epoch, for
`--resume`) and moved to `OUT` only when it completes. An existing `OUT` is
refused unless `overwrite`, and even then it is replaced only at the end.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from typing import Dict, Optional, Sequence

from kbert.errors import KbertError
from kbert.io import (atomic_write_text, digest_file, is_occupied, refuse_replacing_the_working_directory,
                      replace_directory)
from kbert.training.data import LabelMap
from kbert.training.model_dir import CONFIG_FILE, RESUME_DIR, TRAINING_FILE
from kbert.training.options import TrainingOptions

PARTIAL_SUFFIX = ".partial"


class RunDirectory:
    """A run's output directory `OUT` and its working copy `OUT.partial/`."""

    def __init__(self, out_dir: str):
        self.out = os.path.normpath(os.fspath(out_dir))
        self.partial = self.out + PARTIAL_SUFFIX
        self.existed = is_occupied(self.out)

    def check(self, resume: bool, overwrite: bool) -> None:
        """Refuses a run that would overwrite or mix with an earlier one; writes nothing."""
        interrupted = os.path.isdir(os.path.join(self.partial, RESUME_DIR))
        if resume and not interrupted:
            raise KbertError(f"{self.out}: nothing to resume (no interrupted run in {self.partial})")
        if os.path.lexists(self.partial) and not resume:
            if not interrupted:
                raise KbertError(f"{self.partial} is left from a run of {self.out} that stopped before "
                                 "completing an epoch (nothing to resume): delete it to start again")
            raise KbertError(f"{self.partial} holds an interrupted run for {self.out}: pass --resume to "
                             "continue it, or delete that directory to start again")
        refuse_replacing_the_working_directory(self.out)
        if self.existed and not overwrite:
            raise KbertError(f"{self.out} already exists: pass --overwrite to replace it when the new run "
                             "completes, or choose another --out")

    def check_same_run(self, state: dict, labels: Sequence[str], config: dict) -> None:
        """On --resume: the interrupted run must have this run's task, options, labels and config.

        Resuming with other settings would save weights under the old
        training.json (unreadable) or fail in Keras: the differences are named
        instead, before anything is written.
        """
        saved = _read_json(os.path.join(self.partial, TRAINING_FILE))
        saved_labels = LabelMap.load(self.partial).names
        saved_config = _read_json(os.path.join(self.partial, CONFIG_FILE))
        differences = [f"{key} {saved.get(key)!r} (now {value!r})" for key, value in state.items()
                       if key not in _NOT_SETTINGS and key != "options" and saved.get(key) != value]
        # An option that the interrupted run's kbert did not have yet was at its default there.
        options = {**dataclasses.asdict(TrainingOptions()), **saved.get("options", {})}
        differences += [f"{key} {options.get(key)!r} (now {value!r})" for key, value in state["options"].items()
                        if options.get(key) != value]
        if saved_labels != list(labels):
            differences.append(f"labels {', '.join(map(str, saved_labels))} (now {', '.join(labels)})")
        differences += [f"config {key} {saved_config.get(key)!r} (now {value!r})" for key, value in config.items()
                        if saved_config.get(key) != value]
        differences += _changed_files(saved.get("data_files"), state["data_files"])
        if differences:
            raise KbertError(f"{self.partial}: --resume continues a run with the same settings, but the "
                             f"interrupted run has {'; '.join(differences)}: resume with its settings, or "
                             f"delete {self.partial} to start again")

    def begin(self, resume: bool, state: dict) -> dict:
        """Creates OUT.partial/ with training.json (or reads the interrupted run's state)."""
        path = os.path.join(self.partial, TRAINING_FILE)
        if resume:
            with open(path, encoding="utf-8") as handle:
                return json.load(handle)
        os.makedirs(self.partial)
        write_json(path, state)
        return state

    def stopped(self, state: dict, epochs: int, how: str = "interrupted") -> str:
        """Cleans up after a run that did not complete; returns what happened (`how` it ended), for the user."""
        completed = len(state.get("history", []))
        untouched = f"{self.out} is unchanged" if self.existed else f"{self.out} was not created"
        if not completed:
            shutil.rmtree(self.partial, ignore_errors=True)
            return f"{how} before the first epoch completed: nothing was kept, and {untouched}"
        return (f"{how} after {completed} of {epochs} epochs: they are kept in {self.partial} "
                f"({untouched}); run the same command with --resume to continue")

    def publish(self) -> None:
        replace_directory(self.partial, self.out)


# training.json entries that describe a run's data or progress, not its settings.
_NOT_SETTINGS = {"history", "train_data", "valid_data", "examples", "chunks", "worker", "best_epoch", "data_files",
                 "text_pairs"}


def data_fingerprints(paths: Dict[str, Optional[str]]) -> Dict[str, Optional[dict]]:
    """Each data file's (or directory's) path, size and SHA-256, so that --resume can tell it is the same data."""
    return {option: None if path is None else _fingerprint(os.fspath(path)) for option, path in paths.items()}


def _fingerprint(path: str) -> dict:
    files = [path] if not os.path.isdir(path) else sorted(
        os.path.join(root, name) for root, _, names in os.walk(path) for name in names)
    digest, size = hashlib.sha256(), 0
    for name in files:
        digest.update(os.path.relpath(name, path).encode() + b"\0")
        size += digest_file(digest, name)
    return {"path": os.path.abspath(path), "bytes": size, "sha256": digest.hexdigest()}


def _changed_files(saved: Optional[dict], now: dict) -> list:
    """The data files whose content differs from the interrupted run's (runs from before kbert kept them: none)."""
    if not saved:
        return []
    return [f"{option} {(saved.get(option) or {}).get('path')} of {(saved.get(option) or {}).get('bytes')} bytes "
            f"(now {(current or {}).get('path')} of {(current or {}).get('bytes')} bytes, other content)"
            for option, current in now.items()
            if (saved.get(option) or {}).get("sha256") != (current or {}).get("sha256")]


def _read_json(path: str):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as error:
        raise KbertError(f"{path}: cannot read the interrupted run ({error}); delete "
                         f"{os.path.dirname(path)} to start again") from None


def write_json(path: str, value) -> None:
    atomic_write_text(path, json.dumps(value, indent=1, ensure_ascii=False) + "\n")
