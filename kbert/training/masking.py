"""Masked-language-model inputs: sentences packed into full sequences, and whole words masked afresh.

Pre-training reads lines of text, each already tokenised into ids and a word
number per token (`kbert.tasks.pretraining` numbers the words: jieba's, or
WordPiece's). `pack_sequences` lays the lines end to end as
`[CLS] line [SEP] line [SEP] ...` up to `maxlen` tokens, so that no compute goes
to padding; a line longer than a sequence continues in the next.

`mask_whole_words` then picks the tokens to predict, a whole word at a time,
as Google's whole-word masking does: words in a random order are taken while
their tokens fit within `rate` (15 %) of the sequence's real tokens; of the
picked tokens 80 % become `[MASK]`, 10 % a random token and 10 % stay. It is a
`tf.data` map whose random draws are stateless, keyed on the run's seed, the
epoch and the example (`mask_key`): every epoch draws new masks (dynamic
masking, as RoBERTa), and the same seed draws the same masks, whatever the
order in which parallel map calls run.
The model reads the picked positions (`masked_positions`) and predicts the
original tokens there (`kbert.layers.TakePositions`).
"""

from __future__ import annotations

import math
from typing import Iterable, Tuple

import numpy as np

NOT_A_WORD = -1  # the word number of [CLS], [SEP] and padding: never masked
MASKED_POSITIONS = "Input-Masked-Positions"  # the model's third input


def pack_sequences(lines: Iterable[Tuple[np.ndarray, np.ndarray]], maxlen: int, cls_id: int,
                   sep_id: int) -> Tuple[np.ndarray, np.ndarray]:
    """Packs tokenised lines into `[count, maxlen]` token ids and word numbers.

    Args:
        lines: per line, its token ids and each token's word number (counted
            from 0 within the line; the tokens of one word share it).
        maxlen: tokens per sequence, `[CLS]` and `[SEP]`s included.
        cls_id, sep_id: the ids of `[CLS]` and `[SEP]`.

    Returns:
        `(token_ids, word_ids)`, int32. Word numbers restart in each sequence;
        `[CLS]`, `[SEP]` and the last sequence's padding (id 0) have `NOT_A_WORD`.

    Example:
    >>> lines = [(np.array([7, 8, 9]), np.array([0, 0, 1])), (np.array([5, 6]), np.array([0, 1]))]
    >>> tokens, words = pack_sequences(lines, maxlen=6, cls_id=1, sep_id=2)
    >>> tokens.tolist()
    [[1, 7, 8, 9, 2, 0], [1, 5, 6, 2, 0, 0]]
    >>> words.tolist()
    [[-1, 0, 0, 1, -1, -1], [-1, 0, 1, -1, -1, -1]]
    """
    if maxlen < 3:
        raise ValueError(f"maxlen must leave room for [CLS], a token and [SEP], got {maxlen}")
    sequences, numbers = [], []
    tokens, words, next_word = [cls_id], [NOT_A_WORD], 0

    def close():
        nonlocal tokens, words, next_word
        sequences.append(tokens + [0] * (maxlen - len(tokens)))
        numbers.append(words + [NOT_A_WORD] * (maxlen - len(words)))
        tokens, words, next_word = [cls_id], [NOT_A_WORD], 0

    for line_tokens, line_words in lines:
        start = 0
        while start < len(line_tokens):
            if maxlen - len(tokens) < 2:  # no room for a token and its [SEP]
                close()
            end = start + maxlen - len(tokens) - 1
            piece_words = np.asarray(line_words[start:end])
            tokens += [int(t) for t in line_tokens[start:end]] + [sep_id]
            words += [int(w) for w in piece_words - piece_words[0] + next_word] + [NOT_A_WORD]
            next_word = words[-2] + 1
            start = end
    if len(tokens) > 1:
        close()
    return np.array(sequences, dtype=np.int32).reshape(-1, maxlen), \
        np.array(numbers, dtype=np.int32).reshape(-1, maxlen)


def max_predictions(maxlen: int, rate: float) -> int:
    """The most positions a sequence of `maxlen` tokens has masked (the model's third input's length)."""
    return max(1, math.ceil(maxlen * rate))


def mask_key(seed, epoch, example):
    """The stateless random key of one example's masks in one epoch: `[2]` int64.

    Example:
    >>> a, b = mask_key(0, 1, 5), mask_key(0, 2, 5)
    >>> bool((a.numpy() == mask_key(0, 1, 5).numpy()).all()), bool((a.numpy() == b.numpy()).all())
    (True, False)
    """
    import tensorflow as tf

    key = tf.stack([tf.cast(seed, tf.int64), tf.cast(epoch, tf.int64)])
    return tf.random.experimental.stateless_fold_in(key, tf.cast(example, tf.int64), alg="philox")


def mask_whole_words(token_ids, word_ids, key, *, rate: float, mask_id: int, vocab_size: int):
    """One sequence's masked input, masked positions, their original ids and weights (a `tf.data` map).

    Args:
        token_ids: `[maxlen]` int32 ids (`pack_sequences`).
        word_ids: `[maxlen]` int32 word numbers, `NOT_A_WORD` where nothing may be masked.
        key: the stateless random key of these masks (`mask_key`): the same key, the same masks.
        rate: the share of real tokens to predict (about; whole words only).
        mask_id: `[MASK]`'s id.
        vocab_size: random replacements are drawn from `[0, vocab_size)`.

    Returns:
        `(masked token ids, positions, original ids at the positions, weights)`:
        the last three have `max_predictions(maxlen, rate)` entries, the unused ones 0.
    """
    import tensorflow as tf

    order_key, draw_key, replacement_key = tf.unstack(tf.random.experimental.stateless_split(key, 3))
    length = tf.shape(token_ids)[0]
    budget = max_predictions(int(token_ids.shape[0]), rate)
    real = word_ids >= 0
    word_of_token = tf.maximum(word_ids, 0)
    num_words = tf.reduce_max(word_of_token) + 1
    word_lengths = tf.math.unsorted_segment_sum(tf.cast(real, tf.int32), word_of_token, num_words)
    wanted = tf.round(tf.cast(tf.reduce_sum(tf.cast(real, tf.int32)), tf.float32) * rate)
    wanted = tf.clip_by_value(tf.cast(wanted, tf.int32), 1, budget)
    # Words in a random order, taken while their tokens fit within the wanted count.
    order = tf.argsort(tf.random.stateless_uniform([num_words], seed=order_key))
    taken_in_order = tf.cumsum(tf.gather(word_lengths, order)) <= wanted
    taken = tf.scatter_nd(order[:, None], taken_in_order, [num_words])
    masked = real & tf.gather(taken, word_of_token)

    positions = tf.cast(tf.where(masked)[:, 0], tf.int32)
    count = tf.shape(positions)[0]
    padding = [[0, budget - count]]
    labels = tf.pad(tf.gather(token_ids, positions), padding)
    weights = tf.pad(tf.ones([count], tf.float32), padding)
    positions = tf.pad(positions, padding)

    draw = tf.random.stateless_uniform([length], seed=draw_key)
    random_ids = tf.random.stateless_uniform([length], seed=replacement_key, maxval=vocab_size, dtype=tf.int32)
    replaced = tf.where(draw < 0.8, mask_id, tf.where(draw < 0.9, random_ids, token_ids))
    return tf.where(masked, replaced, token_ids), positions, labels, weights
