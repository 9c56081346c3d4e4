"""What `predict`, `evaluate` and `embed` share: the model directory's task and their input texts."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, List

from kbert.errors import DataError, KbertError

if TYPE_CHECKING:
    from kbert.io import ModelFolder


def model_folder(args) -> "ModelFolder":
    """The model `--model` names (a name fetched once), as the one `ModelFolder` its task and its loading read."""
    from kbert.io import ModelFolder
    from kbert.tasks.predictors import resolved

    return ModelFolder(resolved(args.model))


def model_task(args, folder: "ModelFolder | None" = None) -> str:
    """The model directory's task (`folder`: `model_folder(args)`, read already); a --task that differs is an
    error."""
    from kbert.tasks.predictors import model_task

    task = model_task(folder or model_folder(args))
    if task == "mlm" and args.command != "predict":
        raise KbertError(f"{args.model}: a pre-trained model (kbert pretrain), which has no task to "
                         f"{args.command}: fine-tune it with kbert train --checkpoint {args.model} (its "
                         "config and vocabulary are read from there)")
    if args.task is not None and args.task != task:
        raise KbertError(f"{args.model}: a model trained for --task {task}, not {args.task}")
    return task


def input_lines(path: str) -> List[str]:
    """One text a line of a file, or of standard input for `-`."""
    if path == "-":
        return read_standard_input()
    with open(path, "rb") as handle:
        return _text_lines(handle.read(), path)


def read_standard_input() -> List[str]:
    """One text a line from standard input (UTF-8)."""
    return _text_lines(sys.stdin.buffer.read(), "standard input")


def _text_lines(data: bytes, source: str) -> List[str]:
    """One text a line (UTF-8): lines end at \\n (or \\r\\n) only; a blank line is ""."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise DataError(f"{source}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    lines = [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]
    if lines and not lines[-1]:
        lines.pop()  # the newline that ends the last line
    if not any(line.strip() for line in lines):
        raise DataError(f"{source}: no texts to predict (expected one text a line)")
    return lines
