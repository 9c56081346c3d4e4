"""Several texts of one example through one encoder call: stacked on the batch axis, then split again.

A contrastive example holds two or three texts (a query and its positive, a
hard negative; SimCSE's text and itself). Running them as one batch of
`views × batch` rows costs one encoder call, and gives each row its own
dropout mask, which is what makes SimCSE's two views of a text differ.
"""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="kbert")
class StackViews(keras.layers.Layer):
    """`[batch, length_i]` id tensors of each view, padded to the longest and stacked: `[views × batch, length]`.

    Args:
        pad_id: the id padding is written with (0: BERT's `[PAD]`).

    Example:
    >>> import numpy as np
    >>> stacked = StackViews()([np.array([[1, 2, 3]]), np.array([[4, 5]])])
    >>> ops.convert_to_numpy(stacked).tolist()
    [[1, 2, 3], [4, 5, 0]]
    """

    def __init__(self, pad_id: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.pad_id = pad_id

    def call(self, views):
        lengths = [ops.shape(view)[1] for view in views]
        # Static on JAX (whose padding must be), a tensor where TensorFlow's graph leaves the length open.
        longest = max(lengths) if all(isinstance(length, int) for length in lengths) else ops.max(ops.stack(lengths))
        padded = [ops.pad(view, [[0, 0], [0, longest - ops.shape(view)[1]]], constant_values=self.pad_id)
                  for view in views]
        return ops.concatenate(padded, axis=0)

    def compute_output_spec(self, views):
        lengths = [view.shape[1] for view in views]
        length = None if None in lengths else max(lengths)
        batch = None if views[0].shape[0] is None else views[0].shape[0] * len(views)
        return keras.KerasTensor((batch, length), dtype=views[0].dtype)

    def get_config(self) -> dict:
        return {**super().get_config(), "pad_id": self.pad_id}


@keras.saving.register_keras_serializable(package="kbert")
class SplitViews(keras.layers.Layer):
    """`[views × batch, dimensions]` vectors (as `StackViews` stacked their texts) as `[batch, views, dimensions]`.

    Args:
        views: the texts of each example.

    Example:
    >>> import numpy as np
    >>> ops.convert_to_numpy(SplitViews(2)(np.arange(4.0).reshape(4, 1)))[:, :, 0].tolist()
    [[0.0, 2.0], [1.0, 3.0]]
    """

    def __init__(self, views: int, **kwargs):
        super().__init__(**kwargs)
        self.views = views

    def call(self, vectors):
        split = ops.reshape(vectors, (self.views, -1, ops.shape(vectors)[-1]))
        return ops.transpose(split, (1, 0, 2))

    def compute_output_shape(self, shape):
        batch = None if shape[0] is None else shape[0] // self.views
        return (batch, self.views, shape[-1])

    def get_config(self) -> dict:
        return {**super().get_config(), "views": self.views}
