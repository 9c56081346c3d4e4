"""Gemma 3's text config (`model_type` gemma3_text: EmbeddingGemma, Gemma 3's causal LMs) as transformers 5 reads it.

Llama's keys, and Gemma's own: `hidden_activation`, `query_pre_attn_scalar` (the scores' scale), sliding and full
layers (`layer_types`, or the older `sliding_window_pattern`) whose rotations turn at two bases (transformers 5's
`rope_parameters` by layer type, or the older `rope_theta`, `rope_local_base_freq` and `rope_scaling`, which scales
the full layers alone), `final_logit_softcapping` on the LM head's logits.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, Optional, Tuple

from kbert.errors import ConfigError
from kbert.models.config import (check_positive_int, check_rope_theta, is_positive_number, with_own_keys,
                                 with_rope_theta)
from kbert.models.llama.config import SCALED_ROPE, LlamaConfig

FULL, SLIDING = "full_attention", "sliding_attention"


@dataclasses.dataclass(frozen=True)
class Gemma3Config(LlamaConfig):
    """`LlamaConfig` with Gemma 3's keys.

    Args (beyond Llama's):
        query_pre_attn_scalar: the scores are scaled by its inverse square root (not the head's width's).
        rope_local_base_freq: the rotary base θ of the sliding layers (`rope_theta`: the full layers').
        final_logit_softcapping: the LM head's logits `c · tanh(logits / c)`; None: as they are.

    A sliding layer of a causal model sees the `sliding_window` keys ending at each query; of a bidirectional one
    (`use_bidirectional_attention`: EmbeddingGemma) the keys within `sliding_window // 2` of it, as transformers
    computes it. `attn_logit_softcapping` is read as transformers 5 reads it: not at all.

    Example: EmbeddingGemma-300m's shape (written from memory of the hub's config).
    >>> config = Gemma3Config.from_dict({"vocab_size": 262144, "hidden_size": 768, "num_hidden_layers": 24,
    ...     "num_attention_heads": 3, "num_key_value_heads": 1, "intermediate_size": 1152, "head_dim": 256,
    ...     "sliding_window": 512, "use_bidirectional_attention": True, "rope_theta": 1000000.0,
    ...     "rope_local_base_freq": 10000.0})
    >>> config.layer_types[:6], config.window_of(0), config.window_of(5), config.rope_of(0), config.rope_of(5)
    (('sliding_attention', 'sliding_attention', 'sliding_attention', 'sliding_attention', 'sliding_attention', \
'full_attention'), 256, None, (10000.0, None, None), (1000000.0, None, None))
    """

    family: ClassVar[str] = "gemma3_text"
    own_hf_keys: ClassVar[Tuple[str, ...]] = ("attention_bias", "query_pre_attn_scalar", "final_logit_softcapping",
                                              "sliding_window")
    unread_keys: ClassVar[Tuple[str, ...]] = ("mlp_bias", "attn_logit_softcapping")
    qk_norm: ClassVar[bool] = True

    hidden_act: str = "gelu_pytorch_tanh"
    max_position_embeddings: int = 131072
    pad_token_id: Optional[int] = 0
    num_key_value_heads: Optional[int] = 4
    head_dim: Optional[int] = 256
    rope_theta: float = 1000000.0
    rope_local_base_freq: float = 10000.0
    tie_word_embeddings: bool = True
    sliding_window: Optional[int] = 4096
    query_pre_attn_scalar: float = 256
    final_logit_softcapping: Optional[float] = None

    @classmethod
    def read_own_keys(cls, values: Mapping[str, Any], source: str) -> Mapping[str, Any]:
        values = with_own_keys(super().read_own_keys(values, source), {"hidden_activation": "hidden_act"})
        values = {**values, **_rope_bases(values, source)}
        if values.get("layer_types") is None:  # the older key: every pattern-th block full, the others sliding
            pattern = values.get("sliding_window_pattern", 6)
            check_positive_int(pattern, "sliding_window_pattern", source)
            values = {**values, "layer_types": [SLIDING if (index + 1) % pattern else FULL
                                                for index in range(values.get("num_hidden_layers") or 0)]}
        return {key: value for key, value in values.items()
                if key not in ("sliding_window_pattern", "rope_parameters", "rope_scaling")}

    @classmethod
    def check(cls, values: Mapping[str, Any], source: str) -> None:
        super().check(values, source)
        check_rope_theta(values, "rope_local_base_freq", source)
        for key in ("query_pre_attn_scalar", "final_logit_softcapping"):
            value = values.get(key)
            if value is not None and not is_positive_number(value):
                raise ConfigError(f"{source}: key {key!r}: expected a finite positive number, got {value!r}")

    def window_of(self, index: int) -> Optional[int]:
        """Block `index`'s window: the keys ending at a query (causal), or the distance either side within which
        a query sees (bidirectional: transformers' exclusive bound `sliding_window // 2 + 1`); None: every key."""
        window = super().window_of(index)
        if window is None or not self.use_bidirectional_attention:
            return window
        return window // 2

    def rope_of(self, index: int) -> tuple:
        """Block `index`'s rotations: `(θ, linear factor, llama3's or yarn's parameters)` (the sliding layers turn
        at `rope_local_base_freq`, unscaled)."""
        if self.layer_types is not None and self.layer_types[index] == SLIDING:
            return self.rope_local_base_freq, None, None
        return self.rope_theta, self.rope_factor, self.scaled_rope

    def to_hf_dict(self) -> dict:
        values = super().to_hf_dict()
        full = values.pop("rope_parameters")
        values["hidden_activation"] = values.pop("hidden_act")
        return {**values, "layer_types": list(self.layer_types),
                "rope_parameters": {FULL: full, SLIDING: {"rope_type": "default",
                                                          "rope_theta": self.rope_local_base_freq}}}


def _rope_bases(values: Mapping[str, Any], source: str) -> dict:
    """The two kinds of layer's rotations as transformers 5 reads them: `rope_parameters` by layer type; the
    older `rope_scaling` added to the full layers', their θ from `rope_theta` (default 10⁶) and the sliding ones'
    from `rope_local_base_freq` (10⁴) where not given. The full layers may be scaled (linear, llama3, yarn), the
    sliding ones not: a `ConfigError` names what kbert does not build."""
    nested, scaling = values.get("rope_parameters"), values.get("rope_scaling")
    if nested is None and not scaling:
        return {}
    if nested is not None and not (isinstance(nested, Mapping) and set(nested) <= {FULL, SLIDING}
                                   and all(isinstance(part, (Mapping, type(None))) for part in nested.values())):
        raise ConfigError(f"{source}: key 'rope_parameters': expected an object of {FULL!r} and {SLIDING!r}, each "
                          f"its layers' rope_type and rope_theta, got {nested!r}")
    if scaling and not isinstance(scaling, Mapping):
        raise ConfigError(f"{source}: key 'rope_scaling': expected an object (rope_type, ...), got {scaling!r}")
    full = {"rope_type": "default", **((nested or {}).get(FULL) or {})}
    if scaling:
        full.update({"rope_type": scaling.get("type", "default"), **scaling})
    full.setdefault("rope_theta", values.get("rope_theta", Gemma3Config.rope_theta))
    sliding = {"rope_type": "default", **((nested or {}).get(SLIDING) or {})}
    sliding.setdefault("rope_theta", values.get("rope_local_base_freq", Gemma3Config.rope_local_base_freq))
    read_full = with_rope_theta({"rope_parameters": full}, f"{source} ({FULL} layers)", linear=True,
                                scaled=SCALED_ROPE)
    read_sliding = with_rope_theta({"rope_parameters": sliding}, f"{source} ({SLIDING} layers)")
    return {**{key: value for key, value in read_full.items() if key != "rope_parameters"},
            "rope_local_base_freq": read_sliding["rope_theta"]}
