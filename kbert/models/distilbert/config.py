"""DistilBERT's config: Hugging Face's keys (`dim`, `n_layers`, `n_heads`, `hidden_dim`, ...) read as BERT's."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

from kbert.errors import ConfigError
from kbert.models.config import BertConfig, with_own_keys

# Hugging Face's DistilBERT key -> kbert's (BERT's) key.
HF_KEYS = {"dim": "hidden_size", "n_layers": "num_hidden_layers", "n_heads": "num_attention_heads",
           "hidden_dim": "intermediate_size", "activation": "hidden_act", "dropout": "hidden_dropout_prob",
           "attention_dropout": "attention_probs_dropout_prob"}


@dataclasses.dataclass(frozen=True)
class DistilBertConfig(BertConfig):
    """`BertConfig` read from DistilBERT's `config.json` (recognised by `dim`), or from BERT's keys.

    DistilBERT normalises with ε 1e-12 whatever its config says (transformers
    hard-codes it), reads no segment ids and pads with id 0.

    Example:
    >>> config = DistilBertConfig.from_dict({"model_type": "distilbert", "vocab_size": 64, "dim": 16,
    ...                                      "n_layers": 2, "n_heads": 4, "hidden_dim": 32, "activation": "gelu"})
    >>> config.hidden_size, config.num_hidden_layers, config.intermediate_size
    (16, 2, 32)
    """

    family: ClassVar[str] = "distilbert"

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str = "config") -> "DistilBertConfig":
        if isinstance(values, Mapping) and "dim" in values:
            values = with_own_keys(values, HF_KEYS)
        return super().from_dict(values, source)

    @classmethod
    def check_unread_keys(cls, values: Mapping[str, Any], source: str) -> None:
        if values.get("tie_weights_") is False:
            raise ConfigError(f"{source}: key 'tie_weights_': kbert's DistilBERT ties its MLM output to the token "
                              "table, as every released DistilBERT does (expected true, got false)")

    def to_hf_dict(self) -> dict:
        """The config in DistilBERT's own keys, as transformers writes them."""
        keys = {value: key for key, value in HF_KEYS.items()}
        own = {keys.get(key, key): value for key, value in self.to_dict().items()
               if key not in ("type_vocab_size", "layer_norm_eps", "embedding_size")}
        return {**own, "sinusoidal_pos_embds": False, "tie_weights_": True}
