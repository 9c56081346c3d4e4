"""Qwen3's config (`model_type` qwen3: Qwen3-Embedding, Qwen3-Reranker): Qwen2's window keys, Llama's
`attention_bias` and `head_dim` (default 128), and norms on the queries and keys."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional, Tuple

from kbert.models.llama.config import LlamaConfig
from kbert.models.qwen2.config import QwenWindow


@dataclasses.dataclass(frozen=True)
class Qwen3Config(QwenWindow, LlamaConfig):
    """`LlamaConfig` with Qwen3's keys (its window keys as `Qwen2Config`'s).

    Example: Qwen3-Embedding-0.6B's shape.
    >>> config = Qwen3Config.from_dict({"vocab_size": 151669, "hidden_size": 1024, "num_hidden_layers": 28,
    ...     "num_attention_heads": 16, "num_key_value_heads": 8, "intermediate_size": 3072,
    ...     "tie_word_embeddings": True, "rope_theta": 1000000})
    >>> config.head_size, config.key_value_heads, config.rope_theta
    (128, 8, 1000000)
    """

    family: ClassVar[str] = "qwen3"
    own_hf_keys: ClassVar[Tuple[str, ...]] = ("attention_bias",)
    unread_keys: ClassVar[Tuple[str, ...]] = ("mlp_bias",)
    qk_norm: ClassVar[bool] = True

    max_position_embeddings: int = 32768
    head_dim: Optional[int] = 128
