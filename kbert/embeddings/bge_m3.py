"""bge-m3's two extra heads: its sparse (lexical) and ColBERT outputs, beside the dense vector of its
sentence-transformers folder.

BAAI's bge-m3 is an XLM-R whose folder is a sentence-transformers one (CLS pooling, normalised: the dense
vector) with two PyTorch files beside the transformer's weights:
- `sparse_linear.pt`: a `Linear(hidden, 1)`; each token's weight is `ReLU` of it, and a text's weight of a
  vocabulary id is the largest over the tokens of that id, the special tokens (`<s>`, `</s>`, `<pad>`, `<unk>`)
  left out (FlagEmbedding's `lexical_weights`);
- `colbert_linear.pt`: a `Linear(hidden, dims)` of every token but the first (`<s>`), each vector normalised
  (FlagEmbedding's `colbert_vecs`).
Both are read without torch and without running their pickle (`kbert.checkpoints.torch_pickle`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import List, Tuple

import numpy as np

from kbert.embeddings.sparse import SparseOutput, top_terms
from kbert.errors import CheckpointError, KbertError
from kbert.models import naming

#: The heads a folder holds beside its dense vector, by the name `kbert embed --head` takes, and their files.
HEAD_FILES = {"sparse": "sparse_linear.pt", "colbert": "colbert_linear.pt"}


@dataclasses.dataclass(frozen=True)
class LexicalOutput(SparseOutput, reads_logits=False):
    """bge-m3's sparse head as an output: each token's weight `ReLU(w · h + b)` (its `Linear`, one Keras `Dense`),
    pooled per vocabulary id by max, the special tokens left out (`lexical_terms`). It is read beside the folder's
    dense model, never written as a folder of its own.

    Example:
    >>> output = LexicalOutput()
    >>> str(output), output.name, output.route, output.reads_logits
    ('bge-m3 lexical', 'sparse', '/embed_sparse', False)
    """

    def __str__(self) -> str:  # how a file's metadata names the pooling
        return "bge-m3 lexical"

    def dimensions(self, model, backbone) -> int:  # a weight per token, pooled into the vocabulary
        return int(backbone.get_layer(naming.EMBEDDING_TOKEN).input_dim)

    def build(self, bert, modules=None, head_weights=None, name: str = "embedder"):
        """Each token's weight (`[batch, tokens, 1]`) from the head's `Linear` (`head_weights`: kernel, bias)."""
        import keras

        layer = keras.layers.Dense(1, activation="relu", name="Embedding-Sparse-Linear")
        weights = layer(bert.outputs[0])
        layer.set_weights(head_weights)
        return keras.Model(bert.inputs, weights, name=name)

    def check_savable(self, source: str) -> None:
        raise KbertError(f"{source or 'this model'}: a bge-m3 head is read beside its folder's dense model, not "
                         "written as a sentence-transformers folder; copy the folder itself")

    def terms(self, ids, vector, special, top_k):
        return top_terms(*lexical_terms(ids, vector, special), top_k)

    def export_note(self) -> str:
        return ("; the output is each token's weight ([batch, tokens, 1]): a text's sparse vector is, for each "
                "vocabulary id it holds, the largest weight of its tokens of that id, the special tokens and "
                "weights of 0 left out (kbert.embeddings.bge_m3.lexical_terms)")


def has_heads(folder: "str | os.PathLike[str]") -> List[str]:
    """The extra heads (`HEAD_FILES`' names) whose files `folder` holds."""
    return [head for head, name in HEAD_FILES.items() if os.path.isfile(os.path.join(os.fspath(folder), name))]


def read_head(folder: "str | os.PathLike[str]", head: str, hidden_size: int) -> List[np.ndarray]:
    """A head's `Linear` as Keras's `[kernel [hidden, out], bias [out]]`, checked: `weight` `[out, hidden]` (out 1
    for the sparse head) and `bias` `[out]`, floating-point and finite. A missing file is refused naming it."""
    from kbert.checkpoints.torch_pickle import read_torch_tensors

    path = os.path.join(os.fspath(folder), HEAD_FILES[head])
    if not os.path.isfile(path):
        present = ", ".join(has_heads(folder)) or "none"
        raise CheckpointError(f"{path}: missing; --head {head} reads bge-m3's {HEAD_FILES[head]} (this folder's extra "
                              f"heads: {present})")
    tensors = read_torch_tensors(path)
    weight, bias = tensors.get("weight"), tensors.get("bias")
    out = 1 if head == "sparse" else None
    if weight is None or bias is None or weight.ndim != 2 or weight.shape[1] != hidden_size or \
            (out is not None and weight.shape[0] != out) or bias.shape != (weight.shape[0],):
        shapes = {name: list(value.shape) for name, value in tensors.items()}
        raise CheckpointError(f"{path}: expected a Linear's weight [{out or 'out'}, {hidden_size}] and bias "
                              f"[{out or 'out'}] (the transformer's hidden size {hidden_size}), got {shapes}")
    if weight.dtype.kind != "f" or not (np.isfinite(weight).all() and np.isfinite(bias).all()):
        raise CheckpointError(f"{path}: expected finite floating-point weights")
    return [weight.T.astype(np.float32), bias.astype(np.float32)]


def lexical_terms(ids: List[int], weights: np.ndarray, special: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """A text's vocabulary ids (ascending) and weights from its tokens' `ids` and `weights`: each id's largest
    weight, the `special` ids and the zero weights left out (FlagEmbedding's `lexical_weights`).

    >>> lexical_terms([0, 7, 5, 7, 2], np.array([0.9, 0.2, 0.0, 0.5, 0.4]), np.array([0, 1, 2, 3]))
    (array([7]), array([0.5], dtype=float32))
    """
    ids = np.asarray(ids, np.int64)
    weights = np.asarray(weights, np.float32).reshape(-1)[:len(ids)]  # a weight per token ([tokens] or [tokens, 1])
    keep = ~np.isin(ids, special) & (weights > 0)
    ids, weights = ids[keep], weights[keep]
    unique, where = np.unique(ids, return_inverse=True)
    best = np.zeros(unique.size, np.float32)
    np.maximum.at(best, where, weights)
    return unique, best
