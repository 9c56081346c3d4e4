"""NomicBERT's config (`model="nomic_bert"`), and Nomic's own `config.json` (`n_embd`, `n_layer`, ...) read as
transformers 5's."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

from kbert.models.config import check_fixed_settings
from kbert.models.rotary_bert.config import RotaryBertConfig


#: Nomic's own `config.json` (its remote code's `NomicBertConfig`, a `GPT2Config`: the hub's nomic-embed-text
#: folders), by transformers 5's names for the same settings.
NOMIC_KEYS = {"n_embd": "hidden_size", "n_layer": "num_hidden_layers", "n_head": "num_attention_heads",
              "n_inner": "intermediate_size", "n_positions": "max_position_embeddings",
              "layer_norm_epsilon": "layer_norm_eps", "rotary_emb_base": "rope_theta",
              "resid_pdrop": "hidden_dropout_prob", "attn_pdrop": "attention_probs_dropout_prob"}
#: The settings of Nomic's code that kbert computes one way only: `key: (Nomic's default, the value kbert computes)`.
NOMIC_FIXED = {"activation_function": ("gelu_new", "swiglu"), "prenorm": (False, False),
               "parallel_block": (False, False), "qkv_proj_bias": (True, False), "mlp_fc1_bias": (True, False),
               "mlp_fc2_bias": (True, False), "rotary_emb_fraction": (0.0, 1.0),
               "rotary_emb_interleaved": (False, False),
               "use_rms_norm": (False, False), "causal": (False, False), "rotary_scaling_factor": (None, None),
               "rotary_emb_scale_base": (None, None)}


def from_nomic_keys(values: Mapping[str, Any], source: str) -> dict:
    """A config in Nomic's own keys (`n_embd`, `n_layer`, `rotary_emb_base`, ...) as transformers 5's: each setting
    renamed, a feed-forward of 4 × `n_embd` where `n_inner` is null (GPT-2's rule), padding id 0 where none is set
    (the BERT vocabulary's `[PAD]` that Nomic's tokenizers use). A setting of Nomic's code that builds another
    model than kbert's NomicBERT (biases, pre-norm, partial or interleaved rotation, scaled rotary positions, ...)
    is a `ConfigError` naming the key."""
    check_fixed_settings(values, NOMIC_FIXED, source, "NomicBERT", "nomic-embed-text's")
    renamed = {new: values[old] for old, new in NOMIC_KEYS.items() if old in values}
    if renamed.get("intermediate_size") is None and isinstance(renamed.get("hidden_size"), int):
        renamed["intermediate_size"] = 4 * renamed["hidden_size"]
    kept = {key: value for key, value in values.items() if key not in NOMIC_KEYS and key not in NOMIC_FIXED}
    return {**kept, **renamed, "hidden_act": "silu",
            "pad_token_id": values["pad_token_id"] if isinstance(values.get("pad_token_id"), int) else 0}


@dataclasses.dataclass(frozen=True)
class NomicBertConfig(RotaryBertConfig):
    """`RotaryBertConfig` with NomicBERT's defaults (θ 1,000, SiLU, no dropout, 2,048 positions, padding id 0).
    Nomic's own `config.json` (`n_embd`, `n_layer`, ...: `from_nomic_keys`) reads as transformers 5's.

    Example:
    >>> NomicBertConfig.from_dict({"vocab_size": 30528, "hidden_size": 768, "num_hidden_layers": 12,
    ...     "num_attention_heads": 12, "intermediate_size": 3072}).hidden_act
    'silu'
    >>> config = NomicBertConfig.from_dict({"model_type": "nomic_bert", "vocab_size": 30528, "n_embd": 768,
    ...     "n_layer": 12, "n_head": 12, "n_inner": 3072, "n_positions": 8192, "rotary_emb_base": 1000,
    ...     "rotary_emb_fraction": 1.0, "activation_function": "swiglu", "qkv_proj_bias": False,
    ...     "mlp_fc1_bias": False, "mlp_fc2_bias": False})  # nomic-embed-text-v1.5's, abridged
    >>> config.hidden_size, config.max_position_embeddings, config.rope_theta
    (768, 8192, 1000)
    """

    family: ClassVar[str] = "nomic_bert"

    hidden_act: str = "silu"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 2048
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: Any = 0
    rope_theta: float = 1000.0

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str = "config") -> "NomicBertConfig":
        if isinstance(values, Mapping) and "n_embd" in values:  # Nomic's own keys
            values = from_nomic_keys(values, source)
        return super().from_dict(values, source)
