"""Batches for `fit`, `evaluate` and `predict`: padded per batch, optionally bucketed by length.

`make_dataset` gives the same batches on every Keras backend from one of two
pipelines: on TensorFlow a `tf.data.Dataset` (it runs in TensorFlow's threads,
with no Python per batch, and `tf.distribute` splits it across devices); on
JAX and PyTorch `PaddedBatches`, a `keras.utils.PyDataset` of NumPy arrays,
so training needs no TensorFlow there. Both pad each feature to the batch's
longest row rounded up to a multiple of `PAD_MULTIPLE` (few distinct shapes,
so few compilations), never past the longest row of the data, and both
bucket the same way; only the shuffled order differs.

On JAX, which compiles a training step for every shape it meets (4-7 s
for a small T5's on a 2-core CPU), `PaddedBatches` pads each feature to one
of at most `JAX_LENGTHS` lengths instead, chosen from the data to pad least
(`padded_lengths`), and pools the bands' last, partial batches: T5 on MSRA
extraction, whose source and target each have their own length, meets 22
shapes an epoch instead of 42.
"""

from __future__ import annotations

from typing import Iterator, List, Optional, Sequence, Tuple

import keras
import numpy as np

PAD_MULTIPLE = 16
JAX_LENGTHS = 6  # padded lengths per feature on JAX: few compilations, little padding
SPAN_PADDING = -1  # a padding row of entity spans: no entity type is -1
# A model call's own cost, counted in padded tokens: what a call costs beyond its tokens (every weight is read
# once a call). On a 2-core CPU, about 56 tokens' worth for BERT-base and 150 for BERT-small (docs/performance.md);
# 64 errs towards the larger model, whose calls are the slow ones.
CALL_COST_TOKENS = 64


def make_dataset(encoded: Sequence[Tuple[List[int], ...]], labels, batch_size: int, *,
                 shuffle: bool = False, seed: int = 0, bucketing: bool = False, labels_follow: int = 0,
                 pad_ids: Sequence[int] = ()):
    """Batches of `(features, labels)`, or of `(features,)` without labels, for Keras's `fit`/`predict`.

    Each example of `encoded` is a tuple of id sequences: usually token and
    segment ids, of one length; for an encoder-decoder, source and decoder
    ids, each of its own length. `labels` is None (features only), an array
    with one label per example, or a list with a sequence per example: a
    label per token of feature `labels_follow` (padded with 0 like it) or
    rows of numbers such as entity spans (padded with -1 to the most rows in
    the batch).

    With `bucketing`, a batch holds examples whose first feature is in one
    16-token band only (drawn in shuffled order, so batches still mix the
    data), which pads far less when lengths vary. `len()` of the result is
    the number of batches in one pass.

    `pad_ids` is each feature's padding value, in order (features past its
    end, and every feature by default, are padded with 0): token ids take
    the tokenizer's `pad_id`, which is 1 for RoBERTa's `<pad>` (its id 0,
    `<s>`, is a token the model reads).

    Returns:
        a `tf.data.Dataset` on the TensorFlow backend, else `PaddedBatches`.

    Example:
    >>> batches = make_dataset([([2, 5, 3], [0, 0, 0]), ([2, 3], [0, 0])], np.array([1, 0]), batch_size=2)
    >>> (tokens, segments), labels = next(iter(batches))
    >>> keras.ops.convert_to_numpy(tokens).tolist(), len(batches)
    ([[2, 5, 3], [2, 3, 0]], 1)
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return _tf_dataset(encoded, labels, batch_size, shuffle=shuffle, seed=seed, bucketing=bucketing,
                           labels_follow=labels_follow, pad_ids=pad_ids)
    return PaddedBatches(encoded, labels, batch_size, shuffle=shuffle, seed=seed, bucketing=bucketing,
                         labels_follow=labels_follow, lengths=JAX_LENGTHS if backend == "jax" else None,
                         pad_ids=pad_ids)


class PaddedBatches(keras.utils.PyDataset):
    """`make_dataset`'s batches as NumPy arrays, a `keras.utils.PyDataset` (no TensorFlow needed).

    Shuffled again at the end of every epoch, from `seed` and the epoch's
    number, so a run is reproducible from its seed.

    Args:
        encoded: the examples, each a tuple of id sequences.
        labels: None, an array of labels, or a sequence of label rows per
            example (see `make_dataset`).
        batch_size: examples per batch.
        shuffle: draw the order of the examples anew each epoch.
        seed: the seed of that order.
        bucketing: one 16-token length band of the first feature per batch.
        labels_follow: the feature whose padding per-token labels follow.
        lengths: pad each feature to one of at most this many lengths, chosen
            from the data (`padded_lengths`); bucketing then takes those as
            its bands, and the bands' last, partial batches are pooled into
            full ones. None: every multiple of 16.
        pad_ids: each feature's padding value (see `make_dataset`).

    Example:
    >>> batches = PaddedBatches([([2, 5, 3], [0, 0, 0])] * 3 + [([2, 3], [0, 0])], None, batch_size=2)
    >>> [features[0].shape for (features,) in batches]
    [(2, 3), (2, 3)]
    """

    def __init__(self, encoded: Sequence[Tuple[List[int], ...]], labels, batch_size: int, *,
                 shuffle: bool = False, seed: int = 0, bucketing: bool = False, labels_follow: int = 0,
                 lengths: Optional[int] = None, pad_ids: Sequence[int] = ()):
        super().__init__()
        self.pad_ids = tuple(pad_ids)
        self.columns, longest = _columns(encoded)
        self.pools_leftovers = lengths is not None
        self.lengths = [padded_lengths([len(row) for row in column], lengths) for column in self.columns] \
            if lengths else [_multiples(most) for most in longest]  # each feature's padded lengths
        self.labels, self.labels_follow = _label_rows(labels), labels_follow
        self.batch_size, self.shuffle, self.seed, self.bucketing = batch_size, shuffle, seed, bucketing
        self.epoch = 0
        self._batches = self._plan()

    def __len__(self) -> int:
        return len(self._batches)

    def __getitem__(self, index: int):
        rows = self._batches[index]  # an IndexError past the end also ends plain iteration
        features = _features(self.columns, self.lengths, rows, self.pad_ids)
        if self.labels is None:
            return (features,)  # a 1-tuple: Keras reads a pair as (inputs, labels)
        if isinstance(self.labels, np.ndarray):
            return features, self.labels[rows]
        rows_of_labels = [self.labels[row] for row in rows]
        if rows_of_labels[0].ndim == 1:  # a label per token, padded as its feature is
            return features, _pad(rows_of_labels, features[self.labels_follow].shape[1])
        return features, _pad(rows_of_labels, max(len(row) for row in rows_of_labels), SPAN_PADDING)

    def on_epoch_end(self) -> None:
        self.epoch += 1
        self._batches = self._plan()

    def _plan(self) -> List[np.ndarray]:
        """The example numbers of each batch of the coming epoch."""
        count = len(self.columns[0])
        order = np.random.default_rng([self.seed, self.epoch]).permutation(count) if self.shuffle \
            else np.arange(count)
        if not self.bucketing:
            return [order[start:start + self.batch_size] for start in range(0, count, self.batch_size)]
        # As tf.data's group_by_window: each band fills its own batch, which leaves when full.
        bands = np.searchsorted(self.lengths[0], [len(self.columns[0][example]) for example in order])
        batches, windows = [], {}
        for example, band in zip(order, bands):
            window = windows.setdefault(band, [])
            window.append(example)
            if len(window) == self.batch_size:
                batches.append(np.array(window))
                window.clear()
        leftovers = [np.array(window) for _, window in sorted(windows.items()) if window]
        if self.pools_leftovers and leftovers:  # one partial batch in all, not one per band
            pooled = np.concatenate(leftovers)
            leftovers = [pooled[start:start + self.batch_size] for start in range(0, len(pooled), self.batch_size)]
        return batches + leftovers


def batches_by_length(encoded: Sequence[Tuple[List[int], ...]], batch_size: int, bucketing: bool = True,
                      few_shapes: Optional[bool] = None,
                      maxlen: Optional[int] = None,
                      call_cost: int = CALL_COST_TOKENS,
                      pad_id: int = 0) -> Iterator[Tuple[np.ndarray, Tuple[np.ndarray, ...]]]:
    """Prediction's batches: each batch's example numbers and its padded features, in order of length.

    With `bucketing`, the examples go in order of length and are cut into
    batches of at most `batch_size` that cost least in all
    (`cheapest_batches`): a batch costs its padded tokens plus `call_cost`
    for the call itself (0: a batch per 16-token band). A server's batch of 16 texts of
    every length then runs as a few batches of like lengths rather than one
    padded to its longest text, and a band of one or two short texts joins
    its neighbour rather than paying for a call of its own. Without
    `bucketing`, the examples go in their own order, `batch_size` a batch.

    With `few_shapes` (by default on JAX, which compiles a program for each
    shape it meets), a batch's rows are made up to a power of two (at most
    `batch_size`) by repeating its last row, and its length is a multiple of
    16 (or `maxlen`, the longest an example may be), whatever the longest
    text of the call: a server's batches of 1 to `batch_size` texts then
    meet a handful of shapes in each band. The outputs of the first
    `len(rows)` rows are the examples'. Without it (TensorFlow's graph and
    PyTorch take any shape), a batch is padded to its own longest example
    only: the cuts are chosen by 16-token bands, the padding is exact. Token ids (the first feature) are
    padded with `pad_id` (the tokenizer's: 1 for RoBERTa's `<pad>`), the
    other features with 0.

    Example:
    >>> encoded = [([2, 5, 3] * 30, [0] * 90), ([2, 3], [0, 0]), ([2, 4, 3], [0, 0, 0])]
    >>> [(rows.tolist(), features[0].shape) for rows, features in batches_by_length(encoded, 8, few_shapes=False)]
    [([1, 2], (2, 3)), ([0], (1, 90))]
    >>> [(rows.tolist(), features[0].shape) for rows, features in batches_by_length(encoded * 4, 8, few_shapes=True)]
    [([1, 4, 7, 10, 2, 5, 8, 11], (8, 16)), ([0, 3, 6, 9], (4, 96))]
    """
    if few_shapes is None:
        few_shapes = keras.backend.backend() == "jax"
    columns, longest = _columns(encoded)
    if few_shapes:
        longest = [max(maxlen, most) if maxlen else (_band(most) + 1) * PAD_MULTIPLE for most in longest]  # band's end
    grids = [_multiples(most) for most in longest]
    lengths = np.array([len(ids) for ids in columns[0]])
    if bucketing:
        order = np.argsort(lengths, kind="stable")
        padded = grids[0][np.searchsorted(grids[0], lengths[order])]
        bounds = cheapest_batches(padded, batch_size, few_shapes, call_cost)
    else:
        order = np.arange(len(lengths))
        bounds = [(start, min(start + batch_size, len(order))) for start in range(0, len(order), batch_size)]
    for start, end in bounds:
        rows = order[start:end]
        if few_shapes:
            yield rows, _features(columns, grids, _rows_to_power_of_two(rows, batch_size), (pad_id,))
        else:  # each feature to its batch's own longest row: a graph that takes any shape pads no more
            yield rows, _features(columns, [None] * len(columns), rows, (pad_id,))


def cheapest_batches(padded: Sequence[int], batch_size: int, few_shapes: bool = False,
                     call_cost: int = CALL_COST_TOKENS) -> List[Tuple[int, int]]:
    """The `(start, end)` cuts of examples in order of length into batches that cost least in all.

    `padded` is each example's padded length, in order. A batch of at most
    `batch_size` examples costs `call_cost` plus its rows times the padded
    length of its last (longest) example; with `few_shapes`, its rows made up
    to a power of two. Dynamic programming over where the last batch starts.
    With `call_cost` 0, a batch is one padded length (a 16-token band);
    with a call's cost, a short band of few texts joins its neighbour.

    Example:
    >>> cheapest_batches([16, 16, 32, 32, 32, 32, 48], 8, call_cost=0)
    [(0, 2), (2, 6), (6, 7)]
    >>> cheapest_batches([16, 16, 32, 32, 32, 32, 48], 8)
    [(0, 6), (6, 7)]
    >>> cheapest_batches([16] * 5 + [128] * 5, 8)
    [(0, 5), (5, 10)]
    """
    padded = np.asarray(padded)
    best = np.zeros(len(padded) + 1)  # best[end]: the least cost of the first `end` examples
    start_of_last = np.zeros(len(padded) + 1, dtype=int)
    rows_run = np.arange(batch_size + 1)  # rows_run[n]: the rows a batch of n examples runs as
    if few_shapes:
        rows_run[1:] = [_power_of_two_rows(count, batch_size) for count in rows_run[1:]]
    for end in range(1, len(padded) + 1):
        starts = np.arange(max(0, end - batch_size), end)
        options = best[starts] + call_cost + rows_run[end - starts] * padded[end - 1]
        pick = int(np.argmin(options))  # the first of equals: the longest batch
        best[end], start_of_last[end] = options[pick], starts[pick]
    bounds, end = [], len(padded)
    while end:
        bounds.append((int(start_of_last[end]), end))
        end = bounds[-1][0]
    return bounds[::-1]


def _rows_to_power_of_two(rows: np.ndarray, most: int) -> np.ndarray:
    """`rows` (at most `most`), its last one repeated up to the next power of two (at most `most`)."""
    return np.concatenate([rows, np.repeat(rows[-1:], _power_of_two_rows(len(rows), most) - len(rows))])


def _power_of_two_rows(count: int, most: int) -> int:
    """The rows a batch of `count` examples is made up to with `few_shapes`: the next power of two, at most `most`."""
    return min(1 << (int(count) - 1).bit_length(), most)


def padded_lengths(lengths: Sequence[int], most: int) -> np.ndarray:
    """At most `most` multiples of 16 (the last: the longest length) that pad `lengths` least.

    Each length is padded to the first of them that holds it; they are chosen
    by dynamic programming over the multiples of 16, counting the padded
    tokens of every example.

    Example:
    >>> padded_lengths([3, 20, 20, 33, 100, 120], most=3).tolist()
    [32, 48, 120]
    """
    grid = _multiples(max(lengths))
    counts = np.bincount(np.searchsorted(grid, lengths), minlength=len(grid))
    upto = np.cumsum(counts)  # examples that fit in grid[i]
    # cost[k, i]: the least padded tokens of the examples that fit in grid[i], with k + 1 lengths, the last
    # grid[i]; parent[k, i]: the length before it.
    cost, parent = np.full((most, len(grid)), np.inf), np.zeros((most, len(grid)), dtype=int)
    cost[0] = upto * grid
    for k in range(1, most):
        for i in range(k, len(grid)):
            options = cost[k - 1, :i] + (upto[i] - upto[:i]) * grid[i]
            parent[k, i] = int(np.argmin(options))
            cost[k, i] = options[parent[k, i]]
    k, i = int(np.argmin(cost[:, -1])), len(grid) - 1  # the fewest lengths that pad least
    chosen = [int(grid[i])]
    for level in range(k, 0, -1):
        i = parent[level, i]
        chosen.append(int(grid[i]))
    return np.array(chosen[::-1])


def _multiples(longest: int) -> np.ndarray:
    """The multiples of 16 below `longest`, then `longest`: the lengths a feature is padded to."""
    return np.array(sorted({*range(PAD_MULTIPLE, longest, PAD_MULTIPLE), longest}))


def _band(length):
    """The 16-token band of a length: the key of the buckets."""
    return (length - 1) // PAD_MULTIPLE


def _columns(encoded: Sequence[Tuple[List[int], ...]]) -> Tuple[list, List[int]]:
    """The examples' features as int32 columns (one list of rows a feature), and each column's longest row."""
    columns = [[np.asarray(ids, dtype=np.int32) for ids in column] for column in zip(*encoded)]
    return columns, [max(len(ids) for ids in column) for column in columns]


def _features(columns: Sequence[Sequence[np.ndarray]], lengths: Sequence[np.ndarray], rows: np.ndarray,
              pad_ids: Sequence[int] = ()) -> tuple:
    """The examples `rows` of each feature column, padded as one batch to the first of the column's padded
    `lengths` that holds them all (None: to the longest of them); with the feature's value of `pad_ids`
    (`_padding_values`)."""
    batch = []
    for column, padded, value in zip(columns, lengths, _padding_values(pad_ids, len(columns))):
        picked = [column[row] for row in rows]
        longest = max(len(ids) for ids in picked)
        width = longest if padded is None else int(padded[np.searchsorted(padded, longest)])
        batch.append(_pad(picked, width, value))
    return tuple(batch)


def _padding_values(pad_ids: Sequence[int], features: int) -> Tuple[int, ...]:
    """Each of `features` features' padding value: its own in `pad_ids`, else 0."""
    return tuple(pad_ids[:features]) + (0,) * max(features - len(pad_ids), 0)


def _pad(rows: Sequence[np.ndarray], length: int, value: int = 0) -> np.ndarray:
    out = np.full((len(rows), length, *rows[0].shape[1:]), value, dtype=rows[0].dtype)
    for index, row in enumerate(rows):
        out[index, :len(row)] = row
    return out


def _label_rows(labels) -> "Optional[np.ndarray | List[np.ndarray]]":
    """An array of labels as it is; a list of sequences as arrays, empty span rows shaped like the others."""
    if labels is None or isinstance(labels, np.ndarray):
        return labels
    rows = [np.asarray(row, dtype=np.int32) for row in labels]
    width = next((row.shape[1:] for row in rows if row.ndim > 1), ())  # rows of (0, 3) say it too
    return [row.reshape(-1, *width) for row in rows]


def _tf_dataset(encoded, labels, batch_size: int, *, shuffle: bool, seed: int, bucketing: bool,
                labels_follow: int, pad_ids: Sequence[int]):
    """`make_dataset` in `tf.data`: ragged batches made dense in the graph."""
    import tensorflow as tf

    columns = list(zip(*encoded))
    lengths = [np.array([len(ids) for ids in column], dtype=np.int64) for column in columns]
    features = tf.data.Dataset.from_tensor_slices(tuple(
        tf.RaggedTensor.from_row_lengths(np.concatenate(column).astype(np.int32), column_lengths)
        for column, column_lengths in zip(columns, lengths)))
    rows = _label_rows(labels)
    if rows is not None and not isinstance(rows, np.ndarray):
        rows = tf.RaggedTensor.from_row_lengths(np.concatenate(rows), [len(row) for row in rows])
    dataset = features if rows is None else tf.data.Dataset.zip(features, tf.data.Dataset.from_tensor_slices(rows))
    if shuffle:
        dataset = dataset.shuffle(len(encoded), seed=seed, reshuffle_each_iteration=True)
    pad = _TfPadder([int(column_lengths.max()) for column_lengths in lengths], labels_follow,
                    _padding_values(pad_ids, len(columns)))
    if bucketing:
        def band(features, labels=None):
            tokens = features[0] if isinstance(features, tuple) else features
            return tf.cast(_band(tf.shape(tokens)[0]), tf.int64)

        dataset = dataset.group_by_window(band, lambda _, window: window.ragged_batch(batch_size),
                                          window_size=batch_size)
        # Known size: Keras's progress bar and the schedule's step count stay exact.
        batches = int(sum(-(-count // batch_size) for count in np.bincount(_band(lengths[0]))))
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))
    else:
        dataset = dataset.ragged_batch(batch_size)
    return dataset.map(pad.unlabelled if labels is None else pad.labelled,
                       num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


class _TfPadder:
    """Makes ragged batches dense in `tf.data`, as `_multiples` pads them."""

    def __init__(self, longest: List[int], labels_follow: int, values: Sequence[int]):
        self.longest, self.labels_follow, self.values = longest, labels_follow, values

    def features(self, *ragged):
        import tensorflow as tf

        dense = []
        for ids, longest, value in zip(ragged, self.longest, self.values):
            length = tf.cast(tf.reduce_max(ids.row_lengths()), tf.int32)
            rounded = tf.minimum((length + PAD_MULTIPLE - 1) // PAD_MULTIPLE * PAD_MULTIPLE, longest)
            shape = tf.stack([tf.cast(ids.nrows(), tf.int32), tf.maximum(rounded, length)])
            dense.append(ids.to_tensor(default_value=value, shape=shape))
        return tuple(dense)

    def unlabelled(self, *ragged):
        return (self.features(*ragged),)

    def labelled(self, features, labels):
        import tensorflow as tf

        dense = self.features(*features)
        if isinstance(labels, tf.RaggedTensor):
            labels = labels.to_tensor(shape=tf.shape(dense[self.labels_follow])) if labels.shape.rank == 2 \
                else labels.to_tensor(default_value=SPAN_PADDING)
        return dense, labels
