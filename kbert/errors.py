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


class SourceError(KbertError):
    """A checkpoint named by a source (`hf://`, `modelscope://`, a URL, a preset name) cannot be fetched."""


class DataError(KbertError, ValueError):
    """A data file is malformed (names the file and line)."""


class InputError(KbertError, ValueError):
    """A model was called on bad ids (out of a table's range, fractional, too long).

    Raised on the JAX and PyTorch backends; TensorFlow raises its own
    `InvalidArgumentError` from inside the graph, with the same message.
    """


def shown(value, limit: int = 80) -> str:
    """`repr(value)` cut to about `limit` characters: what a message quotes of a client's or a file's value,
    which may be megabytes long.

    >>> shown("x" * 1000, 12)
    "'xxxxxxxxx…' (1000 characters)"
    """
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return text[:limit - 2] + "…" + text[0] + size


def is_blank(text: str) -> bool:
    """Whether a text holds nothing to read: only white space and invisible format or control characters
    (zero-width spaces and joiners, U+FEFF), which tokenizers drop.

    >>> is_blank(" \u200b\u200d\ufeff "), is_blank("a\u200b")
    (True, False)
    """
    import unicodedata

    return all(character.isspace() or unicodedata.category(character) in ("Cf", "Cc") for character in text)


def first_line(error: BaseException) -> str:
    """The first line of a library's error message (TensorFlow's run long)."""
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def is_whole_number(value, minimum: int = 1) -> bool:
    """Whether `value` is an `int` (not a `bool`) of at least `minimum`.

    >>> is_whole_number(3), is_whole_number(0), is_whole_number(0, minimum=0), is_whole_number(True)
    (True, False, True, False)
    """
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def check_whole_number(value, what: str, minimum: int = 1, error: type = KbertError) -> None:
    """Raises `error` naming `what` unless `value` is a whole number of at least `minimum` (1: positive).

    >>> check_whole_number(0, "config.json: key 'vocab_size'", error=ValueError)
    Traceback (most recent call last):
    ...
    ValueError: config.json: key 'vocab_size': expected a positive integer, got 0
    """
    if not is_whole_number(value, minimum):
        expected = {0: "a non-negative integer", 1: "a positive integer"}.get(
            minimum, f"a whole number of at least {minimum}")
        raise error(f"{what}: expected {expected}, got {value!r}")


def tensorflow_installed() -> bool:
    """Whether TensorFlow can be imported here (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("tensorflow") is not None


def require_tensorflow(feature: str, instead: str = ""):
    """TensorFlow, imported for `feature`; where it is not installed, a `KbertError` that says how to get it.

    TensorFlow is a dependency of the package, but kbert builds, loads
    safetensors and generates on JAX or PyTorch without it; only the features
    that are TensorFlow's own need it.
    """
    try:
        import tensorflow
    except ImportError:
        raise KbertError(f"{feature} needs TensorFlow, which this environment lacks: pip install tensorflow"
                         + (f", or {instead}" if instead else "")) from None
    return tensorflow
