"""Exceptions raised by kbert.

Every error a user can cause (a bad config, a checkpoint that does not fit the
model, a malformed data file) is a `KbertError` whose message names the file,
key or variable at fault and what was expected. The CLI catches `KbertError`
once and exits with status 2.
"""


class KbertError(Exception):
    """Base class of every error kbert raises on bad input."""


class ConfigError(KbertError, ValueError):
    """A BERT config file or dict is missing a key or holds a bad value."""


class CheckpointError(KbertError):
    """A checkpoint cannot be read, or does not fit the model."""


class DataError(KbertError, ValueError):
    """A data file is malformed (names the file and line)."""


def first_line(error: BaseException) -> str:
    """The first line of a library's error message (TensorFlow's run long)."""
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
