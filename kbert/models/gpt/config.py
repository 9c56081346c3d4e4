"""GPT-2's config: BERT's keys, or Hugging Face's GPT-2 keys (`n_embd`, `n_layer`, ...) read natively."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

from kbert.errors import ConfigError
from kbert.models.config import BertConfig

# bert4keras's GPT-2 normalises with this epsilon whatever the config says; so does Hugging Face's by default.
GPT2_NORM_EPSILON = 1e-5
# Hugging Face's GPT-2 key -> kbert's (BERT's) key.
_HF_KEYS = {"n_embd": "hidden_size", "n_layer": "num_hidden_layers", "n_head": "num_attention_heads",
            "n_inner": "intermediate_size", "n_positions": "max_position_embeddings",
            "activation_function": "hidden_act", "resid_pdrop": "hidden_dropout_prob",
            "attn_pdrop": "attention_probs_dropout_prob"}


@dataclasses.dataclass(frozen=True)
class Gpt2Config(BertConfig):
    """BERT's keys, as bert4keras's GPT-2 configs write them; a Hugging Face GPT-2 `config.json`
    (recognised by `n_embd`) is read in its own keys.

    Example:
    >>> config = Gpt2Config.from_dict({"model_type": "gpt2", "vocab_size": 64, "n_embd": 16, "n_layer": 2,
    ...                                "n_head": 4, "n_inner": None, "n_positions": 32,
    ...                                "activation_function": "gelu_new"})
    >>> config.hidden_size, config.intermediate_size, config.activation
    (16, 64, 'gelu_tanh')
    """

    family: ClassVar[str] = "gpt2"

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str = "config") -> "Gpt2Config":
        if isinstance(values, Mapping) and "n_embd" in values:
            translated = {_HF_KEYS.get(key, key): value for key, value in values.items() if value is not None}
            if values.get("n_inner") is None and isinstance(values["n_embd"], int):
                translated["intermediate_size"] = 4 * values["n_embd"]  # Hugging Face's default
            # Hugging Face's GPT-2 has no padding id (its id 0 is "!") unless the config names one. A padding id
            # equal to the end id (fine-tuned GPT-2s often set both to 50256) is no padding id: the end token is
            # a real token, attended to and generated, as transformers' generate takes it in that case.
            pad = values.get("pad_token_id")
            values = {**translated, "pad_token_id": None if pad is not None and pad == values.get("eos_token_id")
                      else pad}
        return super().from_dict(values, source)

    @classmethod
    def check_unread_keys(cls, values: Mapping[str, Any], source: str) -> None:
        refused = {"layer_norm_epsilon": (GPT2_NORM_EPSILON, f"bert4keras's GPT-2 normalises with ε {GPT2_NORM_EPSILON}"),
                   "scale_attn_weights": (True, "bert4keras's GPT-2 scales attention scores by 1/√d"),
                   "scale_attn_by_inverse_layer_idx": (False, "bert4keras's GPT-2 scales every layer alike"),
                   "add_cross_attention": (False, "kbert's GPT-2 is a language model, without cross-attention")}
        for key, (expected, why) in refused.items():
            if key in values and values[key] != expected:
                raise ConfigError(f"{source}: key {key!r}: {why} (expected {expected!r}, got {values[key]!r})")
