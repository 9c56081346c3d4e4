"""ModernBERT's config as the hub's files write it (`global_attn_every_n_layers`, `local_attention`,
`global_rope_theta`, `local_rope_theta`) and as transformers 5 writes it (`layer_types`, `rope_parameters`)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, Optional, Tuple

from kbert.errors import ConfigError
from kbert.models.config import ACTIVATIONS, BertConfig, check_rope_theta, rope_parameters, with_own_keys

GLOBAL, LOCAL = "full_attention", "sliding_attention"
# ModernBERT's key -> kbert's (BERT's) key.
_RENAMED = {"hidden_activation": "hidden_act", "norm_eps": "layer_norm_eps", "embedding_dropout": "hidden_dropout_prob",
            "attention_dropout": "attention_probs_dropout_prob"}


@dataclasses.dataclass(frozen=True)
class ModernBertConfig(BertConfig):
    """`BertConfig` with ModernBERT's keys.

    Args (beyond BERT's):
        layer_types: each layer's attention, `full_attention` or `sliding_attention` (default: global on
            every `global_attn_every_n_layers`-th layer from the first, local elsewhere).
        local_attention: a local layer's window, both sides together (128: ±64 tokens).
        global_rope_theta, local_rope_theta: the rotary bases of the two kinds of layer.
        norm_bias, attention_bias, mlp_bias, classifier_bias, decoder_bias: where the model has biases.
        classifier_activation: the MLM and classifier head's activation.
        classifier_pooling: `cls` or `mean`, the sequence classifier's pooling.

    Example:
    >>> config = ModernBertConfig.from_dict({"vocab_size": 64, "hidden_size": 16, "num_hidden_layers": 4,
    ...     "num_attention_heads": 2, "intermediate_size": 24, "global_attn_every_n_layers": 3,
    ...     "local_attention": 8, "hidden_activation": "gelu", "norm_eps": 1e-5, "pad_token_id": 0})
    >>> config.layer_types, config.window, config.layer_norm_eps
    (('full_attention', 'sliding_attention', 'sliding_attention', 'full_attention'), 4, 1e-05)
    """

    family: ClassVar[str] = "modernbert"

    max_position_embeddings: int = 8192
    layer_norm_eps: float = 1e-5
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    pad_token_id: Optional[int] = 50283
    layer_types: Tuple[str, ...] = ()
    local_attention: int = 128
    global_rope_theta: float = 160000.0
    local_rope_theta: float = 10000.0
    norm_bias: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    classifier_bias: bool = False
    decoder_bias: bool = True
    classifier_activation: str = "gelu"
    classifier_pooling: str = "cls"

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str = "config") -> "ModernBertConfig":
        if not isinstance(values, Mapping):
            return super().from_dict(values, source)
        values = with_own_keys(values, _RENAMED)
        layers = values.get("num_hidden_layers")
        if values.get("layer_types") is None and isinstance(layers, int):
            every = values.get("global_attn_every_n_layers", 3)
            if isinstance(every, bool) or not isinstance(every, int) or every < 1:
                raise ConfigError(f"{source}: key 'global_attn_every_n_layers': expected a whole number ≥ 1, "
                                  f"got {every!r}")
            values["layer_types"] = [LOCAL if index % every else GLOBAL for index in range(layers)]
        values.update(_rope_thetas(values, source))
        if isinstance(values.get("layer_types"), list):
            values["layer_types"] = tuple(values["layer_types"])
        return super().from_dict(values, source)

    @classmethod
    def check(cls, values: Mapping[str, Any], source: str) -> None:
        super().check(values, source)
        kinds = values.get("layer_types", ())
        if not isinstance(kinds, (tuple, list)) or len(kinds) != values["num_hidden_layers"] or \
                any(kind not in (GLOBAL, LOCAL) for kind in kinds):
            raise ConfigError(f"{source}: key 'layer_types': expected one of {GLOBAL!r}, {LOCAL!r} for each of the "
                              f"{values['num_hidden_layers']} layers, got {kinds!r}")
        for key, default in (("global_rope_theta", 160000.0), ("local_rope_theta", 10000.0)):
            check_rope_theta(values, key, source, default)
        window = values.get("local_attention", 128)
        if isinstance(window, bool) or not isinstance(window, int) or window < 2 or window % 2:
            raise ConfigError(f"{source}: key 'local_attention': expected an even whole number ≥ 2 (the window, "
                              f"both sides together), got {window!r}")
        if values.get("classifier_activation", "gelu") not in ACTIVATIONS:
            raise ConfigError(f"{source}: key 'classifier_activation': expected one of {', '.join(ACTIVATIONS)}, "
                              f"got {values['classifier_activation']!r}")
        if values.get("classifier_pooling", "cls") not in ("cls", "mean"):
            raise ConfigError(f"{source}: key 'classifier_pooling': expected 'cls' or 'mean', "
                              f"got {values['classifier_pooling']!r}")

    @property
    def window(self) -> int:
        """A local layer's reach: each token sees the tokens within this many positions (`local_attention // 2`)."""
        return self.local_attention // 2

    def to_hf_dict(self) -> dict:
        """The config in ModernBERT's keys, as transformers writes them (`layer_types` and the two thetas)."""
        renamed = {value: key for key, value in _RENAMED.items()}
        own = {renamed.get(key, key): value for key, value in self.to_dict().items()
               if key not in ("type_vocab_size", "embedding_size", "hidden_dropout_prob")}
        return {**own, "layer_types": list(self.layer_types), "embedding_dropout": self.hidden_dropout_prob,
                "mlp_dropout": self.hidden_dropout_prob,
                "rope_parameters": {GLOBAL: rope_parameters(self.global_rope_theta, None),
                                    LOCAL: rope_parameters(self.local_rope_theta, None)}}


def _rope_thetas(values: Mapping[str, Any], source: str) -> dict:
    """Each kind of layer's rotary base from transformers 5's `rope_parameters` (`{"full_attention": {...},
    "sliding_attention": {...}}`) or the older `rope_scaling` (one setting for both kinds), as transformers reads
    them; a scaled `rope_type` (linear, yarn, ...) is refused by name: kbert builds ModernBERT's plain rotations."""
    scaling, nested = values.get("rope_scaling"), values.get("rope_parameters")
    if not scaling and nested is None:
        return {}
    if nested is not None and not (isinstance(nested, Mapping) and set(nested) <= {GLOBAL, LOCAL}):
        raise ConfigError(f"{source}: key 'rope_parameters': expected an object of {GLOBAL!r} and {LOCAL!r}, each "
                          f"its layers' rope_type and rope_theta, got {nested!r}")
    if scaling and not isinstance(scaling, Mapping):
        raise ConfigError(f"{source}: key 'rope_scaling': expected an object (rope_type, ...), got {scaling!r}")
    key = "rope_scaling" if scaling else "rope_parameters"
    settings = {kind: (nested or {}).get(kind) or {} for kind in (GLOBAL, LOCAL)}
    if scaling:  # transformers updates both kinds' settings with it
        settings = {kind: {**setting, **scaling} if isinstance(setting, Mapping) else setting
                    for kind, setting in settings.items()}
    thetas = {}
    for kind, theta_key in ((GLOBAL, "global_rope_theta"), (LOCAL, "local_rope_theta")):
        setting = settings[kind]
        if not isinstance(setting, Mapping):
            raise ConfigError(f"{source}: key {key!r}: expected an object (rope_type, rope_theta), got {setting!r}")
        kind_of_rope = setting.get("rope_type", setting.get("type", "default"))
        if kind_of_rope != "default":
            raise ConfigError(f"{source}: key {key!r}: rope_type {kind_of_rope!r} scales the rotary positions of the "
                              f"{kind} layers; kbert builds ModernBERT with rope_type 'default'")
        if "rope_theta" in setting:
            thetas[theta_key] = setting["rope_theta"]
    return thetas
