"""The decoding-step rule every engine shares, in NumPy alone (or any array module with NumPy's names).

After the prompt, each step feeds one new token per row. Its position is the
row's count of tokens so far; it may attend to every cache slot up to its own;
and a T5 decoder started from the id its model hides (bert4keras's T5 hides
id 0, T5's own start id) never attends to slot 0, the start token's. The Keras
engines (`kbert.generation.engines`, and the compiled loops of
`kbert.generation.cache` with `keras.ops`) and the ONNX export's
`OnnxGenerator` all take the rule from here.
"""

from __future__ import annotations

import numpy as np


def next_step(lengths, slots: int, hide_start, ops=np):
    """Each row's position `[rows, 1]` and the slots it may attend to `[rows, 1, slots]`, for a step that
    feeds one token after `lengths` tokens; `ops` is NumPy or `keras.ops` (inside a compiled loop).

    Example:
    >>> positions, allowed = next_step(np.array([1, 3]), slots=4, hide_start=True)
    >>> positions.tolist(), allowed.astype(int).tolist()
    ([[1], [3]], [[[0, 1, 0, 0]], [[0, 1, 1, 1]]])
    """
    columns = ops.arange(slots, dtype="int32")
    positions = lengths[:, None]
    allowed = columns[None, None, :] <= positions[:, :, None]
    return positions, ops.where(hide_start & (columns == 0)[None, None, :], False, allowed)


def prompt_step(lengths, longest: int, slots: int, causal: bool, hide_start: bool) -> np.ndarray:
    """The slots each prompt token may attend to in the first step `[rows, longest, slots]`: the row's real
    tokens (`lengths`), only those up to itself where `causal` (a language model, T5's decoder; a UniLM
    prompt is its source, seen whole), never slot 0 where `hide_start`.

    Example:
    >>> prompt_step(np.array([2]), longest=2, slots=3, causal=True, hide_start=False).astype(int).tolist()
    [[[1, 0, 0], [1, 1, 0]]]
    """
    columns = np.arange(slots)[None, None, :]
    allowed = columns < np.asarray(lengths)[:, None, None]
    if causal:
        allowed = allowed & (columns <= np.arange(longest)[None, :, None])
    return allowed & (columns != 0) if hide_start else allowed
