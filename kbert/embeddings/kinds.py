"""What an embedding model gives a text, one class per kind, each owning what differs between the kinds.

- `DenseOutput` (here): one vector a text, a `Pooling` of the hidden states (its `mode`).
- `SparseOutput` (`kbert.embeddings.sparse`): SPLADE's weight per vocabulary entry, pooled from masked-LM
  logits; an inference-free encoder is one with a weight table for its queries (`Embedder.static_query`).
- `LexicalOutput` (`kbert.embeddings.bge_m3`): bge-m3's sparse head, a weight per token pooled by vocabulary id.
- `MultiVectorOutput` (`kbert.embeddings.multi_vector`): ColBERT's vector per token, scored by MaxSim.

A kind says how its Keras graph is built from a folder's modules (`build`), which modules a folder of it lists
(`transformer_module`, `modules`), what a batch of tokenized texts gives (`batch_rows`), what `kbert predict`
prints (`predict_rows`), how a corpus is searched (`search`, for `kbert evaluate`), which server route answers
it (`route`) and what its export notes (`export_note`, `export_samples`). `kbert.embeddings.embedder.Embedder`
runs any of them; the commands, the server and the exporter ask the kind rather than telling kinds apart.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import ClassVar, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from kbert.embeddings.modules import SENTENCE, Dense, Module, Normalize, Pooling, Transformer
from kbert.embeddings.pipeline import apply_modules

#: How many queries' scores `search` holds at once (`[SEARCH_BLOCK, documents]` floats).
SEARCH_BLOCK = 256


def unit_length(vectors: np.ndarray) -> np.ndarray:
    """Each row of `vectors` scaled to unit length (an all-zero row stays zero)."""
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)


class OutputKind(abc.ABC):
    """What a kind of embedding model gives a text. Subclasses give the class fields as the class's keywords
    (`class SparseOutput(OutputKind, name="sparse", ...)`) and override what differs.

    Class fields:
        name: `dense`, `sparse` or `multi-vector` (what `/info` and the CLI call it).
        described: how a refusal names such a model ("a sparse encoder (SPLADE)").
        route: the server route that gives its vectors (beside `/v1/predict`).
        model_type: sentence-transformers' `model_type` of its folder.
        similarity: sentence-transformers' `similarity_fn_name` of its folder.
        vectors: the vectors its `Dense` and `Normalize` modules read (`sentence_embedding`, `token_embeddings`).
        reads_logits: whether it pools the masked-LM head's logits (the backbone is built with one).
        calibrated: whether its vectors are one dense vector a text: calibration ranges, int8 and uint8
            precisions, `--dimensions`, `--normalize`, `--npy` apply.
        listed_as: how `kbert embed` names such a model when it refuses a dense vector's option.
        written_as: how `kbert embed` writes its vectors, where they are not one dense vector a text.
        one_vector: whether a text is one vector (dense or sparse; not one per token), which STS, classification
            and clustering compare.

    Example:
    >>> from kbert.embeddings.multi_vector import MultiVectorOutput
    >>> from kbert.embeddings.sparse import SparseOutput
    >>> [(kind.name, kind.route, kind.model_type) for kind in (DenseOutput, SparseOutput, MultiVectorOutput)]
    [('dense', '/embed', 'SentenceTransformer'), ('sparse', '/embed_sparse', 'SparseEncoder'), \
('multi-vector', '/embed_all', 'MultiVectorEncoder')]
    """

    name: ClassVar[str]
    described: ClassVar[str]
    route: ClassVar[str]
    model_type: ClassVar[str]
    similarity: ClassVar[str]
    vectors: ClassVar[str] = SENTENCE
    reads_logits: ClassVar[bool] = False
    calibrated: ClassVar[bool] = False
    one_vector: ClassVar[bool] = True
    listed_as: ClassVar[str] = "a dense model"
    written_as: ClassVar[str] = ""

    def __init_subclass__(cls, **fields):
        super().__init_subclass__()
        unknown = set(fields) - set(OutputKind.__annotations__)
        if unknown:
            raise TypeError(f"{cls.__name__}: {sorted(unknown)} are not an output kind's class fields")
        for key, value in fields.items():
            setattr(cls, key, value)

    @property
    def trained_pooling(self) -> Optional[str]:
        """The pooling `kbert train --task embed` trains a folder of this kind with (a dense vector's mode); None:
        that task does not train this kind."""
        return None

    def dimensions(self, model, backbone) -> int:
        """The width of the model's vectors (`model` its whole graph, `backbone` the encoder in it)."""
        return int(model.outputs[0].shape[-1])

    def transformer_module(self, max_seq_length: Optional[int] = None, do_lower_case: bool = False) -> Transformer:
        """The `Transformer` module a folder of this kind lists first, its model files in the folder itself."""
        return Transformer("", {"max_seq_length": max_seq_length, "do_lower_case": do_lower_case})

    @abc.abstractmethod
    def modules(self, dimensions: int, dense: Sequence[Dense] = (), normalize: bool = False,
                include_prompt: bool = True) -> List[Module]:
        """The modules after the transformer (its outputs `dimensions` wide) of a pipeline kbert builds, as
        sentence-transformers 6 lays it out, with the `dense` projections and `Normalize` where asked."""

    def build(self, bert, modules: Optional[Sequence[Module]] = None, head_weights: Optional[list] = None,
              name: str = "embedder"):
        """The Keras model from `bert`'s inputs through `modules` (None: `self.modules`, the kind's own)."""
        modules = self.modules(int(bert.outputs[0].shape[-1])) if modules is None else modules
        return apply_modules(list(bert.inputs), bert.outputs[0], modules, name)

    def within_positions(self, longest: int, config_path: str) -> "OutputKind":
        """This kind with its lengths cut to the model's `longest` input (a longer row has no position)."""
        return self

    def check_savable(self, source: str) -> None:
        """A `KbertError` where a model of this kind is not written as a sentence-transformers folder."""

    def written_modules(self, steps: List[Module], pooled: Module) -> List[Module]:
        """The modules found after a model's backbone (`steps`, its pooling where its layer is) as its folder
        lists them."""
        return steps

    @abc.abstractmethod
    def batch_rows(self, embedder, encoded: list, batch_size: int):
        """What a batch of tokenized texts gives (a server's model call)."""

    @abc.abstractmethod
    def predict_rows(self, embedder, texts: List[str], batch_size: int, bucketing: bool = True) -> List[dict]:
        """`kbert predict`'s row of each text (`rows` of what the model gives them)."""

    @abc.abstractmethod
    def rows(self, texts: List[str], results: list) -> List[dict]:
        """`kbert predict`'s row of each text from what the model gave it (`/v1/predict` computes them apart)."""

    def values(self, results: list) -> list:
        """The numbers of `results` (each text's), which must be finite."""
        return results

    @abc.abstractmethod
    def blank_row(self, text: str) -> dict:
        """`kbert predict`'s row of a blank text, which is not embedded."""

    @abc.abstractmethod
    def search(self, embedder, texts: Dict[str, List[str]],
               batch_size: int = 64) -> Tuple[Iterator[np.ndarray], dict]:
        """Exact search of `texts["query"]` against `texts["document"]`: `[SEARCH_BLOCK, documents]` scores of each
        block of queries, and what the vectors hold (a sparse vector's mean terms, ...). Each role gets the
        model's prompt for it (`Embedder.prompt_name_for`)."""

    def export_note(self) -> str:
        """What an exported model's reader must know of this kind's output, beside its inputs' note."""
        return ""

    def export_samples(self, embedder, texts: List[str]) -> Optional[list]:
        """The tokenized rows of `texts` an export is checked on, where the kind needs its own (None: the
        exporter's)."""
        return None


@dataclasses.dataclass(frozen=True)
class DenseOutput(OutputKind, name="dense", described="a dense model", route="/embed",
                  model_type="SentenceTransformer", similarity="cosine", calibrated=True):
    """One vector a text: the hidden states pooled (`mode`: one of `kbert.layers.pooling.POOLING_MODES`, or several
    joined by `+`), then the folder's `Dense` projections and `Normalize`.

    Example:
    >>> output = DenseOutput("mean")
    >>> str(output), [type(module).__name__ for module in output.modules(384, normalize=True)]
    ('mean', ['Pooling', 'Normalize'])
    """

    mode: str = "mean"

    def __str__(self) -> str:  # how a file's metadata names the pooling
        return self.mode

    @property
    def trained_pooling(self) -> Optional[str]:
        return self.mode

    def modules(self, dimensions: int, dense: Sequence[Dense] = (), normalize: bool = False,
                include_prompt: bool = True) -> List[Module]:
        return [Pooling(self.mode, include_prompt, dimensions), *dense, *([Normalize()] if normalize else [])]

    def batch_rows(self, embedder, encoded: list, batch_size: int) -> np.ndarray:
        """The vectors (as the model gives them); a model of several task adapters takes `(adapter, row)` rows,
        each adapter's through its own graph."""
        if not embedder.adapter_models:
            return embedder.encode_tokens(encoded, batch_size, normalize=False)
        vectors = np.empty((len(encoded), embedder.dimensions), np.float32)
        for adapter in dict.fromkeys(adapter for adapter, _ in encoded):
            rows = [index for index, (row_adapter, _) in enumerate(encoded) if row_adapter == adapter]
            vectors[rows] = embedder.for_adapter(adapter).encode_tokens([encoded[index][1] for index in rows],
                                                                        batch_size, normalize=False)
        return vectors

    def predict_rows(self, embedder, texts: List[str], batch_size: int, bucketing: bool = True) -> List[dict]:
        return self.rows(texts, embedder.encode(texts, batch_size, bucketing=bucketing))

    def rows(self, texts: List[str], results) -> List[dict]:
        return [{"text": text, "embedding": vector.tolist()} for text, vector in zip(texts, results)]

    def blank_row(self, text: str) -> dict:
        return {"text": text, "embedding": None}

    def search(self, embedder, texts: Dict[str, List[str]], batch_size: int = 64):
        """By cosine; a model loaded with several task adapters encodes each role with its own
        (`Embedder.for_work`)."""
        documents, queries = (embedder.for_work(role).encode(texts[role], batch_size, normalize=True,
                                                              prompt_name=embedder.prompt_name_for(role))
                              for role in ("document", "query"))
        return (queries[start:start + SEARCH_BLOCK] @ documents.T
                for start in range(0, len(queries), SEARCH_BLOCK)), {}


def as_output(output: "str | OutputKind") -> OutputKind:
    """`output` as an `OutputKind`: a pooling mode's name is a `DenseOutput` of it."""
    return DenseOutput(output) if isinstance(output, str) else output


def score_blocks(score, queries: Sequence) -> Iterator[np.ndarray]:
    """`[SEARCH_BLOCK, documents]` scores of each block of queries, `score(query)` giving one query's row."""
    return (np.stack([score(query) for query in queries[start:start + SEARCH_BLOCK]])
            for start in range(0, len(queries), SEARCH_BLOCK))


def embedding_model(bert, output: "str | OutputKind", modules: Optional[Sequence[Module]] = None,
                    name: str = "embedder", head_weights: Optional[list] = None):
    """The sentence-transformers pipeline as one Keras model: `bert`'s outputs through each of `modules` (the
    modules after the transformer, `kbert.embeddings.modules`) in order, as the `output` kind builds it
    (`OutputKind.build`; a pooling mode's name: a dense vector's). None: the kind's own modules.
    `head_weights`: bge-m3's head's `Linear` (`[kernel, bias]`)."""
    return as_output(output).build(bert, modules, head_weights, name)
