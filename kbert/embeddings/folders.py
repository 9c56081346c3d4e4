"""Sentence-transformers model folders: their modules as a pipeline, read and written without sentence-transformers.

A sentence-transformers folder lists its modules in `modules.json`, in order:
the transformer (the folder itself, or a sub-folder), then the modules after
it, each in its own sub-folder: a `Pooling` (its `config.json` names the
mode), `Dense` projections (their `config.json` and `model.safetensors`), a
`Normalize`; a sparse encoder's `MLMTransformer` and `SpladePooling`, or a
`Router` of its query and document sides; a multi-vector encoder's
`MultiVectorMask` (a PyLate `ColBERT` folder lists its Transformer and Dense only, its other
settings in `config_sentence_transformers.json`; a Stanford ColBERT checkpoint has no `modules.json`
at all, its projection beside the BERT's weights and its settings in `artifact.metadata`: both
`ColBERTSettings`). Each type is one class of `kbert.embeddings.modules`
that reads and writes its sub-folder and adds its Keras layer; this module
reads the list (`read_sentence_transformer`), checks that it is a pipeline
kbert computes, and writes one back (`write_modules`) as sentence-transformers
6 loads it, module for module. The transformer's `sentence_bert_config.json`
gives the longest input (`max_seq_length`), and
`config_sentence_transformers.json` the prompts put before texts (`prompts`,
by name, and the one used when none is asked for, `default_prompt_name`).
"""

from __future__ import annotations

import dataclasses
import os
import string
from typing import Dict, List, Optional, Sequence, Tuple

from kbert.embeddings.kinds import DenseOutput, OutputKind, as_output
from kbert.embeddings.files import (check_tensor, flag_setting, json_file, json_object, model_max_length,
                                    module_tensors, write_json)
from kbert.embeddings.modules import (SENTENCE, TOKENS, TRANSFORMER_SETTINGS, Dense, Module, MultiVectorMask,
                                      Normalize, Pooling, Router, SpladePooling, Transformer, read_module,
                                      write_modules_file)
from kbert.embeddings.multi_vector import MultiVectorOutput, QueryExpansion
from kbert.embeddings.sparse import SparseOutput
from kbert.errors import CheckpointError, is_whole_number
from kbert.io import ModelFolder
from kbert.models.config import read_json_object

MODULES_FILE = "modules.json"


@dataclasses.dataclass
class SentenceTransformerSpec:
    """What a sentence-transformers folder holds.

    Args:
        transformer: the folder of the transformer's `config.json` and weights.
        output: what the pipeline gives (`kbert.embeddings.kinds`): a pooled vector (`DenseOutput` of a pooling
            mode), a sparse encoder's SPLADE pooling of its masked-LM transformer's logits (`SparseOutput`), or a
            multi-vector encoder's token vectors (`MultiVectorOutput`).
        modules: the modules after the transformer, in the folder's order (`kbert.embeddings.modules`): each
            adds its Keras layer in turn.
        max_seq_length: the longest input in tokens (None: the model's own limit).
        do_lower_case: sentence-transformers' own lower-casing of the text before tokenizing.
        prompts: texts put before the inputs, by name (e5's `{"query": "query: ", "document": "passage: "}`).
        default_prompt_name: the prompt used when none is asked for (None: no prompt).
        include_prompt: whether the pooling counts the prompt's tokens (the Pooling's `include_prompt`).
        static_query: an inference-free sparse encoder's `Router` (its query side a weight table; the other
            fields describe its document side), or None.
        markers: tokens its prompts begin with that the tokenizer must take as one token each (a PyLate folder's
            `[Q] ` or `[unused0]`; `ColBERTSettings`).
    """

    transformer: str
    output: OutputKind
    modules: List[Module]
    max_seq_length: Optional[int]
    do_lower_case: bool = False
    prompts: Dict[str, str] = dataclasses.field(default_factory=dict)
    default_prompt_name: Optional[str] = None
    include_prompt: bool = True
    static_query: Optional[Router] = None
    markers: Tuple[str, ...] = ()

    @property
    def normalize(self) -> bool:
        """Whether the vectors (each token's) are scaled to unit length."""
        return any(isinstance(module, Normalize) for module in self.modules)


SETTINGS_FILE = "config_sentence_transformers.json"


#: The `model_type`s of `config_sentence_transformers.json` that embed texts (dense, sparse and multi-vector;
#: PyLate's `ColBERT`, read as sentence-transformers 6 reads it: `ColBERTSettings`).
EMBEDDING_MODEL_TYPES = (None, "SentenceTransformer", "SparseEncoder", "MultiVectorEncoder", "ColBERT")


def is_sentence_transformer(path: "str | os.PathLike[str]") -> bool:
    """Whether `path` is a sentence-transformers embedding folder, dense, sparse or multi-vector: it has
    `modules.json`, and its `config_sentence_transformers.json` names no other model type (sentence-transformers 6
    writes a `CrossEncoder`'s folder with modules too); or a Stanford ColBERT checkpoint, which
    sentence-transformers 6 reads as a multi-vector encoder (`is_stanford_colbert`)."""
    folder = ModelFolder.of(path)
    if not folder.has(MODULES_FILE):
        return is_stanford_colbert(folder)
    return model_type(folder) in EMBEDDING_MODEL_TYPES


def is_stanford_colbert(path: "str | os.PathLike[str]") -> bool:
    """Whether `path` is a checkpoint of Stanford's ColBERT (colbert-ir/colbertv2.0's layout): no `modules.json`,
    and `HF_ColBERT` among its `config.json`'s `architectures`."""
    folder = ModelFolder.of(path)
    if folder.has(MODULES_FILE) or not folder.has("config.json"):
        return False
    architectures = folder.parsed("config.json", read_json_object).get("architectures")
    return isinstance(architectures, list) and STANFORD_ARCHITECTURE in architectures


def model_type(path: "str | os.PathLike[str]") -> Optional[str]:
    """The `model_type` of a folder's `config_sentence_transformers.json` (`SentenceTransformer`, `CrossEncoder`,
    `SparseEncoder`, ...), None where it names none."""
    return _model_type_in(settings(path))


def _model_type_in(config: dict) -> Optional[str]:
    """The `model_type` a folder's `config_sentence_transformers.json` (`config`) names, None where it names none."""
    kind = config.get("model_type")
    return kind if isinstance(kind, str) else None


def settings(path: "str | os.PathLike[str]") -> dict:
    """A folder's `config_sentence_transformers.json` (an object), or {} where it has none."""
    folder = ModelFolder.of(path)
    return folder.parsed(SETTINGS_FILE, json_object) if folder.has(SETTINGS_FILE) else {}


def read_modules(folder: str) -> List[Module]:
    """The modules `folder`'s `modules.json` lists, in their order (`idx`), each read by its type's class
    (`kbert.embeddings.modules.MODULE_TYPES`); a type kbert does not compute is refused by name, never
    skipped."""
    modules_file = os.path.join(folder, MODULES_FILE)
    listed = json_file(modules_file)
    if not isinstance(listed, list) or not listed or not all(isinstance(module, dict) for module in listed):
        raise CheckpointError(f"{modules_file}: expected a list of modules, each an object with its type and path")
    return [read_module(entry.get("type"), entry.get("name"), folder, entry.get("path", ""), modules_file)
            for entry in sorted(listed, key=lambda entry: _index(entry, modules_file))]


def read_sentence_transformer(folder: "str | os.PathLike[str]") -> SentenceTransformerSpec:
    """The modules of the sentence-transformers folder `folder` as one pipeline kbert computes, checked; a
    `CheckpointError` names the file and what was expected."""
    root = ModelFolder.of(folder)  # its files read once, here and by whoever passed it
    folder = root.path
    modules_file, settings_file, folder_settings = root.file(MODULES_FILE), root.file(SETTINGS_FILE), settings(root)
    kind = _model_type_in(folder_settings)
    stanford = is_stanford_colbert(root)
    modules = _stanford_modules(folder) if stanford else read_modules(folder)
    prompts, default_prompt_name = _prompts(settings_file, folder_settings)
    colbert = _stanford(folder) if stanford else \
        _pylate(settings_file, folder_settings, prompts) if _is_pylate(folder_settings) else None
    if colbert:  # its Transformer and Dense: its mask and normalisation were PyLate's (or ColBERT's) code
        modules, prompts, kind = colbert.completed(modules), colbert.prompts, "MultiVectorEncoder"
    router = modules[0] if isinstance(modules[0], Router) else None
    if any(isinstance(module, Router) for module in modules[1:]):
        raise CheckpointError(f"{modules_file}: a Router after the first module; kbert reads an inference-free "
                              "sparse encoder's Router as its only module")
    steps = [*router.document, *modules[1:]] if router else modules
    if not isinstance(steps[0], Transformer) or any(isinstance(module, Transformer) for module in steps[1:]):
        raise CheckpointError(f"{modules_file}: expected one Transformer (or MLMTransformer), first; kbert reads "
                              f"the modules after it ({', '.join(type(module).__name__ for module in steps)})")
    transformer, steps = steps[0], steps[1:]
    config_path = next((path for path in (os.path.join(transformer.path, TRANSFORMER_SETTINGS),
                                          os.path.join(folder, TRANSFORMER_SETTINGS)) if os.path.isfile(path)), None)
    # the Transformer module read its own (a Stanford checkpoint's has none: the folder's, where it has one)
    own = config_path == os.path.join(transformer.path, TRANSFORMER_SETTINGS)
    config = transformer.settings if own else json_object(config_path) if config_path else {}
    if colbert:  # its lengths and expansion are the folder's settings' (sentence-transformers 6 moves them here)
        config, config_path = {**config, **colbert.transformer}, colbert.path
    output = _output(steps, transformer, config, config_path, modules_file, kind)
    if router and not output.reads_logits:
        raise CheckpointError(f"{modules_file}: a Router's query route of static weights needs SPLADE (an "
                              "MLMTransformer and a SpladePooling) as its document route")
    include_prompt = all(module.include_prompt for module in steps if isinstance(module, Pooling))
    # sentence-transformers 6.3 writes a Transformer's max_seq_length only as its tokenizer's model_max_length
    max_seq_length = _length(config, "max_seq_length", config_path) if config.get("max_seq_length") is not None \
        else model_max_length(transformer.path)
    return SentenceTransformerSpec(transformer.path, output, steps, max_seq_length,
                                   flag_setting(config, "do_lower_case", False, config_path), prompts,
                                   default_prompt_name, include_prompt, router, colbert.markers if colbert else ())


@dataclasses.dataclass(frozen=True)
class ColBERTSettings:
    """A PyLate ColBERT folder's own settings (`model_type` ColBERT in `config_sentence_transformers.json`), or a
    Stanford ColBERT checkpoint's (its `artifact.metadata`), read as sentence-transformers 6 reads such a folder.

    Args:
        transformer: the multi-vector settings of its transformer: `document_length`, and `query_expansion` (PyLate
            fills each query with `[MASK]` up to its `query_length`; `attend_to_expansion_tokens`;
            `do_query_expansion` false: none).
        prompts: its prompts, the query's and the document's beginning with their marker (`query_prefix`,
            `document_prefix`: PyLate inserts the marker's token after `[CLS]`, which a prompt of it does where
            the tokenizer takes the marker as one token).
        markers: the markers, which the tokenizer must take as one token each (`TokenizerJson.add_markers`).
        skiplist_words: the tokens left out of a document's scoring (PyLate's default: the punctuation).
        path: the file they were read from (named in errors).
    """

    transformer: dict
    prompts: Dict[str, str]
    markers: Tuple[str, ...]
    skiplist_words: Tuple[str, ...]
    path: str

    def completed(self, modules: Sequence[Module]) -> List[Module]:
        """A PyLate folder's modules (its Transformer and Dense: PyLate 3 masked and normalised in its own code)
        as sentence-transformers 6 completes them: each projection on the token vectors, then a
        `MultiVectorMask` of its skiplist and a token-level `Normalize`."""
        modules = [dataclasses.replace(module, input_name=TOKENS) if isinstance(module, Dense) else module
                   for module in modules]
        return [*modules, MultiVectorMask(self.skiplist_words, ("document",)), Normalize(TOKENS)]


def _is_pylate(config: dict) -> bool:
    """Whether a folder's `config_sentence_transformers.json` (`config`) is PyLate's: `model_type` ColBERT, or
    (saved before sentence-transformers wrote a `model_type`) PyLate's `query_prefix` or `document_prefix`."""
    return config.get("model_type") == "ColBERT" or \
        ("model_type" not in config and any(key in config for key in ("query_prefix", "document_prefix")))


def _pylate(path: str, config: dict, prompts: Dict[str, str]) -> ColBERTSettings:
    """The PyLate settings of the `config_sentence_transformers.json` at `path` (`config`, beside its `prompts`),
    checked."""
    prompts, markers = dict(prompts), []
    for key, role in (("query_prefix", "query"), ("document_prefix", "document")):
        if key in config:
            marker = config[key] or ""
            if not isinstance(marker, str):
                raise CheckpointError(f"{path}: {key} {marker!r}: expected the marker text put before a {role}")
            markers.append(marker)
            prompts[role] = marker + (prompts.get(role) or "").removeprefix(marker)
    transformer = {key: config[key] for key in ("query_length", "document_length", "query_expansion")
                   if key in config and (config[key] is not None or key == "query_expansion")}
    if "query_expansion" not in transformer:
        attend = config.get("attend_to_expansion_tokens", config.get("attend_to_mask_tokens"))
        length = transformer.pop("query_length", None) or 32  # ColBERT's queries: 32 tokens
        transformer["query_expansion"] = None if config.get("do_query_expansion") is False else \
            {"strategy": "fixed", "attend": bool(attend), "length": length}
    words = config.get("skiplist_words")
    words = list(string.punctuation) if words is None else words
    if not isinstance(words, list) or not all(isinstance(word, str) for word in words):
        raise CheckpointError(f"{path}: skiplist_words {words!r}: expected a list of tokens")
    return ColBERTSettings(transformer, prompts, tuple(marker for marker in markers if marker.strip()), tuple(words),
                           path)


STANFORD_ARCHITECTURE, STANFORD_SETTINGS = "HF_ColBERT", "artifact.metadata"


def _stanford(folder: str) -> ColBERTSettings:
    """A Stanford ColBERT checkpoint's settings (its `artifact.metadata`; ColBERT's defaults where it has none, as
    sentence-transformers 6 takes them): the `[unused0]` and `[unused1]` markers, queries always filled with
    `[MASK]` to `query_maxlen` (32), documents cut at `doc_maxlen`, their punctuation left out (`mask_punctuation`)."""
    path = os.path.join(folder, STANFORD_SETTINGS)
    metadata = json_object(path) if os.path.isfile(path) else {}
    prompts = {}
    for key, role, default in (("query_token_id", "query", "[unused0]"), ("doc_token_id", "document", "[unused1]")):
        marker = metadata.get(key) or default
        if not isinstance(marker, str):
            raise CheckpointError(f"{path}: {key} {marker!r}: expected the marker token put before a {role}")
        prompts[role] = marker + " "
    transformer = {"query_expansion": {"strategy": "fixed", "attend": flag_setting(metadata, "attend_to_mask_tokens",
                                                                                   False, path),
                                       "length": metadata.get("query_maxlen") or 32}}
    if metadata.get("doc_maxlen") is not None:
        transformer["document_length"] = metadata["doc_maxlen"]
    words = string.punctuation if flag_setting(metadata, "mask_punctuation", True, path) else ()
    return ColBERTSettings(transformer, prompts, tuple(prompts.values()), tuple(words), path)


def _stanford_modules(folder: str) -> List[Module]:
    """A Stanford ColBERT checkpoint's Transformer (the folder, its BERT's tensors under `bert.`) and its projection
    (the tensor `linear.weight` `[dim, hidden]` beside them, no bias)."""
    hidden_size = json_object(os.path.join(folder, "config.json")).get("hidden_size")
    file, tensors = module_tensors(folder, ("linear.weight",))
    weight = tensors.get("linear.weight")
    dim = weight.shape[0] if weight is not None and weight.ndim == 2 else 128  # ColBERT's usual dim, for the message
    check_tensor(file, "linear.weight", weight, (dim, hidden_size), "ColBERT's projection [dim, hidden_size]")
    return [Transformer(folder), Dense([weight.T], None, TOKENS, folder)]


def _output(steps: Sequence[Module], transformer: Transformer, config: dict, config_path: Optional[str],
            modules_file: str, kind: Optional[str]) -> OutputKind:
    """What the modules after the transformer give, checked to be a pipeline kbert computes: one pooling (a
    `Pooling`, SPLADE's exactly on a masked-LM transformer, whose logits it pools), or a multi-vector encoder's
    token vectors (a `MultiVectorMask`, its `Dense` and `Normalize` on each token's vector); a `Dense` or
    `Normalize` only on the vectors the pooling gives (after it), and none after SPLADE's."""
    if transformer.causal_lm:
        raise CheckpointError(f"{modules_file}: a text-generation Transformer gives a causal LM's logits (a "
                              "CrossEncoder's, scored by a LogitScore); an embedding model's gives hidden states")
    poolings = [module for module in steps if isinstance(module, (Pooling, SpladePooling, MultiVectorMask))]
    if len(poolings) != 1:
        raise CheckpointError(f"{modules_file}: expected one Pooling, SpladePooling or MultiVectorMask module after "
                              f"the Transformer, found {len(poolings)}")
    pooled = poolings[0]
    multi_vector = isinstance(pooled, MultiVectorMask)
    if multi_vector != (kind == "MultiVectorEncoder"):
        raise CheckpointError(f"{modules_file}: " + (
            "a MultiVectorMask belongs to a MultiVectorEncoder; expected model_type MultiVectorEncoder in "
            f"{SETTINGS_FILE}" if multi_vector else
            f"{SETTINGS_FILE} names a MultiVectorEncoder: expected a MultiVectorMask module, and no Pooling"))
    splade = isinstance(pooled, SpladePooling)
    if splade != transformer.mlm:
        raise CheckpointError(f"{modules_file}: " + ("a SpladePooling pools a masked-LM's logits: expected an "
                                                     "MLMTransformer before it" if splade else
                                                     "an MLMTransformer gives vocabulary logits: expected a "
                                                     "SpladePooling after it"))
    if splade and pooled is not steps[-1]:
        raise CheckpointError(f"{modules_file}: a module after a SpladePooling is not one kbert computes (a sparse "
                              "vector ends at its pooling)")
    if sum(isinstance(module, Normalize) for module in steps) > 1:
        raise CheckpointError(f"{modules_file}: Normalize more than once; kbert computes one (a unit vector "
                              "normalised again is the same): list it once")
    expected = TOKENS if multi_vector else SENTENCE
    for index, module in enumerate(steps):
        if not isinstance(module, (Dense, Normalize)):
            continue
        if module.input_name != expected:
            raise CheckpointError(f"{modules_file}: a {type(module).__name__} reads the {module.input_name}; kbert "
                                  f"computes it on the {expected} here (module_input_name)")
        if not multi_vector and index < steps.index(pooled):
            raise CheckpointError(f"{modules_file}: a {type(module).__name__} before the {type(pooled).__name__} "
                                  "reads the pooled vector that is not there yet; expected it after the pooling")
    if multi_vector:
        return _multi_vector(config, config_path, pooled)
    return SparseOutput(pooled.strategy, pooled.activation) if splade else DenseOutput(pooled.mode)


def _index(module: dict, modules_file: str) -> int:
    index = module.get("idx", 0)
    if not isinstance(index, int) or isinstance(index, bool):  # any int orders; sentence-transformers starts at 0
        raise CheckpointError(f"{modules_file}: module {module.get('name')!r}: idx {index!r}, expected a whole number")
    return index


def _length(config: dict, key: str, path: Optional[str]) -> Optional[int]:
    """A length of `sentence_bert_config.json` (`max_seq_length`, `query_length`, ...): a positive whole number,
    or absent (null)."""
    value = config.get(key)
    if value is not None and not is_whole_number(value):
        raise CheckpointError(f"{path}: {key} {value!r}: expected a whole number of tokens, 1 or more "
                              "(or null for the model's own limit)")
    return value


def _multi_vector(config: dict, config_path: Optional[str], mask: MultiVectorMask) -> MultiVectorOutput:
    """A multi-vector encoder's settings: the Transformer's `query_length`, `document_length` and
    `query_expansion` (`config`, its `sentence_bert_config.json`) and the MultiVectorMask's skiplist, checked as
    sentence-transformers 6 checks them."""
    query_length = _length(config, "query_length", config_path)
    expansion = _expansion(config.get("query_expansion"), config_path)
    if expansion and query_length is not None and query_length < expansion.length:
        raise CheckpointError(f"{config_path}: query_length {query_length} is below query_expansion's length "
                              f"{expansion.length}, the tokens a query has at least")
    return MultiVectorOutput(query_length, _length(config, "document_length", config_path), expansion,
                             mask.skiplist_words, mask.skiplist_tasks)


def _expansion(value, path: Optional[str]) -> Optional[QueryExpansion]:
    """`query_expansion`: null, or an object of `strategy` (fixed or min), `length` (1 or more), `attend`
    (true or false) and `token` (a token or null)."""
    if value is None:
        return None
    expected = ("expected null or an object of strategy (fixed or min), length (tokens, 1 or more), attend (true "
                "or false) and token (a token, or null for [MASK])")
    if not isinstance(value, dict) or set(value) - {"strategy", "length", "attend", "token"}:
        raise CheckpointError(f"{path}: query_expansion {value!r}: {expected}")
    expansion = QueryExpansion(value.get("strategy"), value.get("length"), value.get("attend", False),
                               value.get("token"))
    if expansion.strategy not in ("fixed", "min") or not is_whole_number(expansion.length) or \
            not isinstance(expansion.attend, bool) or not isinstance(expansion.token, (str, type(None))):
        raise CheckpointError(f"{path}: query_expansion {value!r}: {expected}")
    return expansion


def _prompts(path: str, config: dict) -> Tuple[Dict[str, str], Optional[str]]:
    """The prompts by name and the default one's name in the `config_sentence_transformers.json` at `path`
    (`config`), checked as sentence-transformers checks them."""
    prompts, default = config.get("prompts") or {}, config.get("default_prompt_name")
    if not isinstance(prompts, dict) or not all(isinstance(text, str) for text in prompts.values()):
        raise CheckpointError(f"{path}: prompts: expected an object of prompt names and their texts, got {prompts!r}")
    if default is not None and not isinstance(default, str):
        raise CheckpointError(f"{path}: default_prompt_name {default!r}: expected the name of one of its prompts "
                              "(a string) or null")
    if default is not None and default not in prompts:
        raise CheckpointError(f"{path}: default_prompt_name {default!r} is not one of its prompts "
                              f"({', '.join(map(repr, prompts)) or 'none'})")
    return prompts, default


def write_modules(folder: str, output: "str | OutputKind", dimensions: int, dense: Sequence[Dense], normalize: bool,
                  max_seq_length: int, prompts: Optional[Dict[str, str]] = None,
                  default_prompt_name: Optional[str] = None, do_lower_case: bool = False,
                  include_prompt: bool = True) -> None:
    """A sentence-transformers folder's module files beside the transformer's (`dimensions` wide, its outputs),
    for the pipeline kbert builds: the transformer, the `output`'s modules (a pooling mode's name: a dense
    vector's) with the `dense` projections in order, and `Normalize` where asked (`write_pipeline`)."""
    output = as_output(output)
    modules = output.modules(dimensions, dense, normalize, include_prompt)
    write_pipeline(folder, [output.transformer_module(max_seq_length, do_lower_case), *modules], output, prompts,
                   default_prompt_name)


def write_pipeline(folder: str, modules: Sequence[Module], output: OutputKind,
                   prompts: Optional[Dict[str, str]] = None, default_prompt_name: Optional[str] = None) -> None:
    """`modules` (an `output`'s) written as a sentence-transformers folder (`modules.json`, each module's
    sub-folder; the transformer's own files are the caller's), and `config_sentence_transformers.json` where there
    are `prompts` or the model is not a dense one: its kind's `model_type` (`SparseEncoder`, `MultiVectorEncoder`,
    as sentence-transformers 5 and 6 name them) and similarity."""
    write_modules_file(folder, modules)
    if prompts or output.model_type != DenseOutput.model_type:
        write_json(os.path.join(folder, SETTINGS_FILE), {"model_type": output.model_type, "prompts": prompts or {},
                                                         "default_prompt_name": default_prompt_name,
                                                         "similarity_fn_name": output.similarity})
