"""Masked-language-model inputs: sentences packed into full sequences, and whole words masked afresh.

Pre-training reads lines of text, each already tokenised into ids and a word
number per token (`kbert.tasks.pretraining` numbers the words: jieba's, or
WordPiece's). `pack_sequences` lays the lines end to end as
`[CLS] line [SEP] line [SEP] ...` up to `maxlen` tokens, so that no compute goes
to padding; a line longer than a sequence continues in the next.

`pack_documents` keeps documents (lines) apart instead: each is
`[CLS] line [SEP]` with positions from 0, several to a row (or one, padded),
and the model's attention stays within each (`build_masked_lm(packed=True)`);
`mask_documents` masks each document on its own, keyed on its number, so a
document is masked and predicted alike however the rows are laid out.

`mask_whole_words` then picks the tokens to predict, a whole word at a time,
as Google's whole-word masking does: words in a random order are taken while
their tokens fit within `rate` (15 %) of the sequence's real tokens; of the
picked tokens 80 % become `[MASK]`, 10 % a random token and 10 % stay.
`MaskedBatches` draws them as it makes each batch, in NumPy on every Keras
backend (no TensorFlow needed), from a random generator keyed on the run's
seed, the epoch and the example (`mask_generator`): every epoch draws new
masks (dynamic masking, as RoBERTa), the same seed draws the same masks, and
a resumed run's epochs draw the masks they would have drawn.
The model reads the picked positions (`masked_positions`) and predicts the
original tokens there (`kbert.layers.TakePositions`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterable, List, Tuple

import keras
import numpy as np

from kbert.models import naming

NOT_A_WORD = -1  # the word number of [CLS], [SEP] and padding: never masked


def pack_sequences(lines: Iterable[Tuple[np.ndarray, np.ndarray]], maxlen: int, cls_id: int,
                   sep_id: int, pad_id: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """Packs tokenised lines into `[count, maxlen]` token ids and word numbers.

    Args:
        lines: per line, its token ids and each token's word number (counted
            from 0 within the line; the tokens of one word share it).
        maxlen: tokens per sequence, `[CLS]` and `[SEP]`s included.
        cls_id, sep_id: the ids of `[CLS]` and `[SEP]`.
        pad_id: the padding's id (RoBERTa's `<pad>` is 1).

    Returns:
        `(token_ids, word_ids)`, int32. Word numbers restart in each sequence;
        `[CLS]`, `[SEP]` and the last sequence's padding (`pad_id`) have `NOT_A_WORD`.

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
        sequences.append(tokens + [pad_id] * (maxlen - len(tokens)))
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


@dataclasses.dataclass
class PackedDocuments:
    """Rows of whole documents, from `pack_documents`.

    Attributes:
        token_ids: `[rows, maxlen]` int32, each document `[CLS] tokens [SEP]`, padding after the last.
        word_ids: `[rows, maxlen]` int32 word numbers, from 0 within each document (`NOT_A_WORD` at
            `[CLS]`, `[SEP]` and padding).
        positions: `[rows, maxlen]` int32, each token's position within its document (0 at padding).
        spans: per row, `(start, end, document number)` of each document in it.
    """

    token_ids: np.ndarray
    word_ids: np.ndarray
    positions: np.ndarray
    spans: List[List[Tuple[int, int, int]]]


def pack_documents(lines: Iterable[Tuple[np.ndarray, np.ndarray]], maxlen: int, cls_id: int, sep_id: int,
                   several: bool = True, pad_id: int = 0) -> PackedDocuments:
    """Each tokenised line a document `[CLS] line [SEP]`; with `several`, as many as fit in a row, else one a
    row, padded with `pad_id`.

    Several a row are placed best fit decreasing: the longest documents first, each into the row it
    fills best (the fullest with room for it), a new row when none has room. A line longer than
    `maxlen - 2` tokens is cut into documents of that many (the last shorter).

    Example:
    >>> lines = [(np.array([7, 8, 9]), np.array([0, 0, 1])), (np.array([5, 6]), np.array([0, 1]))]
    >>> packed = pack_documents(lines, maxlen=10, cls_id=1, sep_id=2)
    >>> packed.token_ids.tolist(), packed.positions.tolist(), packed.spans
    ([[1, 7, 8, 9, 2, 1, 5, 6, 2, 0]], [[0, 1, 2, 3, 4, 0, 1, 2, 3, 0]], [[(0, 5, 0), (5, 9, 1)]])
    >>> pack_documents(lines, maxlen=10, cls_id=1, sep_id=2, several=False).spans
    [[(0, 5, 0)], [(0, 4, 1)]]
    """
    if maxlen < 3:
        raise ValueError(f"maxlen must leave room for [CLS], a token and [SEP], got {maxlen}")
    documents = []
    for line_tokens, line_words in lines:
        for start in range(0, len(line_tokens), maxlen - 2):
            words = np.asarray(line_words[start:start + maxlen - 2])
            documents.append(([cls_id, *line_tokens[start:start + maxlen - 2], sep_id],
                              [NOT_A_WORD, *(words - words[0]), NOT_A_WORD]))
    rows = _best_fit_rows([len(tokens) for tokens, _ in documents], maxlen) if several \
        else [[number] for number in range(len(documents))]
    token_ids, word_ids, positions = (np.zeros((len(rows), maxlen), np.int32) for _ in range(3))
    token_ids[:], word_ids[:] = pad_id, NOT_A_WORD
    spans = []
    for row, numbers in enumerate(rows):
        spans.append([])
        start = 0
        for number in numbers:
            tokens, words = documents[number]
            end = start + len(tokens)
            token_ids[row, start:end], word_ids[row, start:end] = tokens, words
            positions[row, start:end] = np.arange(len(tokens))
            spans[-1].append((start, end, number))
            start = end
    return PackedDocuments(token_ids, word_ids, positions, spans)


def _best_fit_rows(lengths: List[int], maxlen: int) -> List[List[int]]:
    """The documents of each row, best fit decreasing: the rows with each room left are kept by that room, so
    finding the fullest row that takes a document looks at no more than `maxlen` rooms."""
    rows: List[List[int]] = []
    by_room: List[List[int]] = [[] for _ in range(maxlen + 1)]  # room left -> the rows with that much
    for number in sorted(range(len(lengths)), key=lambda index: -lengths[index]):
        length = lengths[number]
        room = next((room for room in range(length, maxlen + 1) if by_room[room]), None)
        if room is None:
            rows.append([])
            row, room = len(rows) - 1, maxlen
        else:
            row = by_room[room].pop()
        rows[row].append(number)
        by_room[room - length].append(row)
    return rows


def mask_documents(token_ids: np.ndarray, word_ids: np.ndarray, spans: List[Tuple[int, int, int]], slots: int, *,
                   seed: int, stream: int, epoch: int, **mask_args):
    """`mask_whole_words` for each document of a row (`spans`: `pack_documents`'), each with its own generator
    keyed on the document's number: the same masks whether it shares its row or not. The positions,
    labels and weights of all of them, in `slots` entries (`prediction_slots`).

    Example:
    >>> packed = pack_documents([(np.arange(5, 25), np.arange(20))] * 2, 24, cls_id=1, sep_id=2)
    >>> _, positions, _, weights = mask_documents(packed.token_ids[0], packed.word_ids[0], packed.spans[0], 8,
    ...                                           seed=0, stream=TRAINING, epoch=0, rate=0.15, mask_id=4,
    ...                                           vocab_size=30)
    >>> int(weights.sum()), bool(positions[weights > 0].min() > 0)
    (3, True)
    """
    masked, positions, labels = token_ids.copy(), [], []
    for start, end, number in spans:
        piece, where, original, weights = mask_whole_words(
            token_ids[start:end], word_ids[start:end], mask_generator(seed, stream, epoch, number), **mask_args)
        masked[start:end] = piece
        used = weights > 0
        positions.append(where[used] + start)
        labels.append(original[used])
    positions, labels = np.concatenate(positions), np.concatenate(labels)
    padding = (0, slots - len(positions))
    return (masked, np.pad(positions, padding).astype(np.int32), np.pad(labels, padding).astype(np.int32),
            np.pad(np.ones(len(positions), np.float32), padding))


def prediction_slots(packed: PackedDocuments, rate: float) -> int:
    """The most positions `mask_documents` can pick in a row of `packed`: each document's most, summed.

    A document's most is its `mask_whole_words` count, `round(rate · real tokens)` kept within 1 and its own
    `max_predictions`; a row of many short documents may need more than `max_predictions(maxlen)`.
    """
    most = 1
    for row, spans in enumerate(packed.spans):
        total = 0
        for start, end, _ in spans:
            real = int(np.count_nonzero(packed.word_ids[row, start:end] >= 0))
            total += int(np.clip(round(real * rate), 1, max_predictions(end - start, rate)))
        most = max(most, total)
    return most


def max_predictions(maxlen: int, rate: float) -> int:
    """The most positions a sequence of `maxlen` tokens has masked (the model's third input's length)."""
    return max(1, math.ceil(maxlen * rate))


TRAINING, VALIDATION = 0, 1  # the streams of masks: validation's are drawn once, the same every epoch


def mask_generator(seed: int, stream: int, epoch: int, example: int) -> np.random.Generator:
    """The random generator of one example's masks in one epoch of one stream (`TRAINING`, `VALIDATION`).

    Example:
    >>> draw = lambda epoch: mask_generator(0, TRAINING, epoch, example=5).random()
    >>> draw(1) == draw(1), draw(1) == draw(2)
    (True, False)
    """
    return np.random.default_rng([seed % 2 ** 32, stream, epoch, example])


def mask_whole_words(token_ids: np.ndarray, word_ids: np.ndarray, generator: np.random.Generator, *,
                     rate: float, mask_id: int, vocab_size: int):
    """One sequence's masked input, masked positions, their original ids and weights.

    Args:
        token_ids: `[maxlen]` int32 ids (`pack_sequences`).
        word_ids: `[maxlen]` int32 word numbers, `NOT_A_WORD` where nothing may be masked.
        generator: the random generator of these masks (`mask_generator`).
        rate: the share of real tokens to predict (about; whole words only).
        mask_id: `[MASK]`'s id.
        vocab_size: random replacements are drawn from `[0, vocab_size)`.

    Returns:
        `(masked token ids, positions, original ids at the positions, weights)`:
        the last three have `max_predictions(maxlen, rate)` entries, the unused ones 0.

    Example:
    >>> tokens, words = np.array([1, 7, 8, 9, 2]), np.array([-1, 0, 0, 1, -1])
    >>> masked, positions, labels, weights = mask_whole_words(
    ...     tokens, words, mask_generator(0, TRAINING, 0, 0), rate=0.5, mask_id=4, vocab_size=10)
    >>> positions.tolist(), labels.tolist(), weights.tolist()  # word 0, its two tokens
    ([1, 2, 0], [7, 8, 0], [1.0, 1.0, 0.0])
    """
    budget = max_predictions(len(token_ids), rate)
    real = word_ids >= 0
    word_of_token = np.maximum(word_ids, 0)
    word_lengths = np.bincount(word_of_token[real], minlength=int(word_of_token.max()) + 1)
    wanted = int(np.clip(round(int(real.sum()) * rate), 1, budget))
    # Words in a random order, taken while their tokens fit within the wanted count.
    order = generator.permutation(len(word_lengths))
    taken = np.zeros(len(word_lengths), dtype=bool)
    taken[order] = np.cumsum(word_lengths[order]) <= wanted
    masked = real & taken[word_of_token]

    positions = np.flatnonzero(masked).astype(np.int32)
    padding = (0, budget - len(positions))
    labels = np.pad(token_ids[positions], padding).astype(np.int32)
    weights = np.pad(np.ones(len(positions), np.float32), padding)
    draw = generator.random(len(token_ids))
    random_ids = generator.integers(0, vocab_size, len(token_ids), dtype=np.int32)
    replaced = np.where(draw < 0.8, mask_id, np.where(draw < 0.9, random_ids, token_ids))
    return np.where(masked, replaced, token_ids).astype(np.int32), np.pad(positions, padding), labels, weights


class MaskedBatches(keras.utils.PyDataset):
    """Batches of packed sequences, masked as each batch is made: `(inputs, labels, weights)` for `fit`.

    `inputs` holds the masked token ids, the masked positions and, for a
    family that reads segments, segment ids of 0. Set `epoch` before an
    epoch's batches are drawn (`kbert.tasks.pretraining.MaskEpoch` does):
    it keys the training masks and, with `shuffle`, the order of the
    sequences. Validation batches (`stream=VALIDATION`) are masked the same
    in every epoch, so their scores compare.

    Args:
        rows: the `(token_ids, word_ids)` of `pack_sequences` (`[count, maxlen]` each), masked
            word by word (`mask_whole_words`); or the `PackedDocuments` of `pack_documents`, each
            document masked on its own (`mask_documents`) in `prediction_slots` entries a row.
        batch_size: sequences per batch.
        seed: the run's seed.
        stream: `TRAINING` or `VALIDATION`.
        shuffle: a new order of the sequences each epoch.
        segments: add segment ids (the family takes them).
        positions: with `PackedDocuments`, give each token's position within its
            document too (`Input-Position`, for `build_masked_lm(packed=True)`).
        mask_args: `rate`, `mask_id` and `vocab_size` for `mask_whole_words`.

    Example:
    >>> tokens, words = pack_sequences([(np.arange(5, 25), np.arange(20))], 16, cls_id=1, sep_id=2)
    >>> batches = MaskedBatches((tokens, words), 2, rate=0.15, mask_id=4, vocab_size=30)
    >>> inputs, labels, weights = batches[0]
    >>> len(batches), inputs[naming.INPUT_TOKEN].shape, labels.shape
    (1, (2, 16), (2, 3))
    """

    def __init__(self, rows: "Tuple[np.ndarray, np.ndarray] | PackedDocuments", batch_size: int, *, seed: int = 0,
                 stream: int = TRAINING, shuffle: bool = False, segments: bool = False, positions: bool = False,
                 **mask_args):
        super().__init__()
        documents = rows if isinstance(rows, PackedDocuments) else None
        if positions and documents is None:
            raise ValueError("positions come with PackedDocuments (pack_documents), not with a pack_sequences pair")
        self.token_ids, self.word_ids = (documents.token_ids, documents.word_ids) if documents else rows
        self.batch_size = batch_size
        self.seed, self.stream, self.shuffle, self.segments = seed, stream, shuffle, segments
        self.documents, self.positions = documents, positions
        self.slots = prediction_slots(documents, mask_args["rate"]) if documents else None
        self.mask_args = mask_args
        self.epoch = 0

    def __len__(self) -> int:
        return -(-len(self.token_ids) // self.batch_size)

    def __getitem__(self, index: int):
        if not 0 <= index < len(self):
            raise IndexError(index)  # ends plain iteration
        epoch = self.epoch if self.stream == TRAINING else 0
        order = np.random.default_rng([self.seed % 2 ** 32, epoch]).permutation(len(self.token_ids)) \
            if self.shuffle else np.arange(len(self.token_ids))
        examples = order[index * self.batch_size:(index + 1) * self.batch_size]
        masked = [self._masked(int(example), epoch) for example in examples]
        masked_ids, positions, labels, weights = (np.stack(column) for column in zip(*masked))
        inputs = {naming.INPUT_TOKEN: masked_ids, naming.INPUT_MASKED_POSITIONS: positions}
        if self.segments:
            inputs[naming.INPUT_SEGMENT] = np.zeros_like(masked_ids)
        if self.positions:
            inputs[naming.INPUT_POSITION] = self.documents.positions[examples]
        return inputs, labels, weights

    def _masked(self, example: int, epoch: int):
        if self.documents is None:
            return mask_whole_words(self.token_ids[example], self.word_ids[example],
                                    mask_generator(self.seed, self.stream, epoch, example), **self.mask_args)
        return mask_documents(self.token_ids[example], self.word_ids[example], self.documents.spans[example],
                              self.slots, seed=self.seed, stream=self.stream, epoch=epoch, **self.mask_args)
