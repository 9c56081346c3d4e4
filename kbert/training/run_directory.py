"""A run's output directory `OUT` and its working copy `OUT.partial/`.

A run never harms an earlier one: it is written into `OUT.partial/` (with
`resume/`, the last completed epoch's weights, optimizer state and epoch, for
`--resume`) and moved to `OUT` only when it completes. An existing `OUT` is
refused unless `overwrite`, and even then it is replaced only at the end.
"""

from __future__ import annotations

import json
import os
import shutil

from kbert.errors import KbertError
from kbert.io import atomic_write_text, is_occupied, replace_directory
from kbert.training.model_dir import RESUME_DIR, TRAINING_FILE

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
        if self.existed and not overwrite:
            raise KbertError(f"{self.out} already exists: pass --overwrite to replace it when the new run "
                             "completes, or choose another --out")

    def begin(self, resume: bool, state: dict) -> dict:
        """Creates OUT.partial/ with training.json (or reads the interrupted run's state)."""
        path = os.path.join(self.partial, TRAINING_FILE)
        if resume:
            with open(path, encoding="utf-8") as handle:
                return json.load(handle)
        os.makedirs(self.partial)
        write_json(path, state)
        return state

    def stopped(self, state: dict, epochs: int) -> str:
        """Cleans up after a run that did not complete; returns what happened, for the user."""
        completed = len(state.get("history", []))
        untouched = f"{self.out} is unchanged" if self.existed else f"{self.out} was not created"
        if not completed:
            shutil.rmtree(self.partial, ignore_errors=True)
            return f"interrupted before the first epoch completed: nothing was kept, and {untouched}"
        return (f"interrupted after {completed} of {epochs} epochs: they are kept in {self.partial} "
                f"({untouched}); run the same command with --resume to continue")

    def publish(self) -> None:
        replace_directory(self.partial, self.out)


def write_json(path: str, value) -> None:
    atomic_write_text(path, json.dumps(value, indent=1, ensure_ascii=False) + "\n")
