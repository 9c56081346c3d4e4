"""Serializable Keras 3 layers that BERT-family models and their heads need beyond Keras's own.

Each layer has a `get_config` and is registered under the `kbert` package, so
a model saved as `.keras` loads back with `safe_mode=True`. None of them knows
BERT's layer names: the model builders give the names.

- `embeddings`: `CheckedEmbedding`, `TokenEmbedding`, `PositionEmbedding`, `MaskedAdd`
- `attention`: `MultiHeadSelfAttention`
- `feed_forward`: `FeedForward`
- `heads`: `TakeToken`, `BiasAdd`
- `common`: `gelu_tanh`, `get_activation`, `clone_initializer`
"""

from kbert.layers.attention import MultiHeadSelfAttention
from kbert.layers.common import clone_initializer, gelu_tanh, get_activation
from kbert.layers.embeddings import CheckedEmbedding, MaskedAdd, PositionEmbedding, TokenEmbedding, checked_ids
from kbert.layers.feed_forward import FeedForward
from kbert.layers.heads import BiasAdd, TakeToken

__all__ = ["BiasAdd", "CheckedEmbedding", "FeedForward", "MaskedAdd", "MultiHeadSelfAttention",
           "PositionEmbedding", "TakeToken", "TokenEmbedding", "checked_ids", "clone_initializer", "gelu_tanh",
           "get_activation"]
