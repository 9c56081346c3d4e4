"""Sparse encoders (SPLADE): a weight per vocabulary entry, most of them 0, pooled from masked-LM logits.

A sentence-transformers `SparseEncoder` folder runs its transformer with the masked-LM head
(`MLMTransformer`) and pools each vocabulary entry's logits over the tokens (`SpladePooling`: `max` or
`sum` of `relu` or `log1p_relu`). An inference-free one reads its queries by a weight table instead
(`kbert.embeddings.inference_free`). Vectors are kept as their non-zero ids and weights (`sparse_terms`),
and a corpus is searched exactly through an inverted index (`SparseIndex`).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from kbert.embeddings.kinds import OutputKind, score_blocks
from kbert.embeddings.modules import Dense, MLMTransformer, Module, SpladePooling, Transformer


def top_terms(indices: np.ndarray, values: np.ndarray, top_k: Optional[int]) -> Tuple[np.ndarray, np.ndarray]:
    """Sparse terms (ascending ids and their values) cut to the `top_k` largest values (ties at the cut kept by
    lower id); None: all of them."""
    if top_k is None or indices.size <= top_k:
        return indices, values
    keep = np.sort(np.argsort(-values, kind="stable")[:top_k])
    return indices[keep], values[keep]


def sparse_terms(vector: np.ndarray, top_k: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
    """A sparse vector's non-zero positions (ascending, int64) and values (float32), only the `top_k` largest
    where given (ties at the cut kept by lower position).

    >>> sparse_terms(np.array([0.0, 2.0, 0.0, 0.5, 1.0], np.float32), top_k=2)
    (array([1, 4]), array([2., 1.], dtype=float32))
    """
    indices = np.flatnonzero(vector).astype(np.int64)
    return top_terms(indices, vector[indices].astype(np.float32), top_k)


@dataclasses.dataclass(frozen=True)
class SparseOutput(OutputKind, name="sparse", described="a sparse encoder (SPLADE)", route="/embed_sparse",
                   model_type="SparseEncoder", similarity="dot", reads_logits=True,
                   listed_as="a sparse encoder (SpladePooling)",
                   written_as='its vectors are written as {"indices", "values"} lines (--top-k K keeps the K largest)'):
    """SPLADE's vector: the masked-LM head's logits of each token activated (`activation`: `relu`,
    `log1p_relu`) and pooled over the tokens (`strategy`: `max`, `sum`) into one weight per vocabulary entry
    (`kbert.layers.pooling.SpladePooling`).

    Example:
    >>> str(SparseOutput()), SparseOutput().modules(30522)[0].dimensions
    ('splade max relu', 30522)
    """

    strategy: str = "max"
    activation: str = "relu"

    def __str__(self) -> str:  # how a file's metadata names the pooling: "splade max relu"
        return f"splade {self.strategy} {self.activation}"

    def transformer_module(self, max_seq_length: Optional[int] = None, do_lower_case: bool = False) -> Transformer:
        return MLMTransformer("", {"max_seq_length": max_seq_length, "do_lower_case": do_lower_case})

    def modules(self, dimensions: int, dense: Sequence[Dense] = (), normalize: bool = False,
                include_prompt: bool = True) -> List[Module]:
        return [SpladePooling(self.strategy, self.activation, dimensions)]

    def terms(self, ids: List[int], vector: np.ndarray, special: np.ndarray,
              top_k: Optional[int]) -> Tuple[np.ndarray, np.ndarray]:
        """A text's non-zero vocabulary ids and weights from the model's row for it (`ids`: its tokens)."""
        return sparse_terms(vector, top_k)

    def batch_rows(self, embedder, encoded: list, batch_size: int) -> list:
        return embedder.sparse_rows(encoded, batch_size)

    def predict_rows(self, embedder, texts: List[str], batch_size: int, bucketing: bool = True) -> List[dict]:
        return self.rows(texts, embedder.encode_sparse(texts, batch_size))

    def rows(self, texts: List[str], results: list) -> List[dict]:
        return [{"text": text, "indices": indices.tolist(), "values": values.tolist()}
                for text, (indices, values) in zip(texts, results)]

    def values(self, results: list) -> list:
        return [values for _, values in results]

    def blank_row(self, text: str) -> dict:
        return {"text": text, "indices": None, "values": None}

    def search(self, embedder, texts: Dict[str, List[str]], batch_size: int = 64):
        """By the dot product of sparse vectors through an inverted index (`SparseIndex`), each role read by its
        side (an inference-free encoder's queries by its weight table); with the mean non-zero weights of a query
        and a document (`query_terms`, `document_terms`)."""
        documents, queries = (embedder.encode_sparse(texts[role], batch_size, role=role)
                              for role in ("document", "query"))
        index = SparseIndex(documents, len(documents))
        return score_blocks(lambda terms: index.scores(*terms), queries), {
            "query_terms": float(np.mean([ids.size for ids, _ in queries])),
            "document_terms": float(np.mean([ids.size for ids, _ in documents]))}


class SparseIndex:
    """An inverted index of sparse vectors in memory: for each vocabulary id, the documents that weigh it and
    their weights, so that a query's exact dot product with every document reads only its own ids' postings.

    Args:
        documents: each document's `(ids, weights)` (`Embedder.encode_sparse`).
        count: the number of documents.

    Example:
    >>> index = SparseIndex([(np.array([1, 5]), np.array([0.5, 2.0])), (np.array([5]), np.array([1.0]))], 2)
    >>> index.scores(np.array([5, 7]), np.array([3.0, 1.0])).tolist()
    [6.0, 3.0]
    """

    def __init__(self, documents: Sequence[Tuple[np.ndarray, np.ndarray]], count: int):
        terms = np.concatenate([ids for ids, _ in documents]) if documents else np.zeros(0, np.int64)
        owners = np.repeat(np.arange(len(documents)), [ids.size for ids, _ in documents])
        weights = np.concatenate([values for _, values in documents]) if documents else np.zeros(0, np.float32)
        order = np.argsort(terms, kind="stable")
        self.terms, self.documents, self.weights = terms[order], owners[order], weights[order].astype(np.float64)
        self.count = count

    def scores(self, ids: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """`[count]` dot products of the query `(ids, weights)` with every document."""
        starts, ends = np.searchsorted(self.terms, ids, "left"), np.searchsorted(self.terms, ids, "right")
        postings = np.concatenate([np.arange(start, end) for start, end in zip(starts, ends)] or [np.zeros(0, int)])
        contributions = self.weights[postings] * np.repeat(np.asarray(weights, np.float64), ends - starts)
        return np.bincount(self.documents[postings], contributions, minlength=self.count)
