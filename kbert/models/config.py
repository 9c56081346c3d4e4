"""`BertConfig`: reading and validating `bert_config.json` / `config.json`.

Google's `bert_config.json` and Hugging Face's `config.json` share the core
keys; Hugging Face adds `layer_norm_eps`, `model_type` and others. Keys that
kbert does not use (`directionality`, `pooler_*`, `architectures`, ...) are
accepted and ignored. This module does not import Keras or TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from importlib import resources
from typing import Any, ClassVar, List, Mapping, Optional, Tuple, Union

from kbert.errors import ConfigError, check_whole_number
from kbert.io import atomic_write_text

# hidden_act spellings found in released configs -> the activation kbert uses.
# "gelu" in Google's and Hugging Face's code is the exact (erf) form.
ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_python": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_tanh": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
    "tanh": "tanh",
}

_POSITIVE_INTS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
    "embedding_size",
)
_REQUIRED = _POSITIVE_INTS[:5]
_DROPOUTS = ("hidden_dropout_prob", "attention_probs_dropout_prob")

PathLike = Union[str, "os.PathLike[str]"]


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """The hyper-parameters of a BERT model.

    Args:
        vocab_size: number of WordPiece tokens (V).
        hidden_size: width of every hidden state (H).
        num_hidden_layers: number of Transformer blocks (L).
        num_attention_heads: attention heads per block; must divide H.
        intermediate_size: width of the feed-forward layer (I).
        hidden_act: activation of the feed-forward and MLM layers
            (`gelu` is the erf form, `gelu_new`/`gelu_tanh` the tanh form).
        hidden_dropout_prob: dropout after embeddings and each sub-layer.
        attention_probs_dropout_prob: dropout on attention probabilities.
        max_position_embeddings: longest sequence the model accepts (P).
        type_vocab_size: number of segment ids (T).
        initializer_range: standard deviation of the truncated-normal init.
        layer_norm_eps: epsilon of every LayerNormalization.
        embedding_size: width of the embeddings (E) when it differs from H, as
            in ALBERT and ELECTRA; an `Embedding-Mapping` Dense then maps E to
            H. None (the default) means E = H.
        model_type: the family, as Hugging Face's configs name it (`"albert"`,
            ...); None: the family is given when building (default BERT).
        pad_token_id: the id of padding, which the model hides as a key
            (bert4keras's and Google's vocabularies: 0, `[PAD]`), generation
            never emits and strips from the end of a prompt. None: no id is
            padding (Hugging Face's GPT-2, whose id 0 is `!`; right padding
            needs no mask in a causal LM).

    Example:
    >>> config = BertConfig.from_json_file("configs/bert_base_chinese.json")
    >>> config.hidden_size, config.num_hidden_layers
    (768, 12)
    """

    # The family a config of this class builds when no model= is given.
    family: ClassVar[str] = "bert"

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    embedding_size: Optional[int] = None
    model_type: Optional[str] = None
    pad_token_id: Optional[int] = 0

    def __post_init__(self) -> None:
        self.check(dataclasses.asdict(self), source="config")

    @classmethod
    def check(cls, values: Mapping[str, Any], source: str) -> None:
        """Raises a `ConfigError` naming `source` and the key for any bad value.

        A family's config class extends this with its own keys.
        """
        _validate(values, source)

    @property
    def head_size(self) -> int:
        """Width of one attention head, H / heads."""
        return self.hidden_size // self.num_attention_heads

    @property
    def embedding_width(self) -> int:
        """E: the embeddings' width (`embedding_size`, or H when it is not set)."""
        return self.embedding_size or self.hidden_size

    @property
    def longest_input(self) -> int:
        """The most tokens a row may hold (the position table's rows; RoBERTa's reserve some)."""
        return self.max_position_embeddings

    @property
    def activation(self) -> str:
        """The canonical activation name (`gelu`, `gelu_tanh`, `relu`, ...)."""
        return ACTIVATIONS[self.hidden_act]

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str = "config") -> "BertConfig":
        """Builds a config from a dict, ignoring keys kbert does not use.

        `source` (usually a file name) is named in every error message.
        """
        if not isinstance(values, Mapping):
            raise ConfigError(f"{source}: expected a JSON object, got {type(values).__name__}")
        cls.check_unread_keys(values, source)
        known = {field.name for field in dataclasses.fields(cls)}
        kept = {key: value for key, value in values.items() if key in known}
        cls.check(kept, source)
        return cls(**kept)

    @classmethod
    def check_unread_keys(cls, values: Mapping[str, Any], source: str) -> None:
        """Raises a `ConfigError` for a key kbert does not read whose value builds another model
        (Hugging Face's ALBERT groups, RoFormer's rotated values); nothing in BERT's configs."""

    @classmethod
    def from_json_file(cls, path: PathLike) -> "BertConfig":
        """Reads a Google `bert_config.json` or Hugging Face `config.json`."""
        path = os.fspath(path)
        return cls.from_dict(read_json_object(path), source=path)

    def to_dict(self) -> dict:
        """The config as a `bert_config.json` dict (optional keys that are not set left out)."""
        # pad_token_id is written as null when no id is padding (its default is 0).
        return {key: value for key, value in dataclasses.asdict(self).items()
                if value is not None or key == "pad_token_id"}

    def to_hf_dict(self) -> dict:
        """The config as Hugging Face's `config.json` holds it: Google's keys, which are Hugging Face's too; a
        family whose keys differ (DistilBERT's `dim`, ModernBERT's `layer_types`) writes its own."""
        return self.to_dict()

    def to_json_file(self, path: PathLike) -> None:
        """Writes the config as `bert_config.json` (atomically)."""
        atomic_write_text(path, json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")


def read_json_object(path: PathLike) -> dict:
    """The JSON object in a config file; errors name the file."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as handle:
            values = json.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, expected a bert_config.json file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(values).__name__}")
    return values


def bundled_config_path(name: str) -> str:
    """Path of a config shipped with kbert, e.g. `bundled_config_path("bert_base_chinese")`."""
    name = name if name.endswith(".json") else f"{name}.json"
    return str(resources.files("kbert.configs").joinpath(name))


def bundled_config_names() -> List[str]:
    """Names of the configs shipped with kbert (`bert_base_chinese`, ...)."""
    return sorted(entry.name[:-5] for entry in resources.files("kbert.configs").iterdir()
                  if entry.name.endswith(".json"))


def check_positive_int(value: Any, key: str, source: str) -> None:
    """Raises a `ConfigError` naming the file and `key` unless `value` is a positive integer."""
    check_whole_number(value, f"{source}: key {key!r}", error=ConfigError)


def _validate(values: Mapping[str, Any], source: str) -> None:
    missing = [key for key in _REQUIRED if key not in values]
    if missing:
        raise ConfigError(f"{source}: missing required key(s) {', '.join(repr(k) for k in missing)}")
    for key in _POSITIVE_INTS:
        if values.get(key) is not None or (key in _REQUIRED and key in values):
            check_positive_int(values[key], key, source)
    for key in _DROPOUTS:
        if key in values and not _is_probability(values[key]):
            raise ConfigError(f"{source}: key {key!r}: expected a number in [0, 1), got {values[key]!r}")
    for key in ("initializer_range", "layer_norm_eps"):
        if key in values and not is_positive_number(values[key]):
            raise ConfigError(f"{source}: key {key!r}: expected a finite positive number, "
                              f"got {values[key]!r}")
    act = values.get("hidden_act", "gelu")
    if not isinstance(act, str) or act not in ACTIVATIONS:
        raise ConfigError(
            f"{source}: key 'hidden_act': unsupported activation {act!r}; "
            f"expected one of {', '.join(sorted(ACTIVATIONS))}"
        )
    pad = values.get("pad_token_id")
    if pad is not None and (isinstance(pad, bool) or not isinstance(pad, int) or not 0 <= pad < values["vocab_size"]):
        raise ConfigError(f"{source}: key 'pad_token_id': expected an id in [0, vocab_size {values['vocab_size']}) "
                          f"or null (no id is padding), got {pad!r}")
    if values.get("attention_head_size") is None:
        hidden, heads = values["hidden_size"], values["num_attention_heads"]
        if hidden % heads:
            raise ConfigError(
                f"{source}: key 'num_attention_heads': {heads} does not divide hidden_size {hidden}"
            )


# Llama's keys (EuroBERT's, the decoders') -> kbert's (BERT's) keys.
LLAMA_RENAMED = {"rms_norm_eps": "layer_norm_eps", "attention_dropout": "attention_probs_dropout_prob"}


def with_own_keys(values: Mapping[str, Any], renamed: Mapping[str, str]) -> dict:
    """`values` with a family's own keys (`renamed`: its key -> BERT's) under BERT's names. Where a file holds both
    names (DistilBERT's `activation` and a `hidden_act`), the family's own is the one transformers reads, so it
    wins whatever the order of the keys.

    >>> with_own_keys({"activation": "relu", "hidden_act": "gelu"}, {"activation": "hidden_act"})
    {'hidden_act': 'relu'}
    """
    shadowed = {bert for own, bert in renamed.items() if own in values}
    return {renamed.get(key, key): value for key, value in values.items() if key not in shadowed}


def legacy_rope_scaling(values: Mapping[str, Any]) -> Optional[Mapping[str, Any]]:
    """The older `rope_scaling` key as transformers 5 reads it: where set, it takes the place of `rope_parameters`,
    its `type` read as `rope_type`, and the config's `rope_theta` its θ where it names none. None where unset."""
    scaling = values.get("rope_scaling") if isinstance(values, Mapping) else None
    if not scaling:
        return None
    if not isinstance(scaling, Mapping):
        return scaling  # not an object: refused by the reader that checks the type
    return {"rope_type": scaling.get("type", "default"), **scaling,
            **({"rope_theta": values["rope_theta"]} if "rope_theta" in values and "rope_theta" not in scaling else {})}


def with_rope_theta(values: Mapping[str, Any], source: str, linear: bool = False,
                    scaled: Mapping[str, Tuple[str, ...]] = {}) -> Mapping[str, Any]:
    """`values` with transformers 5's `rope_parameters` (or the older `rope_scaling`, which transformers reads in
    its place) read into `rope_theta` (and, where the family computes `linear` scaling, its `factor` into
    `rope_factor`; where it computes a type of `scaled`, `{rope_type: the keys it needs}`, the parameters but θ
    into `scaled_rope`, each needed key checked); any other scaled `rope_type` (yarn, dynamic, ...) is a
    `ConfigError`."""
    legacy = legacy_rope_scaling(values)
    key = "rope_scaling" if legacy is not None else "rope_parameters"
    rope = legacy or (values.get("rope_parameters") if isinstance(values, Mapping) else None)
    if rope is None:
        return values
    if not isinstance(rope, Mapping):
        raise ConfigError(f"{source}: key {key!r}: expected an object (rope_type, rope_theta, ...), got {rope!r}")
    kinds = ("default", "linear", *scaled) if linear else ("default", *scaled)
    kind = rope.get("rope_type", "default")
    if kind not in kinds:
        raise ConfigError(f"{source}: key {key!r}: rope_type {rope['rope_type']!r} scales the rotary "
                          f"positions; kbert builds rope_type {' or '.join(map(repr, kinds))} here")
    factor = {"rope_factor": rope.get("factor")} if kind == "linear" else {}
    if kind in scaled:
        missing = [name for name in scaled[kind] if rope.get(name) is None]
        if missing:
            raise ConfigError(f"{source}: key {key!r}: rope_type {kind!r} needs {', '.join(map(repr, missing))}")
        factor = {"scaled_rope": {name: value for name, value in rope.items() if name not in ("rope_theta", "type")}}
    kept = {name: value for name, value in values.items() if name != "rope_scaling"}
    return {**kept, **({"rope_theta": rope["rope_theta"]} if "rope_theta" in rope else {}), **factor}


def rope_parameters(theta: float, factor: Optional[float]) -> dict:
    """transformers 5's `rope_parameters` of a rotary base and, where set, its linear scaling factor."""
    if factor is None:
        return {"rope_type": "default", "rope_theta": theta}
    return {"rope_type": "linear", "rope_theta": theta, "factor": factor}


def check_rope_theta(values: Mapping[str, Any], key: str, source: str, default: float = 10000.0) -> None:
    """Refuses a rotary base `values[key]` that is not a number above 1 (a string, 0 or less: NaN at the first
    call), and a linear scaling `rope_factor` that is not a positive number."""
    theta = values.get(key, default)
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not 1 < theta < float("inf"):
        raise ConfigError(f"{source}: key {key!r}: expected a number > 1 (the rotary base), got {theta!r}")
    factor = values.get("rope_factor")
    if factor is not None and (isinstance(factor, bool) or not isinstance(factor, (int, float))
                               or not 0 < factor < float("inf")):
        raise ConfigError(f"{source}: key 'rope_parameters': factor {factor!r}: expected a positive number")


def check_key_value_heads(values: Mapping[str, Any], source: str) -> None:
    """A `num_key_value_heads` (grouped-query attention: each key and value head shared by a group of query heads)
    that is not a whole number dividing `num_attention_heads` is a `ConfigError`; None: one each."""
    groups, heads = values.get("num_key_value_heads"), values["num_attention_heads"]
    if groups is not None and (isinstance(groups, bool) or not isinstance(groups, int) or groups < 1
                               or heads % groups):
        raise ConfigError(f"{source}: key 'num_key_value_heads': expected a whole number that divides "
                          f"num_attention_heads {heads}, got {groups!r}")


def check_fixed_settings(values: Mapping[str, Any], fixed: Mapping[str, Tuple[Any, Any]], source: str,
                         model: str, whose: str) -> None:
    """A hub release's own config (its remote code's keys): each key of `fixed` (`key: (the code's default, the
    value kbert computes)`), its default counted where it is absent, must be the value kbert computes; else a
    `ConfigError` naming the key, the `model` kbert builds and `whose` models those settings are."""
    for key, (default, computed) in fixed.items():
        if values.get(key, default) != computed:
            raise ConfigError(f"{source}: key {key!r} is {values.get(key, default)!r}; kbert builds {model} with "
                              f"{key} {computed!r} ({whose})")


def check_head_dim(values: Mapping[str, Any], source: str) -> None:
    """A `head_dim` key (Llama's, NomicBERT's) other than hidden_size / num_attention_heads is a `ConfigError`."""
    size, hidden, heads = values.get("head_dim"), values.get("hidden_size"), values.get("num_attention_heads")
    if size is not None and isinstance(hidden, int) and isinstance(heads, int) and heads and size != hidden // heads:
        raise ConfigError(f"{source}: key 'head_dim': {size} is not hidden_size / num_attention_heads "
                          f"({hidden} / {heads}); kbert builds heads of that width")


def check_even_head_size(values: Mapping[str, Any], source: str, why: str) -> None:
    """For position encodings that pair a head's features: an odd head size is a `ConfigError`.

    Call after `BertConfig.check` (the sizes are whole and divide).
    """
    size = values["hidden_size"] // values["num_attention_heads"]
    if size % 2:
        raise ConfigError(f"{source}: key 'num_attention_heads': hidden_size {values['hidden_size']} / "
                          f"{values['num_attention_heads']} heads = {size} features a head, an odd number; {why}, "
                          "so a head needs an even number: change num_attention_heads or hidden_size")


def is_positive_number(value: Any) -> bool:
    """A finite number above 0 (not a bool, not NaN)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf


def _is_probability(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1
