"""Models built to be loaded: their weights are never drawn at random.

A model built and then loaded from a checkpoint drew every weight at random first, only for the
checkpoint to replace it: building and loading Qwen3-Embedding-0.6B's shape took 13-30 s and peaked at
1.9-3.4x its weights, where built undrawn it takes 5-9 s and 1.1x (benchmarks.large_load,
docs/distributed-and-precision.md). Keras builds a model
whose variables hold no value inside `keras.StatelessScope(initialize_variables=False)`: each keeps its
initializer and takes a value when it is first initialized. `kbert.checkpoints.loader.load_into` gives
each weight it loads an initializer that reads the checkpoint's tensor, then initializes them all, one
at a time; a weight the checkpoint does not hold (a new task head) draws from its own initializer.

Keras keeps the variables waiting for a value in a per-thread list, and gives no public way to set a
variable's initializer or to drop it from that list: `fill_on_initialize` and `forget_undrawn` are
the two places kbert reaches into it.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable, Iterator

import keras

_PENDING = "uninitialized_variables"  # Keras's per-thread list of the variables built without a value


@contextlib.contextmanager
def undrawn_weights() -> Iterator[None]:
    """Models built within take no values until loaded (`load_into`), or until `initialize_undrawn`.

    Example:
    >>> from kbert import build_transformer_model, bundled_config_path
    >>> with undrawn_weights():
    ...     bert = build_transformer_model(bundled_config_path("bert_tiny"))
    >>> all(is_undrawn(variable) for variable in bert.weights)
    True
    >>> initialize_undrawn()
    >>> any(is_undrawn(variable) for variable in bert.weights)
    False
    """
    with keras.StatelessScope(initialize_variables=False):
        yield


def is_undrawn(variable) -> bool:
    """True while `variable` was built in `undrawn_weights` and holds no value yet."""
    return getattr(variable, "_initializer", None) is not None and variable._value is None


class _Reading:
    """An initializer that returns what `read` gives (a checkpoint's tensor, read when Keras asks)."""

    def __init__(self, read: Callable[[], Any]):
        self.read = read

    def __call__(self, shape, dtype=None, **kwargs):
        return self.read()


def fill_on_initialize(variable, read: Callable[[], Any]) -> None:
    """`variable`, undrawn, takes the value `read()` returns when initialized, in place of a draw."""
    variable._initializer = _Reading(read)


def initialize_undrawn() -> None:
    """Gives every undrawn variable of this thread its value, one at a time, in the order they were built.

    Keras does it as the outermost `StatelessScope` ends: an empty one ends here.
    """
    with keras.StatelessScope():
        pass


def forget_undrawn(variables: Iterable) -> None:
    """Drops `variables` from Keras's waiting list (a model whose load failed: nothing will use them, and
    the next `StatelessScope` to end would otherwise draw them all)."""
    from keras.src.backend.common import global_state

    dropped = {id(variable) for variable in variables}
    pending = global_state.get_global_attribute(_PENDING) or []
    global_state.set_global_attribute(_PENDING, [variable for variable in pending if id(variable) not in dropped])
