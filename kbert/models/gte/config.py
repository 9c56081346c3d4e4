"""GTE's config (`model="gte"`), and Alibaba's own `config.json` (model_type "new") read as transformers 5's."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

from kbert.errors import ConfigError, is_whole_number
from kbert.models.config import check_fixed_settings
from kbert.models.rotary_bert.config import RotaryBertConfig


#: The settings of Alibaba's own code (its `NewConfig`, model_type "new") that kbert computes one way only:
#: `key: (NewConfig's default, the value kbert computes)`.
NEW_FIXED = {"layer_norm_type": ("layer_norm", "layer_norm"), "logn_attention_scale": (False, False),
             "pack_qkv": (True, True)}


def from_new_keys(values: Mapping[str, Any], source: str) -> dict:
    """Alibaba's own `config.json` (model_type "new": the hub's gte-*-en-v1.5 and gte-multilingual folders) as
    transformers 5's gte: BERT's keys are the same; `rope_scaling` of type `ntk` (gte-base-en-v1.5's factor 2) is
    its code's fixed NTK scaling, frequencies `(θ·f)^(−2i/d) / f^(2/d)`, which is transformers' `linear` scaling
    of θ·f by `f^(2/d)`. A setting of its code that builds another model (RMSNorm, log-n attention scaling,
    separate query/key/value tensors, mixed NTK) is a `ConfigError` naming the key."""
    check_fixed_settings(values, NEW_FIXED, source, "GTE", "the released models'")
    kept = {key: value for key, value in values.items() if key not in ("rope_scaling", *NEW_FIXED)}
    return {**ntk_as_linear(kept, values.get("rope_scaling"), source), "model_type": "gte"}


def ntk_as_linear(values: Mapping[str, Any], scaling: Any, source: str) -> dict:
    """`values` with Alibaba's fixed NTK `rope_scaling` (`{"type": "ntk", "factor": f}`) as `rope_theta` θ·f and
    `rope_factor` f^(2/d), d the head size (the same frequencies); none (null) leaves them as they are, and so do
    sizes that are not whole numbers (the config's check names them next)."""
    sizes = values.get("hidden_size"), values.get("num_attention_heads")
    if scaling is None or not all(is_whole_number(size) for size in sizes):
        return dict(values)
    kind = scaling.get("type", scaling.get("rope_type")) if isinstance(scaling, Mapping) else None
    factor, theta = (scaling.get("factor") if isinstance(scaling, Mapping) else None), values.get("rope_theta")
    numbers = all(isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
                  for value in (factor, theta))
    if kind != "ntk" or not numbers or scaling.get("mixed_b") is not None:
        raise ConfigError(f"{source}: key 'rope_scaling' {scaling!r}: kbert builds GTE with none (null) or fixed NTK "
                          "scaling ({\"type\": \"ntk\", \"factor\": a positive number}, and a rope_theta)")
    head_size = sizes[0] // sizes[1]
    return {**values, "rope_theta": theta * factor, "rope_factor": factor ** (2 / head_size)}


@dataclasses.dataclass(frozen=True)
class GteConfig(RotaryBertConfig):
    """`RotaryBertConfig` with GTE's defaults (θ 160,000, 8,192 positions, padding id 1). Alibaba's own
    `config.json` (model_type "new": `from_new_keys`) reads as transformers 5's.

    Example:
    >>> GteConfig.from_dict({"vocab_size": 30528, "hidden_size": 768, "num_hidden_layers": 12,
    ...     "num_attention_heads": 12, "intermediate_size": 3072, "type_vocab_size": 0}).rope_theta
    160000.0
    >>> config = GteConfig.from_dict({"model_type": "new", "vocab_size": 30528, "hidden_size": 768,
    ...     "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "type_vocab_size": 0,
    ...     "rope_theta": 500000, "rope_scaling": {"type": "ntk", "factor": 2.0}})  # gte-base-en-v1.5's, abridged
    >>> config.model_type, config.rope_theta, round(config.rope_factor, 6)
    ('gte', 1000000.0, 1.021897)
    """

    family: ClassVar[str] = "gte"

    max_position_embeddings: int = 8192
    layer_norm_eps: float = 1e-12
    attention_probs_dropout_prob: float = 0.0
    pad_token_id: Any = 1
    rope_theta: float = 160000.0

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str = "config") -> "GteConfig":
        if isinstance(values, Mapping) and values.get("model_type") == "new":  # Alibaba's own keys
            values = from_new_keys(values, source)
        return super().from_dict(values, source)
