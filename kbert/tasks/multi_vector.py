"""Multi-vector (ColBERT, late-interaction) encoders: a vector per token, scored by MaxSim.

A sentence-transformers 6 `MultiVectorEncoder` folder (or one kbert writes)
keeps each token's hidden state, projected (`Dense`, typically to 128 values)
and scaled to unit length, and leaves some tokens out of the scoring: a
document's punctuation (the `MultiVectorMask`'s skiplist). A query is
*expanded*: filled with `[MASK]` tokens up to a fixed length, which the query's
own tokens do not attend to but which each read the query and give a vector of
their own. A query and a document are scored by MaxSim: for each query vector
its largest dot product with the document's vectors, summed.

This module holds what the roles change (lengths, expansion, the skiplist)
and the scoring; `kbert.tasks.embedding.Embedder.encode_multi_vector` runs the
model.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from kbert.checkpoints.sentence_transformers import MultiVectorSpec
from kbert.errors import KbertError
from kbert.tokenizers.long_texts import encode_within

#: The roles a text has for a multi-vector encoder (None: neither, as sentence-transformers' plain `encode`).
ROLES = ("query", "document")


def role_length(spec: MultiVectorSpec, role: Optional[str], maxlen: int) -> int:
    """The longest input in tokens of a text of `role`: an expanded query's fixed length (`fixed`) or at least its
    floor (`min`), else the role's own length, else the model's `maxlen`, as sentence-transformers 6 cuts them."""
    length = {"query": spec.query_length, "document": spec.document_length}.get(role) or maxlen
    if role == "query" and spec.expansion is not None:
        return spec.expansion.length if spec.expansion.strategy == "fixed" else max(length, spec.expansion.length)
    return length


def role_tokens(spec: MultiVectorSpec, tokenizer, texts: Sequence[str], role: Optional[str],
                maxlen: int) -> List[Tuple[List[int], List[int]]]:
    """`texts` (their prompts in place) tokenized within their role's length (`role_length`), each query filled up
    to its expansion's length (`expanded`)."""
    return expanded_queries(spec, tokenizer, encode_within(tokenizer, texts, role_length(spec, role, maxlen))
                            if texts else [], role)


def expanded_queries(spec: MultiVectorSpec, tokenizer, encoded: List[Tuple[List[int], List[int]]],
                     role: Optional[str]) -> List[Tuple[List[int], List[int]]]:
    """Tokenized texts of `role` as the model reads them: queries filled up to the expansion's length (`expanded`)
    where the model expands them; any other text as it is."""
    if role == "query" and spec.expansion is not None:
        return expanded(encoded, spec.expansion.length, expansion_id(spec, tokenizer))
    return encoded


def expansion_id(spec: MultiVectorSpec, tokenizer) -> int:
    """The id a query is filled with: the expansion's token (or `[MASK]`), as a hidden id (`-1 - id`,
    `kbert.layers.embeddings.TokenEmbedding`'s) where the other tokens must not attend to it."""
    expansion = spec.expansion
    token = expansion.token or "[MASK]"
    filling = tokenizer.token_to_id(expansion.token) if expansion.token else getattr(tokenizer, "mask_id", None)
    if filling is None or (expansion.token and filling == getattr(tokenizer, "unk_id", None)):
        raise KbertError(f"query_expansion: the tokenizer has no {token} token to fill a query with; name one in "
                         "query_expansion's token")
    return int(filling) if expansion.attend else -1 - int(filling)


def expanded(encoded: Sequence[Tuple[List[int], List[int]]], length: int,
             filling: int) -> List[Tuple[List[int], List[int]]]:
    """Each tokenized query filled with `filling` up to `length` tokens (a longer one is left as it is)."""
    return [(ids + [filling] * (length - len(ids)), segments + [0] * (length - len(ids))) if len(ids) < length
            else (ids, segments) for ids, segments in encoded]


def skiplist_ids(spec: MultiVectorSpec, tokenizer, role: Optional[str]) -> np.ndarray:
    """The ids whose vectors a text of `role` leaves out: the skiplist's tokens where the role (a text of no role
    counts as a document) is one it applies to; a word that is not one token of the vocabulary is left out of
    the list, as sentence-transformers does (else it would drop every `[UNK]`)."""
    if (role or "document") not in spec.skiplist_tasks:
        return np.zeros(0, np.int64)
    unknown = getattr(tokenizer, "unk_id", None)
    ids = [tokenizer.token_to_id(word) for word in spec.skiplist_words]
    return np.array([token for token in ids if token is not None and token != unknown], np.int64)


def scored_mask(ids: Sequence[int], skipped: np.ndarray) -> np.ndarray:
    """Which of a text's tokens count in its scoring: all but the `skipped` ids (`skiplist_ids`)."""
    return ~np.isin(np.asarray(ids), skipped)


def scored_vectors(vectors: np.ndarray, ids: Sequence[int], skipped: np.ndarray) -> np.ndarray:
    """A text's token `vectors` (`[tokens, dims]`, its padding cut off) without those of the `skipped` ids."""
    return np.ascontiguousarray(vectors[:len(ids)][scored_mask(ids, skipped)], np.float32)


def maxsim(query: np.ndarray, documents: Sequence[np.ndarray]) -> np.ndarray:
    """ColBERT's late-interaction score of a query's vectors `[q, dims]` against each document's `[d_i, dims]`:
    for each query vector its largest dot product with the document's vectors, summed.

    >>> query = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> maxsim(query, [np.array([[1.0, 0.0], [0.5, 0.5]]), np.array([[0.0, 1.0]])]).tolist()
    [1.5, 1.0]
    """
    return MaxSimIndex(documents).scores(query)


class MaxSimIndex:
    """A corpus's token vectors in memory, scored exactly against a query by MaxSim (`maxsim`): one matrix of every
    document's vectors, so that a query costs one matrix product (`[tokens in the corpus, query tokens]` floats).

    Args:
        documents: each document's `[tokens, dims]` vectors (`Embedder.encode_multi_vector`); an empty one scores 0.
    """

    def __init__(self, documents: Sequence[np.ndarray]):
        self.size = len(documents)
        self.filled = np.array([index for index, document in enumerate(documents) if len(document)], np.int64)
        lengths = np.array([len(documents[index]) for index in self.filled], np.int64)
        self.starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        self.vectors = np.concatenate([documents[index] for index in self.filled]) if self.filled.size else None

    def scores(self, query: np.ndarray) -> np.ndarray:
        """`[documents]` float32 MaxSim scores of `query`'s `[q, dims]` vectors."""
        scores = np.zeros(self.size, np.float32)
        if self.vectors is not None and len(query):
            products = self.vectors @ np.asarray(query, self.vectors.dtype).T
            scores[self.filled] = np.maximum.reduceat(products, self.starts, axis=0).sum(axis=1)
        return scores
