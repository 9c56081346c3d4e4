"""Mistral's config (`model_type` mistral: e5-mistral, SFR-Embedding): Llama's keys without biases, and every
block's attention in `sliding_window` (default 4,096; null: none)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, Tuple

from kbert.models.llama.config import LlamaConfig


@dataclasses.dataclass(frozen=True)
class MistralConfig(LlamaConfig):
    """`LlamaConfig` with Mistral's keys: `sliding_window` on every block (transformers' Mistral ignores
    `layer_types`), no `attention_bias` or `mlp_bias`.

    Example: e5-mistral-7b-instruct's shape.
    >>> config = MistralConfig.from_dict({"vocab_size": 32000, "hidden_size": 4096, "num_hidden_layers": 32,
    ...     "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336})
    >>> config.sliding_window, config.window_of(31), config.max_position_embeddings
    (4096, 4096, 131072)
    """

    family: ClassVar[str] = "mistral"
    own_hf_keys: ClassVar[Tuple[str, ...]] = ()
    unread_keys: ClassVar[Tuple[str, ...]] = ("attention_bias", "mlp_bias", "layer_types")

    max_position_embeddings: int = 131072
    num_key_value_heads: int = 8

    @classmethod
    def read_own_keys(cls, values: Mapping[str, Any], source: str) -> Mapping[str, Any]:
        return {"sliding_window": 4096, **super().read_own_keys(values, source)}

    def to_dict(self) -> dict:  # null kept: no window, where a missing key means 4,096
        return {**super().to_dict(), "sliding_window": self.sliding_window}

    def hf_window_keys(self) -> dict:
        return {"sliding_window": self.sliding_window}
