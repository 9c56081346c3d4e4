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
and the scoring (`MultiVectorOutput`); `kbert.embeddings.embedder.Embedder.encode_multi_vector` runs the
model.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from kbert.embeddings.kinds import OutputKind, score_blocks
from kbert.embeddings.modules import TOKENS, Dense, Module, MultiVectorMask, Normalize, Transformer
from kbert.embeddings.pipeline import apply_modules
from kbert.errors import CheckpointError, KbertError
from kbert.models import naming
from kbert.tokenizers.long_texts import encode_within

@dataclasses.dataclass(frozen=True)
class QueryExpansion:
    """ColBERT's query expansion (the `query_expansion` of sentence-transformers 6's Transformer config): each
    query shorter than `length` tokens is filled up to it with `token` (None: the tokenizer's `[MASK]`).

    Args:
        strategy: `fixed`: every query is cut or filled to exactly `length` tokens; `min`: `length` is only the
            floor (longer queries are cut at the query length instead).
        length: the tokens a query has at least.
        attend: whether the other tokens attend to the filling (False, classic ColBERT: they do not, yet each
            filling token reads the query and gives a vector of its own).
        token: the filling token (None: `[MASK]`).
    """

    strategy: str
    length: int
    attend: bool = False
    token: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class MultiVectorOutput(OutputKind, name="multi-vector", described="a multi-vector encoder (ColBERT)",
                        route="/embed_all", model_type="MultiVectorEncoder", similarity="maxsim", vectors=TOKENS,
                        one_vector=False, listed_as="a multi-vector encoder (MultiVectorMask)",
                        written_as='its token vectors are written as {"embedding": [[...], ...]} lines (--npy: one '
                                   'array and its offsets)'):
    """A multi-vector (ColBERT, late-interaction) encoder's token vectors: what each role's input is cut to, how a
    query is expanded, and which tokens are left out of the scoring (its `MultiVectorMask`).

    Args:
        query_length: a query's longest input in tokens (None: the model's `max_seq_length`).
        document_length: a document's longest input (None: the model's `max_seq_length`).
        expansion: the queries' expansion (`QueryExpansion`), or None.
        skiplist_words: tokens whose vectors are left out (PyLate's punctuation), for the roles in `skiplist_tasks`.
        skiplist_tasks: the roles (`query`, `document`) the skiplist applies to; a text of no role counts as a
            document.
        skip_first: leave every text's first token out (bge-m3's ColBERT head leaves `<s>` out; not a
            sentence-transformers setting).

    Example:
    >>> output = MultiVectorOutput(document_length=180, expansion=QueryExpansion("fixed", 32))
    >>> role_length(output, "query", 512), role_length(output, "document", 512)
    (32, 180)
    >>> [type(module).__name__ for module in output.modules(768, normalize=True)]
    ['MultiVectorMask', 'Normalize']
    """

    query_length: Optional[int] = None
    document_length: Optional[int] = None
    expansion: Optional[QueryExpansion] = None
    skiplist_words: Tuple[str, ...] = ()
    skiplist_tasks: Tuple[str, ...] = ("document",)
    skip_first: bool = False

    def __str__(self) -> str:  # how a file's metadata names the pooling
        return "multi-vector"

    def transformer_module(self, max_seq_length: Optional[int] = None, do_lower_case: bool = False) -> Transformer:
        """With its query and document lengths and query expansion."""
        return Transformer("", {"max_seq_length": max_seq_length, "do_lower_case": do_lower_case,
                                "query_length": self.query_length, "document_length": self.document_length,
                                "query_expansion": self.expansion and dataclasses.asdict(self.expansion)})

    def modules(self, dimensions: int, dense: Sequence[Dense] = (), normalize: bool = False,
                include_prompt: bool = True) -> List[Module]:
        """Each token's projections and normalisation, its `MultiVectorMask` between them."""
        return [*(dataclasses.replace(module, input_name=TOKENS) for module in dense),
                MultiVectorMask(self.skiplist_words, self.skiplist_tasks), *([Normalize(TOKENS)] if normalize else [])]

    def build(self, bert, modules: Optional[Sequence[Module]] = None, head_weights: Optional[list] = None,
              name: str = "embedder"):
        """Every token's hidden state through the modules (`[batch, tokens, dims]`); where the query expansion is
        hidden from attention, over `bert`'s graph traced anew (`hide_query_expansion`: build on the returned
        model's inputs). `head_weights`: bge-m3's ColBERT head's `Linear` (kernel, bias), each token's
        projection."""
        import keras

        bert = hide_query_expansion(bert, self)
        vectors = bert.outputs[0]
        if head_weights is not None:
            layer = keras.layers.Dense(int(head_weights[0].shape[1]), name="Embedding-Dense-0")
            vectors = layer(vectors)
            layer.set_weights(head_weights)
        return apply_modules(list(bert.inputs), vectors, modules or [], name)

    def within_positions(self, longest: int, config_path: str) -> "MultiVectorOutput":
        """The query and document lengths cut to the model's positions; a query expansion longer than them is
        refused (every query would be padded past the last position)."""
        if self.expansion is not None and self.expansion.length > longest:
            raise CheckpointError(f"{config_path}: query_expansion's length {self.expansion.length} is longer than "
                                  f"the model's longest input, {longest} tokens")
        return dataclasses.replace(self, **{key: min(value, longest) for key in ("query_length", "document_length")
                                            if (value := getattr(self, key)) is not None})

    def check_savable(self, source: str) -> None:
        if self.skip_first:
            raise KbertError(f"{source or 'this model'}: a bge-m3 head is read beside its folder's dense model, "
                             "not written as a sentence-transformers folder; copy the folder itself")

    def written_modules(self, steps: List[Module], pooled: Module) -> List[Module]:
        """The `MultiVectorMask` before a last normalisation, where sentence-transformers 6 puts it."""
        at = len(steps) - 1 if steps and isinstance(steps[-1], Normalize) else len(steps)
        return [*steps[:at], pooled, *steps[at:]]

    def batch_rows(self, embedder, encoded: list, batch_size: int) -> list:
        return embedder.token_vectors(encoded, batch_size)

    def predict_rows(self, embedder, texts: List[str], batch_size: int, bucketing: bool = True) -> List[dict]:
        """Each text's scored token vectors, the texts embedded as documents."""
        return self.rows(texts, embedder.encode_multi_vector(texts, "document", batch_size))

    def rows(self, texts: List[str], results: list) -> List[dict]:
        return [{"text": text, "embeddings": tokens.tolist()} for text, tokens in zip(texts, results)]

    def blank_row(self, text: str) -> dict:
        return {"text": text, "embeddings": None}

    def search(self, embedder, texts: Dict[str, List[str]], batch_size: int = 64):
        """By MaxSim (`MaxSimIndex`), with the mean vectors of a query and a document (`query_vectors`,
        `document_vectors`)."""
        documents, queries = (embedder.encode_multi_vector(texts[role], role, batch_size)
                              for role in ("document", "query"))
        return score_blocks(MaxSimIndex(documents).scores, queries), {
            "query_vectors": float(np.mean([len(query) for query in queries])),
            "document_vectors": float(np.mean([len(document) for document in documents]))}

    def export_note(self) -> str:
        return ("; a query is filled up to its length with the expansion token, given as -1 - id where no other "
                "token attends to it (kbert.embeddings.multi_vector.role_tokens); the skiplist's tokens are left out "
                "after the model")

    def export_samples(self, embedder, texts: List[str]) -> list:
        """Queries filled up to their expansion as well as documents."""
        return embedder.role_tokens(texts, "query") + embedder.role_tokens(texts, "document")



#: The roles a text has for a multi-vector encoder (None: neither, as sentence-transformers' plain `encode`).
ROLES = ("query", "document")


def role_length(spec: "MultiVectorOutput", role: Optional[str], maxlen: int) -> int:
    """The longest input in tokens of a text of `role`: an expanded query's fixed length (`fixed`) or at least its
    floor (`min`), else the role's own length, else the model's `maxlen`, as sentence-transformers 6 cuts them."""
    length = {"query": spec.query_length, "document": spec.document_length}.get(role) or maxlen
    if role == "query" and spec.expansion is not None:
        return spec.expansion.length if spec.expansion.strategy == "fixed" else max(length, spec.expansion.length)
    return length


def role_tokens(spec: "MultiVectorOutput", tokenizer, texts: Sequence[str], role: Optional[str],
                maxlen: int) -> List[Tuple[List[int], List[int]]]:
    """`texts` (their prompts in place) tokenized within their role's length (`role_length`), each query filled up
    to its expansion's length (`expanded`)."""
    return expanded_queries(spec, tokenizer, encode_within(tokenizer, texts, role_length(spec, role, maxlen))
                            if texts else [], role)


def expanded_queries(spec: "MultiVectorOutput", tokenizer, encoded: List[Tuple[List[int], List[int]]],
                     role: Optional[str]) -> List[Tuple[List[int], List[int]]]:
    """Tokenized texts of `role` as the model reads them: queries filled up to the expansion's length (`expanded`)
    where the model expands them; any other text as it is."""
    if role == "query" and spec.expansion is not None:
        return expanded(encoded, spec.expansion.length, expansion_id(spec, tokenizer))
    return encoded


def expansion_id(spec: "MultiVectorOutput", tokenizer) -> int:
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


def skiplist_ids(spec: "MultiVectorOutput", tokenizer, role: Optional[str]) -> np.ndarray:
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


def hide_query_expansion(bert, spec: MultiVectorOutput):
    """`bert`, or where the model says a query's expansion tokens are not attended to (classic ColBERT), its
    graph made anew over the same layers with the token embedding taking them as hidden ids
    (`TokenEmbedding(hidden_ids=True)`: no other token attends to them). Made anew because Keras records each
    layer's mask in the graph when it is built: an attention layer given its mask as an argument (the rotary and
    disentangled ones) would keep the mask of ids alone. Refused for a family that numbers positions from its
    padding mask (RoBERTa's), which would number them as padding."""
    from kbert.models.registry import get_family
    from kbert.models.transformer import remasked

    if spec.expansion is None or spec.expansion.attend:
        return bert
    if getattr(get_family(bert.family), "positions_after_padding", False):
        raise KbertError(f"{bert.family} numbers positions after its padding, so a query's expansion tokens "
                         "cannot be hidden from attention and keep their positions; kbert computes query expansion "
                         "with attend false on the other families")
    bert.get_layer(naming.EMBEDDING_TOKEN).hidden_ids = True
    return remasked(bert)
