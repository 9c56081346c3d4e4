"""Qwen2's config (`model_type` qwen2: gte-Qwen2): Llama's keys, biases on the queries, keys and values alone, and
sliding layers set by `use_sliding_window` and `max_window_layers`."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, Optional, Tuple

from kbert.models.llama.config import LlamaConfig


class QwenWindow:
    """Qwen's window keys (`qwen_window`), read and written: a config class's base before `LlamaConfig`."""

    @classmethod
    def read_own_keys(cls, values: Mapping[str, Any], source: str) -> Mapping[str, Any]:
        return qwen_window(super().read_own_keys(values, source))

    def to_dict(self) -> dict:  # read back by `qwen_window`, which needs use_sliding_window
        return {**super().to_dict(), "use_sliding_window": self.sliding_window is not None}

    def hf_window_keys(self) -> dict:
        return {"use_sliding_window": self.sliding_window is not None, "sliding_window": self.sliding_window,
                **({"layer_types": list(self.layer_types)} if self.layer_types else {})}


@dataclasses.dataclass(frozen=True)
class Qwen2Config(QwenWindow, LlamaConfig):
    """`LlamaConfig` with Qwen2's keys: `use_sliding_window` (default false) turns on `sliding_window` (default
    4,096) for the blocks from `max_window_layers` (default 28) on, or those `layer_types` names.

    Example: gte-Qwen2-1.5B-instruct's shape (its config turns the window off).
    >>> config = Qwen2Config.from_dict({"vocab_size": 151646, "hidden_size": 1536, "num_hidden_layers": 28,
    ...     "num_attention_heads": 12, "num_key_value_heads": 2, "intermediate_size": 8960,
    ...     "use_sliding_window": False, "sliding_window": 131072, "max_window_layers": 21})
    >>> config.head_size, config.sliding_window, config.attention_bias
    (128, None, True)
    """

    family: ClassVar[str] = "qwen2"
    own_hf_keys: ClassVar[Tuple[str, ...]] = ()
    unread_keys: ClassVar[Tuple[str, ...]] = ("attention_bias", "mlp_bias")
    output_bias: ClassVar[Optional[bool]] = False

    max_position_embeddings: int = 32768
    attention_bias: bool = True  # on q_proj, k_proj and v_proj (transformers' Qwen2 always has them)


def qwen_window(values: Mapping[str, Any]) -> dict:
    """Qwen's window keys as transformers reads them: `sliding_window` (default 4,096) only where
    `use_sliding_window`, on the blocks `layer_types` names, or else on those from `max_window_layers` (default 28)
    on."""
    kept = {key: value for key, value in values.items() if key not in ("use_sliding_window", "max_window_layers")}
    window = values.get("sliding_window", 4096)
    if not values.get("use_sliding_window", False) or window is None:
        return {**kept, "sliding_window": None, "layer_types": None}
    types = values.get("layer_types")
    if types is None:
        first = values.get("max_window_layers", 28)
        types = ["sliding_attention" if index >= first else "full_attention"
                 for index in range(values.get("num_hidden_layers") or 0)]
    return {**kept, "sliding_window": window, "layer_types": types}
