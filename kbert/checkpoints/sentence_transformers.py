"""Sentence-transformers model folders: what their modules say, read without sentence-transformers itself.

A sentence-transformers folder lists its modules in `modules.json`, in order:
the transformer (the folder itself, or a sub-folder), a `Pooling` (its
`config.json` names the mode), optionally a `Dense` projection (its
`config.json` and `model.safetensors`) and a `Normalize`; its
`sentence_bert_config.json` gives the longest input (`max_seq_length`), and
`config_sentence_transformers.json` the prompts put before texts (`prompts`,
by name, and the one used when none is asked for, `default_prompt_name`).
Versions 2 to 6 of sentence-transformers wrote the module types under
different names (`sentence_transformers.models.Pooling`,
`sentence_transformers.models.pooling.Pooling.Pooling`, ...): a type is
recognised by its last name. Weights are read from safetensors; a `Dense`
module saved as `pytorch_model.bin` (sentence-transformers before 3) is read by
`kbert.checkpoints.torch_pickle`, which runs none of its pickle's code.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from kbert.errors import CheckpointError, is_whole_number
from kbert.layers.pooling import SPLADE_ACTIVATIONS, SPLADE_STRATEGIES, pooling_modes

MODULES_FILE = "modules.json"
# sentence-transformers' pooling flags, in the order it concatenates the modes they set, and kbert's names for them
_POOLING_FLAGS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                  "pooling_mode_mean_tokens": "mean", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
                  "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
# the one mode sentence-transformers 6's `pooling_mode` names otherwise than kbert
_ST_MODE_NAMES = {"mean_sqrt_len_tokens": "mean_sqrt_len"}
_KBERT_MODE_NAMES = {ours: theirs for theirs, ours in _ST_MODE_NAMES.items()}  # and back
# torch activations a Dense module names, and Keras's
_ACTIVATIONS = {"Tanh": "tanh", "Identity": None, "ReLU": "relu", "GELU": "gelu", "Sigmoid": "sigmoid"}
#: sentence-transformers' names for the vectors a module reads: a text's pooled one, or each token's.
_SENTENCE, _TOKENS = "sentence_embedding", "token_embeddings"


@dataclasses.dataclass
class DenseSpec:
    """A `Dense` module: its folder, sizes, bias and activation (a Keras name, or None)."""

    path: str
    in_features: int
    out_features: int
    bias: bool
    activation: Optional[str]
    input_name: str = _SENTENCE  # "token_embeddings": a multi-vector encoder's projection of each token


@dataclasses.dataclass(frozen=True)
class SpladeSpec:
    """A `SpladePooling` module (a sparse encoder's): how each token's logits are activated and pooled
    (`kbert.layers.pooling.SpladePooling`)."""

    strategy: str = "max"
    activation: str = "relu"

    def __str__(self) -> str:  # how a file's metadata names the pooling: "splade max relu"
        return f"splade {self.strategy} {self.activation}"


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
class MultiVectorSpec:
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
    """

    query_length: Optional[int] = None
    document_length: Optional[int] = None
    expansion: Optional[QueryExpansion] = None
    skiplist_words: Tuple[str, ...] = ()
    skiplist_tasks: Tuple[str, ...] = ("document",)
    skip_first: bool = False

    def __str__(self) -> str:  # how a file's metadata names the pooling
        return "multi-vector"


@dataclasses.dataclass(frozen=True)
class StaticQuerySpec:
    """An inference-free sparse encoder's query side: a `Router` whose `query` route is one
    `SparseStaticEmbedding` (a weight per vocabulary entry, given to each token a query holds) and whose `document`
    route is SPLADE (opensearch's neural sparse `doc-v3` models).

    Args:
        path: the `SparseStaticEmbedding`'s folder (its tokenizer files, `model.safetensors` and `config.json`).
        frozen: whether training leaves its weights as they are (its config's `frozen`).
        default_route: the route of a text given no role (`query` or `document`; the Router's `default_route`).
    """

    path: str
    frozen: bool = False
    default_route: str = "document"


@dataclasses.dataclass
class SentenceTransformerSpec:
    """What a sentence-transformers folder holds.

    Args:
        transformer: the folder of the transformer's `config.json` and weights.
        pooling: the pooling mode (`kbert.layers.pooling.POOLING_MODES`, several joined by `+`), a sparse
            encoder's SPLADE pooling of its masked-LM transformer's logits, or a multi-vector encoder's token
            vectors (`MultiVectorSpec`).
        dense: the projections after the pooling (a multi-vector encoder's: of each token's vector), in order.
        normalize: whether the vectors (each token's) are scaled to unit length last.
        max_seq_length: the longest input in tokens (None: the model's own limit).
        do_lower_case: sentence-transformers' own lower-casing of the text before tokenizing.
        prompts: texts put before the inputs, by name (e5's `{"query": "query: ", "document": "passage: "}`).
        default_prompt_name: the prompt used when none is asked for (None: no prompt).
        include_prompt: whether the pooling counts the prompt's tokens (the Pooling's `include_prompt`).
        static_query: an inference-free sparse encoder's query side (`StaticQuerySpec`; the other fields describe
            its document side), or None.
    """

    transformer: str
    pooling: "str | SpladeSpec | MultiVectorSpec"
    dense: list
    normalize: bool
    max_seq_length: Optional[int]
    do_lower_case: bool = False
    prompts: Dict[str, str] = dataclasses.field(default_factory=dict)
    default_prompt_name: Optional[str] = None
    include_prompt: bool = True
    static_query: Optional[StaticQuerySpec] = None


SETTINGS_FILE = "config_sentence_transformers.json"


#: The `model_type`s of `config_sentence_transformers.json` that embed texts (dense, sparse and multi-vector;
#: PyLate's `ColBERT`, whose folders `read_sentence_transformer` refuses saying how to convert them).
EMBEDDING_MODEL_TYPES = (None, "SentenceTransformer", "SparseEncoder", "MultiVectorEncoder", "ColBERT")


def is_sentence_transformer(path: "str | os.PathLike[str]") -> bool:
    """Whether `path` is a sentence-transformers embedding folder, dense, sparse or multi-vector: it has `modules.json`, and
    its `config_sentence_transformers.json` names no other model type (sentence-transformers 6 writes a
    `CrossEncoder`'s folder with modules too)."""
    return os.path.isfile(os.path.join(os.fspath(path), MODULES_FILE)) and \
        model_type(path) in EMBEDDING_MODEL_TYPES


def model_type(path: "str | os.PathLike[str]") -> Optional[str]:
    """The `model_type` of a folder's `config_sentence_transformers.json` (`SentenceTransformer`, `CrossEncoder`,
    `SparseEncoder`, ...), None where it names none."""
    kind = settings(path).get("model_type")
    return kind if isinstance(kind, str) else None


def settings(path: "str | os.PathLike[str]") -> dict:
    """A folder's `config_sentence_transformers.json` (an object), or {} where it has none."""
    file = os.path.join(os.fspath(path), SETTINGS_FILE)
    return _object(file) if os.path.isfile(file) else {}


def read_sentence_transformer(folder: "str | os.PathLike[str]") -> SentenceTransformerSpec:
    """The modules of the sentence-transformers folder `folder`, checked; a `CheckpointError` names the file
    and what was expected. Each module is read by its type's reader (`MODULE_READERS`); a type kbert does not
    compute is refused by name, never skipped."""
    folder = os.fspath(folder)
    if model_type(folder) == "ColBERT":
        raise CheckpointError(f"{os.path.join(folder, SETTINGS_FILE)}: model_type ColBERT, a PyLate folder (its "
                              "[Q]/[D] prefixes inserted as tokens, its masking and normalisation inside PyLate), "
                              "which kbert does not read; sentence-transformers 6 loads it as a MultiVectorEncoder "
                              "and save() writes the folder kbert reads")
    modules_file = os.path.join(folder, MODULES_FILE)
    modules = _json(modules_file)
    if not isinstance(modules, list) or not modules or not all(isinstance(module, dict) for module in modules):
        raise CheckpointError(f"{modules_file}: expected a list of modules, each an object with its type and path")
    found = {"transformer": None, "mlm": False, "pooling": None, "include_prompt": True, "dense": [],
             "normalize": None, "mask": None, "static_query": None}
    for module in sorted(modules, key=lambda entry: _index(entry, modules_file)):
        _read_module(found, module.get("type"), module.get("name"), folder, module.get("path", ""), modules_file)
    transformer = found["transformer"]
    config_path = next((path for path in (os.path.join(transformer, "sentence_bert_config.json"),
                                          os.path.join(folder, "sentence_bert_config.json")) if os.path.isfile(path)),
                       None)
    config = _object(config_path) if config_path else {}
    if found["mask"] is not None:
        found["pooling"] = _multi_vector(config, config_path, found["mask"])
    _check_pipeline(found, modules_file, model_type(folder))
    prompts, default_prompt_name = _prompts(os.path.join(folder, SETTINGS_FILE))
    return SentenceTransformerSpec(transformer, found["pooling"], found["dense"], found["normalize"] is not None,
                                   _length(config, "max_seq_length", config_path),
                                   _flag(config, "do_lower_case", False, config_path), prompts, default_prompt_name,
                                   found["include_prompt"], found["static_query"])


def _read_module(found: dict, kind, name, folder: str, path, listed_in: str) -> None:
    """The module of type `kind` (read by its last name) at `path` inside `folder`, as `listed_in` lists it."""
    place = module_path(folder, path, listed_in)  # a path out of the folder is refused first, whatever its type
    reader = MODULE_READERS.get(str(kind or "").rsplit(".", 1)[-1])
    if reader is None:
        raise CheckpointError(f"{listed_in}: module {name!r} of type {kind!r} is not one kbert reads "
                              f"({', '.join(MODULE_READERS)})")
    reader(found, place)


def _check_pipeline(found: dict, modules_file: str, kind: Optional[str]) -> None:
    """The modules make one of the pipelines kbert computes: a transformer and a pooling, SPLADE's pooling
    exactly on a masked-LM transformer (its logits are what it pools), or a multi-vector encoder's token vectors
    (a `MultiVectorMask`, and its `Dense` and `Normalize` on each token's vector)."""
    if found["transformer"] is None or found["pooling"] is None:
        raise CheckpointError(f"{modules_file}: expected a Transformer (or MLMTransformer) and a Pooling, "
                              "SpladePooling or MultiVectorMask module")
    multi_vector = isinstance(found["pooling"], MultiVectorSpec)
    if multi_vector != (kind == "MultiVectorEncoder"):
        raise CheckpointError(f"{modules_file}: " + (
            "a MultiVectorMask belongs to a MultiVectorEncoder; expected model_type MultiVectorEncoder in "
            f"{SETTINGS_FILE}" if multi_vector else
            f"{SETTINGS_FILE} names a MultiVectorEncoder: expected a MultiVectorMask module, and no Pooling"))
    inputs = {spec.input_name for spec in found["dense"]} | ({found["normalize"]} if found["normalize"] else set())
    expected = _TOKENS if multi_vector else _SENTENCE
    if inputs - {expected}:
        raise CheckpointError(f"{modules_file}: a Dense or Normalize reads {', '.join(sorted(inputs - {expected}))}"
                              f"; kbert computes them on the {expected} here (module_input_name)")
    splade = isinstance(found["pooling"], SpladeSpec)
    if splade != found["mlm"]:
        raise CheckpointError(f"{modules_file}: " + ("a SpladePooling pools a masked-LM's logits: expected an "
                                                     "MLMTransformer before it" if splade else
                                                     "an MLMTransformer gives vocabulary logits: expected a "
                                                     "SpladePooling after it"))
    if splade and (found["dense"] or found["normalize"] is not None):
        raise CheckpointError(f"{modules_file}: a Dense or Normalize after a SpladePooling is not one kbert "
                              "computes (a sparse vector ends at its pooling)")
    if found["static_query"] is not None and not splade:
        raise CheckpointError(f"{modules_file}: a Router's query route of static weights needs SPLADE (an "
                              "MLMTransformer and a SpladePooling) as its document route")


def _read_transformer(found: dict, path: str, mlm: bool = False) -> None:
    """A Transformer (an MLMTransformer: `mlm`): sentence-transformers 6 marks a masked-LM one by its
    `transformer_task` `fill-mask` instead; a task whose outputs are not hidden states or logits is refused."""
    if found["transformer"] is not None:
        raise CheckpointError(f"{path}: a second transformer module; kbert reads one")
    config_path = os.path.join(path, "sentence_bert_config.json")
    task = (_object(config_path) if os.path.isfile(config_path) else {}).get("transformer_task", "feature-extraction")
    if task not in ("feature-extraction", "fill-mask"):
        raise CheckpointError(f"{config_path}: transformer_task {task!r}: kbert reads feature-extraction (hidden "
                              "states) and fill-mask (a masked-LM's logits) transformers")
    found.update(transformer=path, mlm=mlm or task == "fill-mask")


def _read_router(found: dict, path: str) -> None:
    """A `Router` (its `router_config.json`) of the one form kbert computes: inference-free SPLADE, a `query` route
    of one `SparseStaticEmbedding` and a `document` route of SPLADE's modules, read into `found` as if listed in
    `modules.json`. Any other form is refused, naming its routes."""
    config_path = os.path.join(path, "router_config.json")
    if found["static_query"] is not None:
        raise CheckpointError(f"{config_path}: a second Router; kbert reads one")
    config = _object(config_path)
    types, structure, parameters = (config.get(key) for key in ("types", "structure", "parameters"))
    if not isinstance(types, dict) or not isinstance(structure, dict) or not isinstance(parameters or {}, dict):
        raise CheckpointError(f"{config_path}: expected objects types, structure and parameters, as "
                              "sentence-transformers' Router writes them")
    parameters = parameters or {}
    query = structure.get("query")
    static = isinstance(query, list) and len(query) == 1 and \
        str(types.get(query[0], "")).rsplit(".", 1)[-1] == "SparseStaticEmbedding"
    if set(structure) != {"query", "document"} or not static or parameters.get("route_mappings"):
        raise CheckpointError(f"{config_path}: a Router of the routes {', '.join(map(repr, structure))}; kbert "
                              "computes inference-free SPLADE: the routes query (one SparseStaticEmbedding) and "
                              "document (an MLMTransformer and a SpladePooling), without route_mappings")
    # sentence-transformers' fallback where none is named: the first route, unless allow_empty_key is false
    default_route = parameters.get("default_route") or (next(iter(structure))
                                                        if parameters.get("allow_empty_key", True) else None)
    if default_route not in ("query", "document"):
        raise CheckpointError(f"{config_path}: default_route {default_route!r}: expected query or document")
    if not isinstance(structure["document"], list):
        raise CheckpointError(f"{config_path}: structure.document: expected a list of module names")
    for name in structure["document"]:
        _read_module(found, types.get(name), name, path, name, config_path)
    query_path = module_path(path, query[0], config_path)
    found["static_query"] = StaticQuerySpec(query_path, _flag(_module_config(query_path), "frozen", False,
                                                              os.path.join(query_path, "config.json")),
                                            default_route)


def _module_config(path: str) -> dict:
    """A module folder's `config.json` (an object), or {} where it has none (the module's defaults)."""
    config_path = os.path.join(path, "config.json")
    return _object(config_path) if os.path.isfile(config_path) else {}


def _read_pooling(found: dict, path: str) -> None:
    found["pooling"], found["include_prompt"] = _pooling(os.path.join(path, "config.json"))


def _read_splade_pooling(found: dict, path: str) -> None:
    found["pooling"] = _splade(os.path.join(path, "config.json"))


def _read_module_input(path: str) -> str:
    """Which vectors a Dense or Normalize module reads (`module_input_name`): sentence-transformers writes it from
    version 5.4; older folders read the pooled vector."""
    named = _module_config(path).get("module_input_name", _SENTENCE)
    if named not in (_SENTENCE, _TOKENS):
        raise CheckpointError(f"{os.path.join(path, 'config.json')}: module_input_name {named!r}: expected "
                              f"{_SENTENCE} or {_TOKENS}")
    return named


def _read_multi_vector_mask(found: dict, path: str) -> None:
    found["mask"] = _module_config(path), os.path.join(path, "config.json")


#: How each sentence-transformers module type is read, by its type's last name (versions 2 to 6 spell the
#: module path differently): a reader puts what its folder says into the pipeline being read.
MODULE_READERS = {
    "Transformer": _read_transformer,
    "MLMTransformer": lambda found, path: _read_transformer(found, path, mlm=True),
    "Pooling": _read_pooling,
    "SpladePooling": _read_splade_pooling,
    "Dense": lambda found, path: found["dense"].append(_dense(path)),
    "Normalize": lambda found, path: found.update(normalize=_read_module_input(path)),
    "MultiVectorMask": _read_multi_vector_mask,
    "Router": _read_router,
}


def module_path(folder: str, named, modules_file: str) -> str:
    """The folder of a module whose `path` in `modules_file` is `named`: a relative path inside `folder`
    ("" for the folder itself). An absolute path, or one that climbs out with `..`, is refused: a model folder
    (a downloaded archive too) must not make kbert read files elsewhere on the machine."""
    if not isinstance(named, str):
        raise CheckpointError(f"{modules_file}: a module's path {named!r}: expected a folder name inside the model "
                              "folder (\"\" for the folder itself)")
    normal = os.path.normpath(named.replace("\\", "/")) if named else ""
    if os.path.isabs(named) or normal == ".." or normal.startswith("../") or (os.name == "nt" and ":" in named):
        raise CheckpointError(f"{modules_file}: a module's path {named!r} lies outside the model folder; a module "
                              "must be the folder itself (\"\") or a sub-folder of it")
    return os.path.join(folder, normal) if normal not in ("", ".") else folder


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


def _multi_vector(config: dict, config_path: Optional[str], mask: Tuple[dict, str]) -> MultiVectorSpec:
    """A multi-vector encoder's settings: the Transformer's `query_length`, `document_length` and
    `query_expansion` (`config`, its `sentence_bert_config.json`) and the MultiVectorMask's skiplist (`mask`: its
    config and file), checked as sentence-transformers 6 checks them."""
    mask_config, mask_path = mask
    query_length = _length(config, "query_length", config_path)
    expansion = _expansion(config.get("query_expansion"), config_path)
    if expansion and query_length is not None and query_length < expansion.length:
        raise CheckpointError(f"{config_path}: query_length {query_length} is below query_expansion's length "
                              f"{expansion.length}, the tokens a query has at least")
    words, tasks = mask_config.get("skiplist_words") or [], mask_config.get("skiplist_tasks", ["document"])
    tasks = [tasks] if isinstance(tasks, str) else tasks
    if not isinstance(words, list) or not all(isinstance(word, str) for word in words):
        raise CheckpointError(f"{mask_path}: skiplist_words {words!r}: expected a list of tokens")
    if not isinstance(tasks, list) or not set(tasks) <= {"query", "document"}:
        raise CheckpointError(f"{mask_path}: skiplist_tasks {tasks!r}: expected a list of query and document")
    if mask_config.get("keep_only_token_ids") is not None:
        raise CheckpointError(f"{mask_path}: keep_only_token_ids keeps image patches (ColPali's documents); kbert "
                              "embeds text, so expected null")
    return MultiVectorSpec(query_length, _length(config, "document_length", config_path), expansion, tuple(words),
                           tuple(tasks))


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


def _flag(config: dict, key: str, default: bool, path: str) -> bool:
    """A true/false setting of a module's config: JSON's booleans only (the string "false" is not false)."""
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise CheckpointError(f"{path}: {key} {value!r}: expected true or false")
    return value


def _prompts(path: str) -> Tuple[Dict[str, str], Optional[str]]:
    """The prompts by name and the default one's name, checked as sentence-transformers checks them."""
    config = _object(path) if os.path.isfile(path) else {}
    prompts, default = config.get("prompts") or {}, config.get("default_prompt_name")
    if not isinstance(prompts, dict) or not all(isinstance(text, str) for text in prompts.values()):
        raise CheckpointError(f"{path}: prompts: expected an object of prompt names and their texts, got {prompts!r}")
    if default is not None and default not in prompts:
        raise CheckpointError(f"{path}: default_prompt_name {default!r} is not one of its prompts "
                              f"({', '.join(map(repr, prompts)) or 'none'})")
    return prompts, default


def write_modules(folder: str, pooling: "str | SpladeSpec | MultiVectorSpec", dimensions: int,
                  dense: Sequence[Tuple[list, Optional[str]]], normalize: bool, max_seq_length: int,
                  prompts: Optional[Dict[str, str]] = None, default_prompt_name: Optional[str] = None,
                  do_lower_case: bool = False, include_prompt: bool = True) -> None:
    """A sentence-transformers folder's module files beside the transformer's, in the names every version from 2
    on reads: `modules.json`, `1_Pooling/config.json` (its modes, and `include_prompt` where false), a `N_Dense`
    folder per projection (`(weights, Keras activation)`: its `config.json` and `model.safetensors`), `Normalize`
    where asked, `sentence_bert_config.json`, and `config_sentence_transformers.json` where there are `prompts`.
    A SPLADE `pooling` writes a sparse encoder (an `MLMTransformer` and `1_SpladePooling`, in the names
    sentence-transformers 5 and later read, and `model_type` SparseEncoder); a `MultiVectorSpec` a multi-vector
    encoder (its projections and normalisation of each token, then `MultiVectorMask`, as sentence-transformers 6
    writes it, and `model_type` MultiVectorEncoder)."""
    kind = "SparseEncoder" if isinstance(pooling, SpladeSpec) else \
        "MultiVectorEncoder" if isinstance(pooling, MultiVectorSpec) else "SentenceTransformer"
    modules = [_module(0, "", "sparse_encoder.models.MLMTransformer" if kind == "SparseEncoder" else
                       "models.Transformer")]
    settings = {"max_seq_length": max_seq_length, "do_lower_case": do_lower_case}
    if kind == "SparseEncoder":
        modules.append(_write_splade_pooling(folder, 1, "1_SpladePooling", pooling, dimensions))
    elif kind == "SentenceTransformer":
        modules.append(_module(1, "1_Pooling", "models.Pooling"))
        _write_json(os.path.join(folder, "1_Pooling", "config.json"),
                    _pooling_config(pooling, dimensions, include_prompt))
    else:
        settings.update(query_length=pooling.query_length, document_length=pooling.document_length,
                        query_expansion=pooling.expansion and dataclasses.asdict(pooling.expansion))
    vectors = _TOKENS if kind == "MultiVectorEncoder" else _SENTENCE
    for weights, activation in dense:
        modules.append(_write_dense(folder, len(modules), weights, activation, vectors))
    if kind == "MultiVectorEncoder":
        path = f"{len(modules)}_MultiVectorMask"
        _write_json(os.path.join(folder, path, "config.json"), {
            "skiplist_words": list(pooling.skiplist_words), "skiplist_tasks": list(pooling.skiplist_tasks),
            "keep_only_token_ids": None})
        modules.append(_module(len(modules), path, "multi_vector_encoder.modules.multi_vector_mask.MultiVectorMask"))
    if normalize:
        path = f"{len(modules)}_Normalize"
        if vectors == _TOKENS:  # written only where it differs from the default, which versions 2 to 5.3 read
            _write_json(os.path.join(folder, path, "config.json"), {"module_input_name": vectors,
                                                                    "module_output_name": vectors})
        modules.append(_module(len(modules), path, "models.Normalize"))
    _write_json(os.path.join(folder, MODULES_FILE), modules)
    _write_json(os.path.join(folder, "sentence_bert_config.json"), settings)
    if prompts or kind != "SentenceTransformer":
        _write_settings(folder, kind, prompts, default_prompt_name)


def _write_settings(folder: str, kind: str, prompts: Optional[Dict[str, str]], default_prompt_name: Optional[str]):
    similarity = {"SparseEncoder": "dot", "MultiVectorEncoder": "maxsim"}.get(kind, "cosine")
    _write_json(os.path.join(folder, SETTINGS_FILE), {"model_type": kind, "prompts": prompts or {},
                                                      "default_prompt_name": default_prompt_name,
                                                      "similarity_fn_name": similarity})


def _write_splade_pooling(folder: str, index: int, path: str, pooling: SpladeSpec, dimensions: int) -> dict:
    _write_json(os.path.join(folder, path, "config.json"), {
        "pooling_strategy": pooling.strategy, "activation_function": pooling.activation,
        "embedding_dimension": dimensions})
    return _module(index, path, "sparse_encoder.models.SpladePooling")


#: The folders of an inference-free sparse encoder's modules, as sentence-transformers' Router names them.
ROUTER_FOLDERS = {"query": "query_0_SparseStaticEmbedding", "document": "document_0_MLMTransformer",
                  "pooling": "document_1_SpladePooling"}


def write_router(folder: str, pooling: SpladeSpec, static: StaticQuerySpec, weights: np.ndarray,
                 max_seq_length: int, prompts: Optional[Dict[str, str]] = None,
                 default_prompt_name: Optional[str] = None, do_lower_case: bool = False) -> None:
    """An inference-free sparse encoder's module files, laid out as sentence-transformers' `Router` saves them:
    `modules.json` (the Router), `router_config.json` (its routes and `default_route`), the document route's
    `sentence_bert_config.json` and `SpladePooling`, and the query route's `SparseStaticEmbedding` (`weights` as its
    `weight` tensor, and `frozen`). The caller writes the transformer's files into `ROUTER_FOLDERS["document"]`,
    and the tokenizer's into it and `ROUTER_FOLDERS["query"]`."""
    from safetensors.numpy import save_file

    query, document = ROUTER_FOLDERS["query"], ROUTER_FOLDERS["document"]
    _write_json(os.path.join(folder, document, "sentence_bert_config.json"),
                {"max_seq_length": max_seq_length, "do_lower_case": do_lower_case})
    _write_splade_pooling(folder, 1, ROUTER_FOLDERS["pooling"], pooling, int(weights.shape[0]))
    _write_json(os.path.join(folder, query, "config.json"), {"frozen": static.frozen})
    save_file({"weight": np.ascontiguousarray(weights, np.float32)}, os.path.join(folder, query, "model.safetensors"))
    prefix = "sentence_transformers.sparse_encoder.modules."
    _write_json(os.path.join(folder, "router_config.json"), {
        "types": {query: prefix + "sparse_static_embedding.SparseStaticEmbedding",
                  document: prefix + "mlm_transformer.MLMTransformer",
                  ROUTER_FOLDERS["pooling"]: prefix + "splade_pooling.SpladePooling"},
        "structure": {"query": [query], "document": [document, ROUTER_FOLDERS["pooling"]]},
        "parameters": {"default_route": static.default_route, "allow_empty_key": True, "route_mappings": {}}})
    _write_json(os.path.join(folder, MODULES_FILE), [_module(0, "", "base.modules.router.Router")])
    _write_settings(folder, "SparseEncoder", prompts, default_prompt_name)


def _write_dense(folder: str, index: int, weights: list, activation: Optional[str], vectors: str) -> dict:
    """A `Dense` module's folder (its `config.json` and `model.safetensors`) and its `modules.json` entry."""
    from safetensors.numpy import save_file

    path = f"{index}_Dense"
    kernel = weights[0]
    activation = None if activation == "linear" else activation  # Keras's name for none
    torch_names = {keras: torch for torch, keras in _ACTIVATIONS.items()}
    # torch keeps Identity in torch.nn.modules.linear, the others in torch.nn.modules.activation
    _write_json(os.path.join(folder, path, "config.json"), {
        "in_features": int(kernel.shape[0]), "out_features": int(kernel.shape[1]), "bias": len(weights) > 1,
        "activation_function": f"torch.nn.modules.{'linear' if activation is None else 'activation'}."
                               f"{torch_names[activation]}",
        # where it differs from the default only: sentence-transformers before 5.4 refuses the key
        **({"module_input_name": vectors, "module_output_name": vectors} if vectors == _TOKENS else {})})
    tensors = {"linear.weight": kernel.T.copy(), **({"linear.bias": weights[1]} if len(weights) > 1 else {})}
    save_file(tensors, os.path.join(folder, path, "model.safetensors"))
    return _module(index, path, "models.Dense")


def _module(index: int, path: str, kind: str) -> dict:
    """A `modules.json` entry: the module's place, folder and type (`sentence_transformers.<kind>`)."""
    return {"idx": index, "name": str(index), "path": path, "type": f"sentence_transformers.{kind}"}


def _write_json(path: str, value) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(value, handle, indent=2)


def _pooling(path: str) -> Tuple[str, bool]:
    """The Pooling's mode (several modes joined by `+`, in the order their vectors are concatenated), and whether it
    counts a prompt's tokens."""
    config = _object(path)
    if config.get("pooling_mode"):  # sentence-transformers 6 writes the mode (or a list of modes) by name
        named = config["pooling_mode"]
        chosen = [_ST_MODE_NAMES.get(mode, mode)
                  for mode in ([named] if isinstance(named, str) else named if isinstance(named, list) else [named])]
    else:
        chosen = [mode for flag, mode in _POOLING_FLAGS.items() if _flag(config, flag, False, path)]
    try:
        mode = pooling_modes("+".join(map(str, chosen)))
    except ValueError:
        raise CheckpointError(f"{path}: expected one or more pooling modes of {', '.join(_POOLING_FLAGS)} (true), "
                              f"or pooling_mode naming them, got {chosen or 'none'}") from None
    return "+".join(mode), _flag(config, "include_prompt", True, path)


def _pooling_config(pooling: str, dimensions: int, include_prompt: bool) -> dict:
    """A Pooling's `config.json`: its modes as the flags every version reads; where their order is not the flags'
    (a sentence-transformers 6 `pooling_mode` list read in), also `pooling_mode`, which version 6 reads first and
    earlier versions refuse rather than concatenate in another order."""
    modes = pooling_modes(pooling)
    config = {"word_embedding_dimension": dimensions, **{flag: mode in modes for flag, mode in _POOLING_FLAGS.items()}}
    if list(modes) != [mode for mode in _POOLING_FLAGS.values() if mode in modes]:
        config["pooling_mode"] = [_KBERT_MODE_NAMES.get(mode, mode) for mode in modes]
    if not include_prompt:  # written where it differs from the default, which every version reads
        config["include_prompt"] = False
    return config


def _splade(path: str) -> SpladeSpec:
    """A `SpladePooling`'s config: `pooling_strategy` max or sum, `activation_function` relu or log1p_relu."""
    config = _object(path) if os.path.isfile(path) else {}
    spec = SpladeSpec(config.get("pooling_strategy", "max"), config.get("activation_function", "relu"))
    if spec.strategy not in SPLADE_STRATEGIES or spec.activation not in SPLADE_ACTIVATIONS:
        raise CheckpointError(f"{path}: pooling_strategy {spec.strategy!r}, activation_function "
                              f"{spec.activation!r}: expected one of {', '.join(SPLADE_STRATEGIES)} and one of "
                              f"{', '.join(SPLADE_ACTIVATIONS)}")
    return spec


def _dense(path: str) -> DenseSpec:
    config_path = os.path.join(path, "config.json")
    config = _object(config_path)
    activation = str(config.get("activation_function", "torch.nn.modules.linear.Identity")).rsplit(".", 1)[-1]
    if activation not in _ACTIVATIONS:
        raise CheckpointError(f"{config_path}: activation {activation!r} is not one kbert reads "
                              f"({', '.join(_ACTIVATIONS)})")
    sizes = [config.get(key) for key in ("in_features", "out_features")]
    if not all(is_whole_number(size) for size in sizes):
        raise CheckpointError(f"{config_path}: in_features {sizes[0]!r}, out_features {sizes[1]!r}: expected "
                              "positive whole numbers")
    if not any(os.path.isfile(os.path.join(path, name)) for name in ("model.safetensors", "pytorch_model.bin")):
        raise CheckpointError(f"{path}: no model.safetensors (nor pytorch_model.bin): the projection's weights are "
                              "missing")
    return DenseSpec(path, sizes[0], sizes[1], _flag(config, "bias", True, config_path), _ACTIVATIONS[activation],
                     _read_module_input(path))


def dense_weights(spec: DenseSpec) -> list:
    """A `Dense` module's weights in Keras's order (`[kernel, bias]`), checked against its config: the tensors
    `linear.weight` `[out, in]` (and `linear.bias` `[out]`), floating-point and finite, from its `model.safetensors`
    or else its `pytorch_model.bin` (`read_torch_tensors`: no code of the file runs)."""
    path, tensors = _module_tensors(spec.path)
    expected = {"linear.weight": (spec.out_features, spec.in_features)}
    if spec.bias:
        expected["linear.bias"] = (spec.out_features,)
    for name, shape in expected.items():
        value = tensors.get(name)
        if value is None or tuple(value.shape) != shape or value.dtype.kind != "f":
            got = "missing" if value is None else f"{value.dtype} {list(value.shape)}"
            raise CheckpointError(f"{path}: {name}: expected floats of shape {list(shape)} (its config.json's "
                                  f"in_features and out_features), got {got}")
        if not np.isfinite(value).all():
            raise CheckpointError(f"{path}: {name} holds NaN or infinite values; the file is damaged or its run "
                                  "diverged")
    return [tensors["linear.weight"].T] + ([tensors["linear.bias"]] if spec.bias else [])


def static_query_weights(spec: StaticQuerySpec, vocab_size: int) -> np.ndarray:
    """A `SparseStaticEmbedding`'s weights (its `weight` tensor) as float32, checked: one per entry of the
    document side's vocabulary (`vocab_size`), finite."""
    path, tensors = _module_tensors(spec.path)
    weight = tensors.get("weight")
    if weight is None or tuple(weight.shape) != (vocab_size,) or weight.dtype.kind != "f":
        got = "missing" if weight is None else f"{weight.dtype} {list(weight.shape)}"
        raise CheckpointError(f"{path}: weight: expected {vocab_size} floats (one per entry of the document "
                              f"model's vocabulary), got {got}")
    if not np.isfinite(weight).all():
        raise CheckpointError(f"{path}: weight holds NaN or infinite values; the file is damaged or its run diverged")
    return weight.astype(np.float32)


def _module_tensors(folder: str) -> Tuple[str, Dict[str, np.ndarray]]:
    """A module's file of tensors and what it holds: its `model.safetensors`, else its `pytorch_model.bin`
    (sentence-transformers 2's pickle, read by `read_torch_tensors`: no code of the file runs)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    path = os.path.join(folder, "model.safetensors")
    if not os.path.isfile(path):
        from kbert.checkpoints.torch_pickle import read_torch_tensors

        path = os.path.join(folder, "pytorch_model.bin")
        return path, read_torch_tensors(path)
    try:
        return path, load_file(path)
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"{path}: not a readable safetensors file ({str(error).splitlines()[0]})") from None


def _json(path: str):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing; a sentence-transformers folder needs it") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: not JSON ({error})") from None


def _object(path: str) -> dict:
    """A JSON file that must hold an object (a module's config)."""
    value = _json(path)
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: expected a JSON object of settings, got {type(value).__name__}")
    return value
