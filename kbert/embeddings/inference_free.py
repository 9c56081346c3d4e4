"""Inference-free sparse encoders: SPLADE for documents, a weight table for queries.

opensearch's neural sparse `doc-v3` models (and sentence-transformers' `Router.for_query_document` with a
`SparseStaticEmbedding` query route) run the transformer on documents only. A query's sparse vector is the table's
weight of each vocabulary entry the query holds, once however often it occurs, read without `[CLS]` or `[SEP]`:
searching costs a tokenizer and a lookup, no model call.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence, Tuple

import numpy as np

from kbert.embeddings.files import model_max_length
from kbert.embeddings.modules import Router

@dataclasses.dataclass
class StaticQuery:
    """An inference-free sparse encoder's query side.

    Args:
        weights: `[vocabulary]` float32, each entry's weight (0: a token the query vectors leave out).
        tokenizer: the query module's own tokenizer (its folder's `tokenizer.json`).
        max_length: the tokens of a query read at most (its tokenizer's `model_max_length`; None: all).
        frozen: whether training leaves the weights as they are.
        default_route: `query` or `document`, the side a text given no role takes.

    Example:
    >>> from kbert.tokenizers import Tokenizer
    >>> query = StaticQuery(np.array([0, 0, 0, 0.5, 2.0, 0], np.float32),
    ...                     Tokenizer({"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "cat": 3, "dog": 4, "[UNK]": 5}), None)
    >>> query.terms(query.tokens(["dog cat dog"])[0])
    (array([3, 4]), array([0.5, 2. ], dtype=float32))
    """

    weights: np.ndarray
    tokenizer: object
    max_length: Optional[int]
    frozen: bool = False
    default_route: str = "document"

    @classmethod
    def load(cls, router: Router, vocab_size: int) -> "StaticQuery":
        """The query route of `router` (its `SparseStaticEmbedding`), its weights checked against the document
        side's `vocab_size`."""
        from kbert.tokenizers.tokenizer_json import check_tokenizer_fits, folder_tokenizer

        path = router.query.path
        tokenizer = folder_tokenizer(path)
        check_tokenizer_fits(tokenizer, vocab_size, path)
        return cls(router.query.static_weights(vocab_size), tokenizer, model_max_length(path), router.query.frozen,
                   router.default_route)

    def takes(self, role: Optional[str]) -> bool:
        """Whether a text of `role` (`query`, `document` or None: the default route) is read by the table."""
        return (role or self.default_route) == "query"

    def tokens(self, texts: Sequence[str], cut: bool = True) -> List[List[int]]:
        """Each text's token ids, without special tokens, cut to `max_length` (uncut with `cut` False: a server
        refuses an over-long query unless asked to cut it)."""
        return [ids[:self.max_length if cut else None] for ids, _ in self.tokenizer.ids_and_offsets(list(texts))]

    def terms(self, ids: Sequence[int]) -> Tuple[np.ndarray, np.ndarray]:
        """A query's sparse vector from its token ids: each distinct id (ascending) and its weight, those of
        weight 0 left out."""
        present = np.unique(np.asarray(ids, np.int64))
        values = self.weights[present]
        return present[values != 0], values[values != 0]
