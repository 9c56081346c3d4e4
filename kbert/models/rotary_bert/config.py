"""The config of the rotary post-norm encoders (Jina-v3, GTE, NomicBERT) as transformers 5 writes it:
BERT's keys, and the rotary base in `rope_parameters` (or the older `rope_theta`); each family's own defaults are
its `config.py`'s."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from kbert.models.config import (BertConfig, check_even_head_size, check_head_dim, check_rope_theta,
                                 rope_parameters, with_rope_theta)


@dataclasses.dataclass(frozen=True)
class RotaryBertConfig(BertConfig):
    """`BertConfig` with a rotary base and no position table (Jina-embeddings-v3's defaults, which the families
    built on it change where theirs differ).

    Args (beyond BERT's):
        rope_theta: the rotary base θ (`rope_parameters["rope_theta"]` in transformers 5's files,
            `rotary_emb_base` in Jina's own).
        rope_factor: the rotary frequencies divided by it (`rope_parameters` of `rope_type` `linear`: its
            `factor`); None: not scaled.

    `type_vocab_size` may be 0 (gte-base-en-v1.5: no segment table). Rotary positions scaled otherwise than
    linearly (`rope_type` `yarn`, `dynamic`, ...) are refused by name.

    Example:
    >>> config = RotaryBertConfig.from_dict({"vocab_size": 250002, "hidden_size": 1024, "num_hidden_layers": 24,
    ...     "num_attention_heads": 16, "intermediate_size": 4096,
    ...     "rope_parameters": {"rope_type": "linear", "rope_theta": 20000.0, "factor": 2.0}})
    >>> config.rope_theta, config.rope_factor, config.pad_token_id, config.max_position_embeddings
    (20000.0, 2.0, 1, 8194)
    """

    max_position_embeddings: int = 8194
    type_vocab_size: int = 1
    layer_norm_eps: float = 1e-5
    pad_token_id: Any = 1
    rope_theta: float = 20000.0
    rope_factor: Optional[float] = None

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str = "config") -> "RotaryBertConfig":
        return super().from_dict(with_rope_theta(values, source, linear=True), source)

    @classmethod
    def check(cls, values: Mapping[str, Any], source: str) -> None:
        super().check({**values, "type_vocab_size": values.get("type_vocab_size", 1) or None}, source)  # 0: none
        check_even_head_size(values, source, "rotary positions turn a head's two halves against each other")
        check_rope_theta(values, "rope_theta", source)  # absent: the class's own default

    @classmethod
    def check_unread_keys(cls, values: Mapping[str, Any], source: str) -> None:
        check_head_dim(values, source)

    def to_hf_dict(self) -> dict:
        """BERT's keys without the position table's, and `rope_parameters` as transformers 5 writes it."""
        own = {key: value for key, value in self.to_dict().items()
               if key not in ("rope_theta", "rope_factor", "embedding_size")}
        return {**own, "rope_parameters": rope_parameters(self.rope_theta, self.rope_factor)}
