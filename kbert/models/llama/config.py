"""Llama's config as transformers 5 writes it, the base of the decoders built like it (Qwen2, Qwen3, Mistral).

The keys are Llama's (`num_key_value_heads`, `head_dim`, `rms_norm_eps`, `rope_parameters`, `attention_bias`,
`mlp_bias`, `tie_word_embeddings`); `use_bidirectional_attention` makes the blocks bidirectional (the embedders
trained so: Llama-Embed-Nemotron, EmbeddingGemma). A decoder family states its own keys in `own_keys` and
`own_hf_keys`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Dict, Mapping, Optional, Tuple

from kbert.errors import ConfigError
from kbert.models.config import (LLAMA_RENAMED, BertConfig, check_key_value_heads, check_positive_int,
                                 check_rope_theta, rope_parameters, with_own_keys, with_rope_theta)

# The rope_types whose frequencies kbert computes beside `default` and `linear`, and the keys each needs.
SCALED_ROPE = {"llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
               "yarn": ("factor",)}
LAYER_TYPES = ("full_attention", "sliding_attention")


@dataclasses.dataclass(frozen=True)
class LlamaConfig(BertConfig):
    """`BertConfig` with Llama's keys.

    Args (beyond BERT's):
        num_key_value_heads: key and value heads, each shared by a group of query heads (None: one each).
        head_dim: a head's width where it is not hidden_size / num_attention_heads (Qwen3's 128).
        rope_theta: the rotary base θ (`rope_parameters["rope_theta"]`).
        rope_factor: `linear` scaling's factor (None: none).
        scaled_rope: llama3's or yarn's `rope_parameters` (their type and keys); None: neither.
        attention_bias: biases in the four attention projections; mlp_bias: in the feed-forward's three.
        tie_word_embeddings: the LM head is the token table.
        sliding_window: the keys a query sees in a sliding layer (those ending at it); None: no sliding layer.
        layer_types: each block's `full_attention` or `sliding_attention` (None: every block slides where
            `sliding_window` is set).
        use_bidirectional_attention: every query sees every key (an embedder trained so); False: causal.
        bos_token_id, eos_token_id: kept for the config kbert writes.

    Example: Llama 3.2 1B's shape.
    >>> config = LlamaConfig.from_dict({"vocab_size": 128256, "hidden_size": 2048, "num_hidden_layers": 16,
    ...     "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192, "rms_norm_eps": 1e-5,
    ...     "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
    ...     "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})
    >>> config.key_value_heads, config.head_size, config.rope_theta, config.scaled_rope["rope_type"]
    (8, 64, 500000.0, 'llama3')
    """

    family: ClassVar[str] = "llama"
    # The keys of Llama's that the family's transformers class reads and writes ...
    own_hf_keys: ClassVar[Tuple[str, ...]] = ("attention_bias", "mlp_bias")
    # ... and those it never reads, left out where a file holds them (transformers' Llama has no sliding layer).
    unread_keys: ClassVar[Tuple[str, ...]] = ("sliding_window", "layer_types")
    # The output projection's bias where it does not follow attention_bias (Qwen2's: none).
    output_bias: ClassVar[Optional[bool]] = None
    # An RMS norm on each head's queries and keys (Qwen3's q_norm and k_norm).
    qk_norm: ClassVar[bool] = False

    hidden_act: str = "silu"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 2048
    layer_norm_eps: float = 1e-6
    pad_token_id: Optional[int] = None
    num_key_value_heads: Optional[int] = None
    head_dim: Optional[int] = None
    rope_theta: float = 10000.0
    rope_factor: Optional[float] = None
    scaled_rope: Optional[Dict[str, Any]] = None
    attention_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    sliding_window: Optional[int] = None
    layer_types: Optional[Tuple[str, ...]] = None
    use_bidirectional_attention: bool = False
    bos_token_id: Optional[int] = None
    eos_token_id: Any = None

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str = "config") -> "LlamaConfig":
        if not isinstance(values, Mapping):
            return super().from_dict(values, source)
        values = cls.read_own_keys(with_own_keys(_with_direction(values, source), LLAMA_RENAMED), source)
        if isinstance(values.get("layer_types"), list):
            values = {**values, "layer_types": tuple(values["layer_types"])}
        values = with_rope_theta(values, source, linear=True, scaled=SCALED_ROPE)
        if values.get("scaled_rope") is not None:
            # transformers' default: the family's max_position_embeddings (its own default where the file has none)
            longest = values.get("max_position_embeddings", cls.__dataclass_fields__["max_position_embeddings"].default)
            values = {**values, "scaled_rope": {"original_max_position_embeddings": longest, **values["scaled_rope"]}}
        return super().from_dict(values, source)

    @classmethod
    def read_own_keys(cls, values: Mapping[str, Any], source: str) -> Mapping[str, Any]:
        """`values` without the keys the family's transformers class never reads, and with its own keys turned
        into this config's (Qwen's `use_sliding_window`)."""
        return {key: value for key, value in values.items() if key not in cls.unread_keys}

    @classmethod
    def check(cls, values: Mapping[str, Any], source: str) -> None:
        super().check({**values, "attention_head_size": values.get("head_dim")}, source)
        if values.get("head_dim") is not None:
            check_positive_int(values["head_dim"], "head_dim", source)
        size = values.get("head_dim") or values["hidden_size"] // values["num_attention_heads"]
        if size % 2:
            raise ConfigError(f"{source}: key 'head_dim': {size} features a head, an odd number; rotary positions "
                              "turn a head's two halves against each other")
        check_rope_theta(values, "rope_theta", source)
        check_key_value_heads(values, source)
        if values.get("sliding_window") is not None:
            check_positive_int(values["sliding_window"], "sliding_window", source)
        types = values.get("layer_types")
        if types is not None and (len(types) != values["num_hidden_layers"]
                                  or any(kind not in LAYER_TYPES for kind in types)):
            raise ConfigError(f"{source}: key 'layer_types': expected {values['num_hidden_layers']} of "
                              f"{' or '.join(LAYER_TYPES)} (one a block), got {list(types)!r}")

    @classmethod
    def check_unread_keys(cls, values: Mapping[str, Any], source: str) -> None:
        partial = values.get("partial_rotary_factor", 1.0)
        if partial != 1.0:
            raise ConfigError(f"{source}: key 'partial_rotary_factor' is {partial!r}: kbert turns a head's every "
                              "feature (1.0)")
        if values.get("pretraining_tp", 1) not in (1, None):
            raise ConfigError(f"{source}: key 'pretraining_tp' is {values['pretraining_tp']!r}: kbert computes each "
                              "projection whole (1)")

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def key_value_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    def window_of(self, index: int) -> Optional[int]:
        """The sliding window of block `index`, None where it sees every earlier key."""
        if self.sliding_window is None:
            return None
        sliding = self.layer_types is None or self.layer_types[index] == "sliding_attention"
        return self.sliding_window if sliding else None

    def to_hf_dict(self) -> dict:
        """The config in the family's keys, as transformers writes them."""
        values = self.to_dict()
        common = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                  "hidden_act", "max_position_embeddings", "initializer_range", "tie_word_embeddings",
                  "bos_token_id", "eos_token_id", "pad_token_id", "model_type")
        own = {key: values[key] for key in common + self.own_hf_keys if key in values}
        scaled = rope_parameters(self.rope_theta, self.rope_factor)
        if self.scaled_rope is not None:
            scaled = {**self.scaled_rope, "rope_theta": self.rope_theta}
        return {**own, "num_key_value_heads": self.key_value_heads, "head_dim": self.head_size,
                "rms_norm_eps": self.layer_norm_eps, "attention_dropout": self.attention_probs_dropout_prob,
                "rope_parameters": scaled, **self.hf_window_keys(),
                **({"use_bidirectional_attention": True} if self.use_bidirectional_attention else {})}

    def hf_window_keys(self) -> dict:
        """The sliding-window keys transformers reads for the family (Llama: none)."""
        return {}


def _with_direction(values: Mapping[str, Any], source: str) -> Mapping[str, Any]:
    """`values` with `is_causal` (the key vLLM and some embedders' files use) read as `use_bidirectional_attention`'s
    opposite: a file that says its attention is not causal is not read as causal. Both, disagreeing: a
    `ConfigError`."""
    if "is_causal" not in values:
        return values
    bidirectional = not values["is_causal"]
    if values.get("use_bidirectional_attention", bidirectional) != bidirectional:
        raise ConfigError(f"{source}: keys 'is_causal' {values['is_causal']!r} and 'use_bidirectional_attention' "
                          f"{values['use_bidirectional_attention']!r} disagree; keep the one the model was trained with")
    return {**{key: value for key, value in values.items() if key != "is_causal"},
            "use_bidirectional_attention": bidirectional}
