"""`make_dataset`'s batches: padding, bucketing and labels, from both pipelines (tf.data and PyDataset)."""

import itertools

import keras
import numpy as np
import pytest

from conftest import shared_path
from kbert.tokenizers.wordpiece import Tokenizer
from kbert.training.data import encode_examples, read_examples
from kbert.training.pipeline import (CALL_COST_TOKENS, PaddedBatches, _tf_dataset, batches_by_length, cheapest_batches,
                                     make_dataset, padded_lengths)


def tf_dataset(*args, **kwargs):
    pytest.importorskip("tensorflow", reason="the tf.data pipeline needs TensorFlow")
    defaults = {"shuffle": False, "seed": 0, "bucketing": False, "labels_follow": 0, "pad_ids": ()}
    return _tf_dataset(*args, **{**defaults, **kwargs})


PIPELINES = pytest.mark.parametrize("pipeline", [tf_dataset, PaddedBatches], ids=["tf.data", "PyDataset"])


def numpy_batches(batches) -> list:
    return [keras.tree.map_structure(keras.ops.convert_to_numpy, batch) for batch in batches]


def test_the_backend_picks_the_pipeline():
    batches = make_dataset([([2, 3], [0, 0])], None, 1)
    assert isinstance(batches, PaddedBatches) == (keras.backend.backend() != "tensorflow")


@PIPELINES
def test_batches_are_padded_to_their_own_longest_row(pipeline):
    tokenizer = Tokenizer(shared_path("vocab", "chinese_vocab.txt"))
    examples, _ = read_examples(shared_path("data", "sentiment", "sentiment.valid.data"))
    encoded = encode_examples(tokenizer, examples[:6], maxlen=64)
    batches = numpy_batches(pipeline(encoded, np.arange(6, dtype=np.int32), 3))
    longest = max(len(ids) for ids, _ in encoded)
    assert len(batches) == 2
    for start, ((tokens, segments), labels) in zip((0, 3), batches):
        lengths = [len(ids) for ids, _ in encoded[start:start + 3]]
        # Rounded up to a multiple of 16, never past the longest sequence of the data.
        assert tokens.shape == (3, min(-(-max(lengths) // 16) * 16, longest))
        assert segments.shape == tokens.shape
        assert labels.tolist() == [start, start + 1, start + 2]
        for row, length in enumerate(lengths):
            assert tokens[row, :length].tolist() == encoded[start + row][0]
            assert not tokens[row, length:].any()


@PIPELINES
def test_bucketed_batches_hold_one_length_band_and_every_example(pipeline):
    lengths = np.random.default_rng(0).integers(3, 90, size=300)
    encoded = [([7] * n, [0] * n) for n in lengths]
    dataset = pipeline(encoded, np.arange(300), 16, shuffle=True, seed=1, bucketing=True)
    seen = []
    for (tokens, _), labels in numpy_batches(dataset):
        real = (tokens != 0).sum(1)
        assert len(set((real - 1) // 16)) == 1  # one band per batch
        assert tokens.shape[1] - real.max() < 16
        seen += labels.tolist()
    assert sorted(seen) == list(range(300))
    assert len(dataset) == len(numpy_batches(dataset))


@PIPELINES
def test_each_feature_is_padded_with_its_own_value(pipeline):
    """RoBERTa's token ids pad with <pad> (1), since its 0 is <s>; segment ids and per-token labels with 0."""
    encoded = [([0, 7, 8, 9, 2], [0] * 5, [0, 5, 2]), ([0, 7, 2], [0] * 3, [0, 2])]
    (features, labels), = numpy_batches(pipeline(encoded, [[3, 4, 5, 6, 7], [3, 4, 5]], 2, pad_ids=(1, 0, 1)))
    tokens, segments, views = features
    assert tokens[1].tolist() == [0, 7, 2, 1, 1] and views[1].tolist() == [0, 2, 1]
    assert not segments.any() and labels[1].tolist() == [3, 4, 5, 0, 0]


def test_pydataset_reshuffles_each_epoch_from_its_seed():
    encoded = [([n + 1], [0]) for n in range(64)]

    def epochs(seed):
        batches = PaddedBatches(encoded, None, 8, shuffle=True, seed=seed)
        orders = []
        for _ in range(2):
            orders.append([int(row[0]) for (tokens, _), in batches for row in tokens])
            batches.on_epoch_end()
        return orders

    first, second = epochs(3)
    assert sorted(first) == sorted(second) == list(range(1, 65)) and first != second
    assert epochs(3) == [first, second] and epochs(4)[0] != first


def test_padded_lengths_pad_least_of_every_choice():
    """The dynamic programme against every choice of at most 3 multiples of 16 (the longest length last)."""
    lengths = np.random.default_rng(5).integers(1, 120, 200)
    chosen = padded_lengths(lengths, most=3)

    def padded(choice):
        return sum(choice[np.searchsorted(choice, length)] for length in lengths)

    grid = list(range(16, 119, 16))
    best = min(padded(np.array([*extra, lengths.max()])) for count in range(3)
               for extra in itertools.combinations(grid, count))
    assert len(chosen) <= 3 and chosen[-1] == lengths.max() and padded(chosen) == best
    assert padded_lengths([7, 7], most=4).tolist() == [7]  # no length that pads nothing more


def test_jax_batches_take_few_shapes_and_one_partial_batch():
    """With `lengths` (JAX's pipeline): each feature padded to one of its few lengths, the bands' leftovers
    pooled, so the shapes of an epoch are few; every example once."""
    rng = np.random.default_rng(1)
    encoded = [([7] * n, [9] * m) for n, m in zip(rng.integers(3, 200, 500), rng.integers(1, 60, 500))]
    batches = PaddedBatches(encoded, np.arange(500), 16, shuffle=True, seed=2, bucketing=True, lengths=4)
    shapes, seen = set(), []
    for (source, target), labels in batches:
        assert source.shape[1] in batches.lengths[0] and target.shape[1] in batches.lengths[1]
        shapes.add((source.shape, target.shape))
        seen += labels.tolist()
    assert sorted(seen) == list(range(500))
    assert sum(len(rows) < 16 for rows in batches._batches) <= 1
    assert len({shape[0][0] for shape in shapes}) <= 2 and len(shapes) <= 4 * 4 + 1
    if keras.backend.backend() != "tensorflow":  # JAX's pipeline takes the few lengths, PyTorch's every 16
        sources = [len(ids) for ids, _ in encoded]
        expected = padded_lengths(sources, 6).tolist() if keras.backend.backend() == "jax" \
            else [*range(16, max(sources), 16), max(sources)]
        assert make_dataset(encoded, None, 16).lengths[0].tolist() == expected


@PIPELINES
@pytest.mark.parametrize("labels, expected", [
    # A label per token follows the padding of the feature it belongs to (here the second).
    ([[5, 6], [7]], [[5, 6, 0], [7, 0, 0]]),
    # Rows of entity spans are padded with -1 rows to the most rows in the batch.
    ([[[1, 0, 2], [2, 1, 1]], np.zeros((0, 3))], [[[1, 0, 2], [2, 1, 1]], [[-1, -1, -1], [-1, -1, -1]]]),
])
def test_label_rows_are_padded_as_tf_data_pads_them(pipeline, labels, expected):
    encoded = [([2, 5, 3], [1, 1, 1]), ([2, 3], [1])]
    (_, second), padded = numpy_batches(pipeline(encoded, labels, 2, labels_follow=1))[0]
    assert second.shape == (2, 3)
    assert padded.tolist() == expected


@pytest.mark.parametrize("bucketing", [True, False])
def test_prediction_batches_cover_every_example_once_in_order_of_length(bucketing):
    """`batches_by_length`: every example once; with bucketing, in order of length, each batch padded to its
    longest example (not to a 16-token band's end: TensorFlow's graph takes any length) and cut where the
    model's calls cost least (`cheapest_batches`); without, in input order, batch_size a batch."""
    lengths = np.random.default_rng(3).integers(1, 100, 57)
    encoded = [(list(range(1, n + 1)), [0] * n) for n in lengths]
    batches = list(batches_by_length(encoded, batch_size=8, bucketing=bucketing, few_shapes=False))
    order = np.concatenate([rows for rows, _ in batches])
    assert sorted(order.tolist()) == list(range(57))
    for rows, (tokens, segments) in batches:
        assert len(rows) <= 8 and tokens.shape == segments.shape
        for row, ids in zip(rows, tokens):
            assert ids[:lengths[row]].tolist() == encoded[row][0] and not ids[lengths[row]:].any()
    if bucketing:
        assert np.all(np.diff(lengths[order]) >= 0)
        padded = [tokens.shape[1] for _, (tokens, _) in batches]
        assert all(width == lengths[rows].max() for (rows, _), width in zip(batches, padded))
        cost = sum(CALL_COST_TOKENS + len(rows) * width for (rows, _), width in zip(batches, padded))
        by_band = sum(CALL_COST_TOKENS + count * (band + 1) * 16  # a batch per 16-token band, as before
                      for band, band_count in enumerate(np.bincount((lengths - 1) // 16)) if band_count
                      for count in [8] * (band_count // 8) + [band_count % 8] if count)
        assert cost < by_band
    else:
        assert order.tolist() == list(range(57)) and [len(rows) for rows, _ in batches] == [8] * 7 + [1]


@pytest.mark.parametrize("few_shapes", [False, True])
def test_cheapest_batches_is_the_least_cost_of_every_cut(few_shapes):
    """The dynamic programme's cut against every cut of 9 sorted lengths into batches of at most 4."""
    rng = np.random.default_rng(11)

    def cost(padded, cut):
        rows = [end - start for start, end in cut]
        if few_shapes:
            rows = [min(1 << (count - 1).bit_length(), 4) for count in rows]
        return sum(CALL_COST_TOKENS + count * padded[end - 1] for count, (_, end) in zip(rows, cut))

    for _ in range(20):
        padded = np.sort(rng.choice([16, 32, 48, 64, 128], 9))
        cuts = []
        for inner in itertools.product([False, True], repeat=8):  # a cut after example i or not
            ends = [i + 1 for i, cut in enumerate(inner) if cut] + [9]
            cut = list(zip([0] + ends[:-1], ends))
            if all(end - start <= 4 for start, end in cut):
                cuts.append(cut)
        chosen = cheapest_batches(padded, 4, few_shapes)
        assert chosen in cuts and cost(padded, chosen) == min(cost(padded, cut) for cut in cuts)
    # without a call's cost, a batch per padded length, as bands were; with it, two short texts join the rest
    assert cheapest_batches([16, 16, 48, 48, 48], 8, call_cost=0) == [(0, 2), (2, 5)]
    assert cheapest_batches([16, 16, 48, 48, 48], 8) == [(0, 5)]


def test_prediction_batches_on_jax_meet_few_shapes():
    """`few_shapes` (JAX's default): each batch's rows made up to a power of two by repeating its last row, the
    examples' own rows first, and its length a multiple of 16 whatever the call's longest text, so 200 calls of
    1 to 16 texts meet at most 5 row counts in each of the 4 bands."""
    rng = np.random.default_rng(5)
    shapes, plain = set(), set()
    for _ in range(200):
        lengths = rng.integers(1, 60, rng.integers(1, 17))
        encoded = [(list(range(1, n + 1)), [0] * n) for n in lengths]
        for rows, (tokens, segments) in batches_by_length(encoded, 16, few_shapes=True):
            assert len(tokens) in (1, 2, 4, 8, 16) and len(tokens) >= len(rows)
            assert tokens.shape[1] % 16 == 0 and segments.shape == tokens.shape
            for row, ids in zip(rows, tokens):
                assert ids[:lengths[row]].tolist() == encoded[row][0] and not ids[lengths[row]:].any()
            assert (tokens[len(rows):] == tokens[len(rows) - 1]).all()
            shapes.add(tokens.shape)
        plain.update(tokens.shape for _, (tokens, _) in batches_by_length(encoded, 16, few_shapes=False))
    assert len(shapes) <= 5 * 4 < len(plain)
    # `maxlen`, the longest an example may be, is the last band's length: never past a model's positions
    [(_, (capped, _))] = batches_by_length([(list(range(1, 38)), [0] * 37)], 16, few_shapes=True, maxlen=40)
    assert capped.shape == (1, 40)
