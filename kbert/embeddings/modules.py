"""Sentence-transformers' module types, one class each: its sub-folder read and written, and the Keras layer it adds.

A sentence-transformers folder is an ordered list of modules (`modules.json`),
each in its own sub-folder and named by its type (`sentence_transformers.models.
Pooling`, ...). Each class here is one such type: `read(path)` gives the module
its folder holds (checked; a `CheckpointError` names the file and what was
expected), `write(path)` writes it back in the files sentence-transformers 6
reads (and, for the types older versions have, the files they read), and
`apply(vectors, name)` adds its Keras layer to a model. A type is found by its
last name (versions 2 to 6 spell the module path differently) in
`MODULE_TYPES`: a new type is one class and its entry there; an unknown one is
refused by name.

The transformer itself is built by kbert's builder from its Hugging Face
files; the `Transformer` module holds what its `sentence_bert_config.json`
says. A `MultiVectorMask` is applied to token ids, after the model
(`kbert.embeddings.multi_vector`), so it adds no layer.
"""

from __future__ import annotations

import abc
import dataclasses
import os
from typing import ClassVar, Dict, List, Optional, Sequence, Tuple

import numpy as np

from kbert.embeddings.files import check_tensor, flag_setting, json_object, module_tensors, write_json
from kbert.errors import CheckpointError, is_whole_number, shown
from kbert.layers.pooling import SPLADE_ACTIVATIONS, SPLADE_STRATEGIES, pooling_modes

#: sentence-transformers' names for the vectors a module reads: a text's pooled one, or each token's.
SENTENCE, TOKENS = "sentence_embedding", "token_embeddings"
# sentence-transformers' pooling flags, in the order it concatenates the modes they set, and kbert's names for them
_POOLING_FLAGS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                  "pooling_mode_mean_tokens": "mean", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
                  "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
# the one mode sentence-transformers 6's `pooling_mode` names otherwise than kbert
_ST_MODE_NAMES = {"mean_sqrt_len_tokens": "mean_sqrt_len"}
_KBERT_MODE_NAMES = {ours: theirs for theirs, ours in _ST_MODE_NAMES.items()}  # and back
# torch activations a Dense module names, and Keras's
_ACTIVATIONS = {"Tanh": "tanh", "Identity": None, "ReLU": "relu", "GELU": "gelu", "Sigmoid": "sigmoid"}
#: A transformer's settings file (`max_seq_length`, `do_lower_case`, a multi-vector encoder's lengths).
TRANSFORMER_SETTINGS = "sentence_bert_config.json"


class Module(abc.ABC):
    """One sentence-transformers module: the base of each type's class.

    A subclass names the type it is (`type_path`, after `sentence_transformers.`), reads its folder
    (`read`), writes it (`write`) and adds its Keras layer to a model (`apply`; none by default)."""

    #: the module's type as `modules.json` names it, after `sentence_transformers.`
    type_path: ClassVar[str]

    @classmethod
    @abc.abstractmethod
    def read(cls, path: str) -> "Module":
        """The module its folder `path` holds, checked."""

    def write(self, path: str) -> None:
        """Writes the module's files into its folder `path` (none by default)."""

    def apply(self, vectors, name: str):
        """`vectors` through the module's Keras layer, named `name` (as they are by default)."""
        return vectors

    @property
    def folder_name(self) -> str:
        """The last part of its sub-folder's name, as sentence-transformers names it (`1_Pooling`)."""
        return type(self).__name__


@dataclasses.dataclass
class Transformer(Module):
    """A `Transformer`: the folder of a Hugging Face model's files and its `sentence_bert_config.json`.

    Args:
        path: its folder (the model folder itself, or a sub-folder).
        settings: its `sentence_bert_config.json` (`max_seq_length`, `do_lower_case`, ...; {} where it has none).
        mlm: whether it gives a masked-LM's vocabulary logits (an `MLMTransformer`, or sentence-transformers 6's
            `transformer_task` fill-mask) rather than hidden states.
        causal_lm: whether it gives a causal LM's logits (`transformer_task` text-generation: a CrossEncoder's,
            scored by a `LogitScore`).
    """

    path: str
    settings: dict = dataclasses.field(default_factory=dict)
    mlm: bool = False
    causal_lm: bool = False

    type_path: ClassVar[str] = "models.Transformer"

    @classmethod
    def read(cls, path: str) -> "Transformer":
        config_path = os.path.join(path, TRANSFORMER_SETTINGS)
        settings = json_object(config_path) if os.path.isfile(config_path) else {}
        task = settings.get("transformer_task", "feature-extraction")
        if task not in ("feature-extraction", "fill-mask", "text-generation"):
            raise CheckpointError(f"{config_path}: transformer_task {task!r}: kbert reads feature-extraction "
                                  "(hidden states), fill-mask (a masked-LM's logits) and text-generation (a causal "
                                  "LM's, a reranker's) transformers")
        return cls(path, settings, task == "fill-mask", task == "text-generation")

    def __post_init__(self):
        self.mlm = self.mlm or isinstance(self, MLMTransformer)

    def write(self, path: str) -> None:
        """Its `sentence_bert_config.json`; the model's own files are the caller's (`save_hf_weights`)."""
        write_json(os.path.join(path, TRANSFORMER_SETTINGS), self.settings)


class MLMTransformer(Transformer):
    """A sparse encoder's `MLMTransformer`: a `Transformer` giving its masked-LM head's vocabulary logits."""

    type_path: ClassVar[str] = "sparse_encoder.models.MLMTransformer"


@dataclasses.dataclass
class Pooling(Module):
    """A `Pooling`: token vectors into one (`kbert.layers.Pooling`).

    Args:
        mode: one of `kbert.layers.pooling.POOLING_MODES`, or several joined by `+` (concatenated in that order).
        include_prompt: whether it counts a prompt's tokens.
        dimensions: the width of the token vectors (its `word_embedding_dimension`; None where unknown).

    Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> Pooling("weightedmean+cls", dimensions=384).write(folder)  # its own order: `pooling_mode` written too
    >>> Pooling.read(folder)
    Pooling(mode='weightedmean+cls', include_prompt=True, dimensions=384)
    """

    mode: str = "mean"
    include_prompt: bool = True
    dimensions: Optional[int] = None

    type_path: ClassVar[str] = "models.Pooling"

    @classmethod
    def read(cls, path: str) -> "Pooling":
        config_path = os.path.join(path, "config.json")
        config = json_object(config_path)
        if config.get("pooling_mode"):  # sentence-transformers 6 writes the mode (or a list of modes) by name
            named = config["pooling_mode"]
            named = [named] if isinstance(named, str) else named
            if not isinstance(named, list) or not all(isinstance(mode, str) for mode in named):
                raise CheckpointError(f"{config_path}: pooling_mode {shown(config['pooling_mode'])}: expected a mode's "
                                      "name or a list of them")
            chosen = [_ST_MODE_NAMES.get(mode, mode) for mode in named]
        else:
            chosen = [mode for flag, mode in _POOLING_FLAGS.items() if flag_setting(config, flag, False, config_path)]
        try:
            mode = pooling_modes("+".join(map(str, chosen)))
        except ValueError:
            raise CheckpointError(f"{config_path}: expected one or more pooling modes of {', '.join(_POOLING_FLAGS)} "
                                  f"(true), or pooling_mode naming them, got {chosen or 'none'}") from None
        dimensions = config.get("word_embedding_dimension")
        return cls("+".join(mode), flag_setting(config, "include_prompt", True, config_path),
                   dimensions if is_whole_number(dimensions) else None)

    def write(self, path: str) -> None:
        """Its `config.json`: the modes as the flags every version reads; where their order is not the flags' (a
        sentence-transformers 6 `pooling_mode` list read in), also `pooling_mode`, which version 6 reads first and
        earlier versions refuse rather than concatenate in another order."""
        modes = pooling_modes(self.mode)
        config = {"word_embedding_dimension": self.dimensions,
                  **{flag: mode in modes for flag, mode in _POOLING_FLAGS.items()}}
        if list(modes) != [mode for mode in _POOLING_FLAGS.values() if mode in modes]:
            config["pooling_mode"] = [_KBERT_MODE_NAMES.get(mode, mode) for mode in modes]
        if not self.include_prompt:  # written where it differs from the default, which every version reads
            config["include_prompt"] = False
        write_json(os.path.join(path, "config.json"), config)

    def apply(self, vectors, name: str, pooled=None):
        """Its `kbert.layers.Pooling`; `pooled` (`[batch, tokens]`, 1 for a token it counts): the tokens it pools
        where `include_prompt` is false (a text's prompt left out), else the padding mask decides."""
        from kbert.layers.pooling import Pooling as PoolingLayer

        layer = PoolingLayer(self.mode, name=name)
        return layer(vectors) if pooled is None else layer(vectors, mask=pooled)


@dataclasses.dataclass
class SpladePooling(Module):
    """A `SpladePooling`: a masked-LM's logits activated (`relu`, `log1p_relu`) and pooled over the tokens
    (`max`, `sum`) into one weight per vocabulary entry (`kbert.layers.SpladePooling`).

    Args:
        strategy: how the tokens' weights are pooled (`max`, `sum`).
        activation: how each logit is activated (`relu`, `log1p_relu`).
        dimensions: the vocabulary's size (its `embedding_dimension`; None where unknown).
    """

    strategy: str = "max"
    activation: str = "relu"
    dimensions: Optional[int] = None

    type_path: ClassVar[str] = "sparse_encoder.models.SpladePooling"

    @classmethod
    def read(cls, path: str) -> "SpladePooling":
        config_path = os.path.join(path, "config.json")
        config = json_object(config_path) if os.path.isfile(config_path) else {}
        strategy, activation = config.get("pooling_strategy", "max"), config.get("activation_function", "relu")
        if strategy not in SPLADE_STRATEGIES or activation not in SPLADE_ACTIVATIONS:
            raise CheckpointError(f"{config_path}: pooling_strategy {strategy!r}, activation_function "
                                  f"{activation!r}: expected one of {', '.join(SPLADE_STRATEGIES)} and one of "
                                  f"{', '.join(SPLADE_ACTIVATIONS)}")
        dimensions = config.get("embedding_dimension")
        return cls(strategy, activation, dimensions if is_whole_number(dimensions) else None)

    def write(self, path: str) -> None:
        write_json(os.path.join(path, "config.json"), {
            "pooling_strategy": self.strategy, "activation_function": self.activation,
            "embedding_dimension": self.dimensions})

    def apply(self, vectors, name: str):
        from kbert.layers.pooling import SpladePooling as SpladePoolingLayer

        return SpladePoolingLayer(self.strategy, self.activation, name=name)(vectors)


@dataclasses.dataclass(eq=False)
class Dense(Module):
    """A `Dense`: a projection of each vector (`keras.layers.Dense`), its weights from its folder.

    Args:
        weights: its weights in Keras's order, `[kernel [in, out]]` or `[kernel, bias [out]]`.
        activation: its activation, a Keras name (None: none).
        input_name: the vectors it reads (`sentence_embedding`; a multi-vector encoder's `token_embeddings`).
        path: the folder it was read from ("" where it was not; named in errors).

    Example:
    >>> import keras
    >>> projection = Dense([np.ones((4, 2), np.float32)], "tanh")
    >>> (projection.in_features, projection.out_features)
    (4, 2)
    >>> keras.Model(inputs := keras.Input((4,)), projection.apply(inputs, "Embedding-Dense-0")).output_shape
    (None, 2)
    """

    weights: List[np.ndarray]
    activation: Optional[str] = None
    input_name: str = SENTENCE
    path: str = ""

    type_path: ClassVar[str] = "models.Dense"

    @property
    def in_features(self) -> int:
        return int(self.weights[0].shape[0])

    @property
    def out_features(self) -> int:
        return int(self.weights[0].shape[1])

    @classmethod
    def read(cls, path: str) -> "Dense":
        """Its `config.json` and weights, checked against each other: the tensors `linear.weight` `[out, in]` (and
        `linear.bias` `[out]`), floating-point and finite, from its `model.safetensors` or else its
        `pytorch_model.bin` (`read_torch_tensors`: no code of the file runs)."""
        config_path = os.path.join(path, "config.json")
        config = json_object(config_path)
        activation = str(config.get("activation_function", "torch.nn.modules.linear.Identity")).rsplit(".", 1)[-1]
        if activation not in _ACTIVATIONS:
            raise CheckpointError(f"{config_path}: activation {activation!r} is not one kbert reads "
                                  f"({', '.join(_ACTIVATIONS)})")
        sizes = [config.get(key) for key in ("in_features", "out_features")]
        if not all(is_whole_number(size) for size in sizes):
            raise CheckpointError(f"{config_path}: in_features {sizes[0]!r}, out_features {sizes[1]!r}: expected "
                                  "positive whole numbers")
        bias = flag_setting(config, "bias", True, config_path)
        if flag_setting(config, "use_residual", False, config_path):
            raise CheckpointError(f"{config_path}: use_residual true: a projection added to its input (PyLate's) is "
                                  "not one kbert computes")
        if not any(os.path.isfile(os.path.join(path, name)) for name in ("model.safetensors", "pytorch_model.bin")):
            raise CheckpointError(f"{path}: no model.safetensors (nor pytorch_model.bin): the projection's weights "
                                  "are missing")
        file, tensors = module_tensors(path)
        expected = {"linear.weight": (sizes[1], sizes[0]), **({"linear.bias": (sizes[1],)} if bias else {})}
        for name, shape in expected.items():
            check_tensor(file, name, tensors.get(name), shape, "its config.json's in_features and out_features")
        return cls([tensors["linear.weight"].T] + ([tensors["linear.bias"]] if bias else []),
                   _ACTIVATIONS[activation], module_input(path), path)

    @classmethod
    def from_layer(cls, layer, input_name: str = SENTENCE) -> "Dense":
        """The module of a built `keras.layers.Dense` (its weights now, its activation)."""
        activation = layer.activation.__name__ if layer.activation else None
        return cls(layer.get_weights(), None if activation == "linear" else activation, input_name)

    def write(self, path: str) -> None:
        """Its `config.json` and `model.safetensors` (`linear.weight` `[out, in]`, `linear.bias`)."""
        from safetensors.numpy import save_file

        torch_names = {keras: torch for torch, keras in _ACTIVATIONS.items()}
        # torch keeps Identity in torch.nn.modules.linear, the others in torch.nn.modules.activation
        write_json(os.path.join(path, "config.json"), {
            "in_features": self.in_features, "out_features": self.out_features, "bias": len(self.weights) > 1,
            "activation_function": f"torch.nn.modules.{'linear' if self.activation is None else 'activation'}."
                                   f"{torch_names[self.activation]}",
            **_input_names(self.input_name)})
        tensors = {"linear.weight": np.ascontiguousarray(self.weights[0].T),
                   **({"linear.bias": self.weights[1]} if len(self.weights) > 1 else {})}
        save_file(tensors, os.path.join(path, "model.safetensors"))

    def apply(self, vectors, name: str):
        import keras

        if int(vectors.shape[-1]) != self.in_features:
            raise CheckpointError(f"{os.path.join(self.path, 'config.json')}: in_features {self.in_features}, but "
                                  f"the vectors before it have {int(vectors.shape[-1])} values")
        layer = keras.layers.Dense(self.out_features, use_bias=len(self.weights) > 1, activation=self.activation,
                                   name=name)
        vectors = layer(vectors)
        layer.set_weights(self.weights)
        return vectors


@dataclasses.dataclass
class Normalize(Module):
    """A `Normalize`: each vector scaled to unit length (`kbert.layers.L2Normalize`).

    Args:
        input_name: the vectors it scales (`sentence_embedding`; a multi-vector encoder's `token_embeddings`).
    """

    input_name: str = SENTENCE

    type_path: ClassVar[str] = "models.Normalize"

    @classmethod
    def read(cls, path: str) -> "Normalize":
        return cls(module_input(path))

    def write(self, path: str) -> None:
        if self.input_name != SENTENCE:  # a config only where it differs from the default, as version 6 does
            write_json(os.path.join(path, "config.json"), _input_names(self.input_name))

    def apply(self, vectors, name: str):
        from kbert.layers.pooling import L2Normalize

        return L2Normalize(name=name)(vectors)


@dataclasses.dataclass
class MultiVectorMask(Module):
    """A `MultiVectorMask` (sentence-transformers 6's multi-vector encoders): which tokens' vectors are left out of
    the scoring. It is applied to the token ids after the model (`kbert.embeddings.multi_vector.skiplist_ids`).

    Args:
        skiplist_words: the tokens left out (PyLate's punctuation).
        skiplist_tasks: the roles (`query`, `document`) the skiplist applies to.
    """

    skiplist_words: Tuple[str, ...] = ()
    skiplist_tasks: Tuple[str, ...] = ("document",)

    type_path: ClassVar[str] = "multi_vector_encoder.modules.multi_vector_mask.MultiVectorMask"

    @classmethod
    def read(cls, path: str) -> "MultiVectorMask":
        config_path = os.path.join(path, "config.json")
        config = module_config(path)
        words, tasks = config.get("skiplist_words") or [], config.get("skiplist_tasks", ["document"])
        tasks = [tasks] if isinstance(tasks, str) else tasks
        if not isinstance(words, list) or not all(isinstance(word, str) for word in words):
            raise CheckpointError(f"{config_path}: skiplist_words {words!r}: expected a list of tokens")
        if not isinstance(tasks, list) or not all(isinstance(task, str) for task in tasks) or \
                not set(tasks) <= {"query", "document"}:
            raise CheckpointError(f"{config_path}: skiplist_tasks {tasks!r}: expected a list of query and document")
        if config.get("keep_only_token_ids") is not None:
            raise CheckpointError(f"{config_path}: keep_only_token_ids keeps image patches (ColPali's documents); "
                                  "kbert embeds text, so expected null")
        return cls(tuple(words), tuple(tasks))

    def write(self, path: str) -> None:
        write_json(os.path.join(path, "config.json"), {
            "skiplist_words": list(self.skiplist_words), "skiplist_tasks": list(self.skiplist_tasks),
            "keep_only_token_ids": None})


@dataclasses.dataclass(eq=False)
class SparseStaticEmbedding(Module):
    """A `SparseStaticEmbedding` (an inference-free sparse encoder's query side): one weight per vocabulary entry,
    given to each token a query holds (`kbert.embeddings.inference_free.StaticQuery`); its tokenizer's files are in
    its folder too.

    Args:
        path: its folder.
        frozen: whether training leaves its weights as they are.
        weights: its weights (`[vocabulary]`, float32) where known; `read` leaves them to `static_weights`, which
            checks them against the document side's vocabulary.
    """

    path: str = ""
    frozen: bool = False
    weights: Optional[np.ndarray] = None

    type_path: ClassVar[str] = "sparse_encoder.modules.sparse_static_embedding.SparseStaticEmbedding"

    @classmethod
    def read(cls, path: str) -> "SparseStaticEmbedding":
        return cls(path, flag_setting(module_config(path), "frozen", False, os.path.join(path, "config.json")))

    def static_weights(self, vocab_size: int) -> np.ndarray:
        """Its `weight` tensor as float32, checked: one per entry of the document side's vocabulary, finite."""
        file, tensors = module_tensors(self.path)
        weight = tensors.get("weight")
        check_tensor(file, "weight", weight, (vocab_size,), "one per entry of the document model's vocabulary")
        return weight.astype(np.float32)

    def write(self, path: str) -> None:
        """Its `config.json` (`frozen`) and `model.safetensors` (`weight`); its tokenizer's files are the caller's."""
        from safetensors.numpy import save_file

        write_json(os.path.join(path, "config.json"), {"frozen": self.frozen})
        save_file({"weight": np.ascontiguousarray(self.weights, np.float32)}, os.path.join(path, "model.safetensors"))


@dataclasses.dataclass
class Router(Module):
    """A `Router` of the one form kbert computes, inference-free SPLADE: its `query` route one
    `SparseStaticEmbedding`, its `document` route SPLADE's modules (an `MLMTransformer` and a `SpladePooling`), as
    opensearch's neural sparse `doc-v3` models are. Its `router_config.json` names the routes; any other form is
    refused, naming its routes.

    Args:
        query: the query route's module.
        document: the document route's modules, in order.
        default_route: the route of a text given no role (`query` or `document`).
    """

    query: SparseStaticEmbedding
    document: List[Module]
    default_route: str = "document"

    type_path: ClassVar[str] = "base.modules.router.Router"
    #: the sub-folders its routes' modules are written in, as sentence-transformers names them
    FOLDERS: ClassVar[Dict[str, str]] = {"query": "query_0_SparseStaticEmbedding",
                                         "document": "document_0_MLMTransformer",
                                         "pooling": "document_1_SpladePooling"}

    @classmethod
    def read(cls, path: str) -> "Router":
        config_path = os.path.join(path, "router_config.json")
        config = json_object(config_path)
        types, structure, parameters = (config.get(key) for key in ("types", "structure", "parameters"))
        if not isinstance(types, dict) or not isinstance(structure, dict) or not isinstance(parameters or {}, dict):
            raise CheckpointError(f"{config_path}: expected objects types, structure and parameters, as "
                                  "sentence-transformers' Router writes them")
        parameters = parameters or {}
        if not all(isinstance(names, list) and all(isinstance(name, str) for name in names)
                   for names in structure.values()):
            raise CheckpointError(f"{config_path}: structure: expected each route's list of module names (strings)")
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
        document = [read_module(types.get(name), name, path, name, config_path) for name in structure["document"]]
        if any(isinstance(module, Router) for module in document):
            raise CheckpointError(f"{config_path}: a Router inside a Router; kbert reads one")
        return cls(SparseStaticEmbedding.read(module_path(path, query[0], config_path)), document, default_route)

    def write(self, path: str) -> None:
        """Its `router_config.json` and its routes' modules, each in `FOLDERS`'s sub-folder."""
        folders = [self.FOLDERS["query"], self.FOLDERS["document"], self.FOLDERS["pooling"]]
        modules = [self.query, *self.document]
        for folder, module in zip(folders, modules):
            module.write(os.path.join(path, folder))
        prefix = "sentence_transformers."
        write_json(os.path.join(path, "router_config.json"), {
            "types": {folder: prefix + _full_type_path(module) for folder, module in zip(folders, modules)},
            "structure": {"query": folders[:1], "document": folders[1:]},
            "parameters": {"default_route": self.default_route, "allow_empty_key": True, "route_mappings": {}}})


def _full_type_path(module: Module) -> str:
    """A Router's `types` name each module by its module file too (`sparse_encoder.modules.mlm_transformer.
    MLMTransformer`), as sentence-transformers 5.1 and later write them."""
    files = {MLMTransformer: "sparse_encoder.modules.mlm_transformer.MLMTransformer",
             SpladePooling: "sparse_encoder.modules.splade_pooling.SpladePooling"}
    return files.get(type(module), module.type_path)


@dataclasses.dataclass
class LogitScore(Module):
    """A causal-LM CrossEncoder's `LogitScore`: the relevance logit of a (query, document) pair, the LM's logit of
    `true_token_id` at the last position (minus that of `false_token_id`, where set: Qwen3-Reranker's yes and no)."""

    true_token_id: int
    false_token_id: Optional[int] = None

    type_path: ClassVar[str] = "cross_encoder.modules.logit_score.LogitScore"

    @classmethod
    def read(cls, path: str) -> "LogitScore":
        config_path = os.path.join(path, "config.json")
        config = json_object(config_path)
        true, false = config.get("true_token_id"), config.get("false_token_id")
        if not is_whole_number(true, 0) or not (false is None or is_whole_number(false, 0)):
            raise CheckpointError(f"{config_path}: true_token_id {shown(true)}, false_token_id {shown(false)}: "
                                  "expected token ids (false_token_id may be null)")
        if config.get("module_input_name", "causal_logits") != "causal_logits":
            raise CheckpointError(f"{config_path}: module_input_name {shown(config['module_input_name'])}: kbert "
                                  "scores a causal LM's logits (causal_logits)")
        return cls(int(true), None if false is None else int(false))

    def write(self, path: str) -> None:
        write_json(os.path.join(path, "config.json"), {"true_token_id": self.true_token_id,
                                                       "false_token_id": self.false_token_id,
                                                       "module_input_name": "causal_logits"})


#: The module types kbert computes, by the last name of sentence-transformers' type: a new type is a class here.
MODULE_TYPES = {kind.__name__: kind for kind in (Transformer, MLMTransformer, Pooling, Dense, Normalize,
                                                  SpladePooling, MultiVectorMask, Router, LogitScore)}


def read_module(kind, name, folder: str, path, listed_in: str) -> Module:
    """The module of type `kind` (found by its last name in `MODULE_TYPES`) named `name` at `path` inside
    `folder`, as `listed_in` lists it; an unknown type is refused naming it and the types kbert reads.

    >>> read_module("sentence_transformers.models.Normalize", "2", "model", "2_Normalize", "model/modules.json")
    Normalize(input_name='sentence_embedding')
    """
    place = module_path(folder, path, listed_in)  # a path out of the folder is refused first, whatever its type
    module_type = MODULE_TYPES.get(str(kind or "").rsplit(".", 1)[-1])
    if module_type is None:
        raise CheckpointError(f"{listed_in}: module {name!r} of type {kind!r} is not one kbert reads "
                              f"({', '.join(MODULE_TYPES)})")
    return module_type.read(place)


def write_modules_file(folder: str, modules: Sequence[Module]) -> None:
    """Each of `modules` written into its sub-folder of `folder` (`N_Type`; a `Transformer` first, into `folder`
    itself; a `Router`'s routes into `folder`), and `modules.json` listing them in order."""
    entries = []
    for index, module in enumerate(modules):
        path = "" if index == 0 and isinstance(module, (Transformer, Router)) else f"{index}_{module.folder_name}"
        module.write(os.path.join(folder, path) if path else folder)
        entries.append({"idx": index, "name": str(index), "path": path,
                        "type": f"sentence_transformers.{module.type_path}"})
    write_json(os.path.join(folder, "modules.json"), entries)


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


def module_input(path: str) -> str:
    """Which vectors a Dense or Normalize module reads (`module_input_name`): sentence-transformers writes it from
    version 5.4; older folders read the pooled vector."""
    named = module_config(path).get("module_input_name", SENTENCE)
    if named not in (SENTENCE, TOKENS):
        raise CheckpointError(f"{os.path.join(path, 'config.json')}: module_input_name {named!r}: expected "
                              f"{SENTENCE} or {TOKENS}")
    return named


def _input_names(input_name: str) -> dict:
    """A module's `module_input_name` and `module_output_name`, written only where they differ from the default:
    sentence-transformers before 5.4 refuses the keys."""
    return {"module_input_name": input_name, "module_output_name": input_name} if input_name != SENTENCE else {}


def module_config(path: str) -> dict:
    """A module folder's `config.json` (an object), or {} where it has none (the module's defaults)."""
    config_path = os.path.join(path, "config.json")
    return json_object(config_path) if os.path.isfile(config_path) else {}
