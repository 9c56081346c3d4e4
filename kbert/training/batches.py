"""Batching helpers with bert4keras's contracts: `sequence_padding` and `DataGenerator`.

Scripts written for bert4keras build their batches with these two names; they
work unchanged with kbert. `DataGenerator.forfit` hands the batches to
`tf.data`, which prefetches them while the model trains (to an endless
`keras.utils.PyDataset` where TensorFlow is not installed).
"""

from __future__ import annotations

import functools
from typing import Iterator, Optional, Sequence, Tuple, Union

import keras
import numpy as np

from kbert.errors import tensorflow_installed


def sequence_padding(inputs: Sequence, length: Union[int, Sequence[int], None] = None, value=0,
                     seq_dims: int = 1, mode: str = "post") -> np.ndarray:
    """Pads (or cuts) sequences to one length and stacks them into an array.

    Args:
        inputs: sequences (lists or arrays) of the same rank.
        length: the length of each of the first `seq_dims` axes; by default
            the longest. Longer sequences are cut to it (their first items).
        value: the padding value.
        seq_dims: how many leading axes are sequence axes (2 for a matrix per
            example, e.g. GlobalPointer labels).
        mode: `"post"` pads at the end, `"pre"` at the start.

    Example:
    >>> sequence_padding([[1, 2, 3], [4]])
    array([[1, 2, 3],
           [4, 0, 0]])
    >>> sequence_padding([[1, 2, 3], [4]], length=2, value=-1, mode="pre")
    array([[ 1,  2],
           [-1,  4]])
    """
    if mode not in ("post", "pre"):
        raise ValueError(f"mode: expected 'post' or 'pre', got {mode!r}")
    if not len(inputs) or not isinstance(inputs[0], (list, tuple, np.ndarray)):
        raise ValueError("inputs: expected a non-empty list of sequences (lists or arrays)")
    arrays = [np.asarray(x) for x in inputs]
    if length is None:
        lengths = np.max([x.shape[:seq_dims] for x in arrays], axis=0)
    else:
        lengths = np.broadcast_to(np.asarray(length), (seq_dims,))
    cut = tuple(slice(0, int(n)) for n in lengths)
    padded = []
    for x in arrays:
        x = x[cut]
        width = [(0, 0)] * x.ndim
        for axis in range(seq_dims):
            missing = int(lengths[axis]) - x.shape[axis]
            width[axis] = (0, missing) if mode == "post" else (missing, 0)
        padded.append(np.pad(x, width, mode="constant", constant_values=value))
    return np.array(padded)


class DataGenerator:
    """Batches for `model.fit`, written as bert4keras's `DataGenerator` subclasses are.

    Subclass it and write `__iter__(self, random=False)`, which walks
    `self.sample(random)` (pairs `(is_end, item)`) and yields a batch
    whenever it holds `batch_size` items or `is_end` is true. Then:

    - `forfit(random=True)`: the batches forever, reshuffled every pass, as a
      prefetching `tf.data.Dataset`, for `model.fit(generator.forfit(),
      steps_per_epoch=len(generator))`;
    - `fortest(random=False)`: the inputs of each batch forever, the same way;
    - `to_dataset()`: `forfit`'s dataset.

    Args:
        data: the examples: a sequence, or any iterable (then shuffling draws
            from a buffer of `buffer_size` examples).
        batch_size: examples per batch.
        buffer_size: shuffling buffer for data without a length (default
            `batch_size * 1000`).

    Example:
    >>> class Batches(DataGenerator):
    ...     def __iter__(self, random=False):
    ...         batch = []
    ...         for is_end, item in self.sample(random):
    ...             batch.append(item)
    ...             if len(batch) == self.batch_size or is_end:
    ...                 yield sequence_padding(batch), np.array([len(x) for x in batch])
    ...                 batch = []
    >>> generator = Batches([[1], [2, 3], [4, 5, 6]], batch_size=2)
    >>> len(generator), [ids.tolist() for ids, _ in generator]
    (2, [[[1, 0], [2, 3]], [[4, 5, 6]]])
    """

    def __init__(self, data, batch_size: int = 32, buffer_size: Optional[int] = None):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size: expected a positive integer, got {batch_size!r}")
        self.data = data
        self.batch_size = batch_size
        self.steps = -(-len(data) // batch_size) if hasattr(data, "__len__") else None
        self.buffer_size = buffer_size or batch_size * 1000

    def __len__(self) -> int:
        if self.steps is None:
            raise TypeError("this DataGenerator's data has no length; pass steps_per_epoch yourself")
        return self.steps

    def __iter__(self, random: bool = False):
        raise NotImplementedError("subclass DataGenerator and write __iter__(self, random=False)")

    def sample(self, random: bool = False) -> Iterator[Tuple[bool, object]]:
        """The examples, each as `(is_end, example)`; `is_end` is true for the last one."""
        items = self._shuffled() if random else iter(self.data)
        try:
            current = next(items)
        except StopIteration:
            return
        for following in items:
            yield False, current
            current = following
        yield True, current

    def _shuffled(self) -> Iterator:
        if self.steps is not None:
            for index in np.random.permutation(len(self.data)):
                yield self.data[index]
            return
        buffer = []
        for item in self.data:
            buffer.append(item)
            if len(buffer) > self.buffer_size:
                yield buffer.pop(np.random.randint(len(buffer)))
        while buffer:
            yield buffer.pop(np.random.randint(len(buffer)))

    def forfit(self, random: bool = True):
        """The batches, pass after pass, without end, as a prefetching `tf.data.Dataset` for
        `model.fit(generator.forfit(), steps_per_epoch=len(generator))`.

        A dataset, not a Python generator: Keras 3 fixes every axis of a
        generator's batches that happens to be equal in its first two, so a
        later, longer batch would fail; here only the rank, the dtype and
        the 1 of `[batch, 1]` labels are fixed.
        Lists in a batch (`[token_ids, segment_ids], labels`) become tuples, and
        a `None` target (a loss the model adds itself) is left out.
        """
        return self._dataset(lambda: (_as_tuples(batch) for batch in self._passes(random)))

    def fortest(self, random: bool = False):
        """The inputs of each batch (its first element), pass after pass, as `forfit`'s dataset, for
        `model.predict(generator.fortest(), steps=len(generator))`.

        Each element is a 1-tuple `(inputs,)`: Keras reads a pair as (inputs, labels), so a two-input
        model's `(token_ids, segment_ids)` would otherwise lose its second input.
        """
        return self._dataset(lambda: ((_as_tuples(batch[0]),) for batch in self._passes(random)))

    def to_dataset(self, random: bool = True):
        """`forfit`'s dataset (kbert's name for it)."""
        return self.forfit(random)

    def _passes(self, random: bool) -> Iterator:
        while True:
            yield from self.__iter__(random)

    def _dataset(self, batches):
        """An endless dataset of `batches()`, its structure and dtypes from the first batch, every axis
        open but the 1 of a `[batch, 1]` array (bert4keras's labels, which Keras's sparse losses squeeze
        only when they know the 1). A size-1 axis of a larger array stays open: GPLinker's
        `[batch, 2, n, 2]` labels have n = 1 in some batches only.

        `next(dataset)` gives the next batch, as `next` on bert4keras's Python generator did (its VAT
        example draws unlabelled batches so). Where TensorFlow is not installed, the batches come as an
        endless `keras.utils.PyDataset`, which Keras reads on JAX and PyTorch."""
        if not tensorflow_installed():
            return _EndlessBatches(batches)
        import tensorflow as tf

        def spec(x):
            shape = np.shape(x)
            labels_column = len(shape) == 2 and shape[1] == 1  # [batch, 1]; any other axis may vary
            return tf.TensorSpec((None, 1) if labels_column else (None,) * len(shape),
                                 tf.as_dtype(np.asarray(x).dtype))

        first = next(iter(batches()))
        signature = tf.nest.map_structure(spec, first)
        dataset = tf.data.Dataset.from_generator(batches, output_signature=signature).prefetch(tf.data.AUTOTUNE)
        dataset.__class__ = _taking_next(type(dataset))  # still the same dataset to Keras and tf.data
        return dataset


@functools.lru_cache(maxsize=None)
def _taking_next(dataset_class: type) -> type:
    """A subclass of a `tf.data` dataset class whose objects also answer `next()` with NumPy batches."""

    class Batches(dataset_class):
        def __next__(self):
            if "_batches" not in self.__dict__:
                self.__dict__["_batches"] = self.as_numpy_iterator()
            return next(self.__dict__["_batches"])

    Batches.__name__ = Batches.__qualname__ = dataset_class.__name__
    return Batches


class _EndlessBatches(keras.utils.PyDataset):
    """`DataGenerator`'s batches without TensorFlow: an endless `keras.utils.PyDataset` that `next()` reads too."""

    def __init__(self, batches):
        super().__init__()
        self.batches = iter(batches())

    @property
    def num_batches(self):
        return None  # endless: fit takes steps_per_epoch, predict steps

    def __getitem__(self, index):
        return next(self.batches)

    def __next__(self):
        return next(self.batches)


def _as_tuples(batch):
    """Lists (bert4keras batches use them for several inputs) as tuples, which tf.data takes as
    structure; a batch's `None` target (bert4keras's seq2seq scripts yield `[inputs], None`) left out."""
    if isinstance(batch, (list, tuple)):
        parts = batch[:-1] if len(batch) == 2 and batch[-1] is None else batch
        return tuple(_as_tuples(part) for part in parts)
    return batch
