"""Jina-embeddings-v3's config: the rotary post-norm encoders' (`RotaryBertConfig`), and Jina's own
`config.json` (model_type xlm-roberta, `position_embedding_type` rotary, `rotary_emb_base`) read as transformers 5's."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

from kbert.models.rotary_bert.config import RotaryBertConfig


@dataclasses.dataclass(frozen=True)
class JinaV3Config(RotaryBertConfig):
    """`RotaryBertConfig` as Jina-embeddings-v3 has it (its defaults are the skeleton's).

    Example:
    >>> config = JinaV3Config.from_dict({"model_type": "xlm-roberta", "position_embedding_type": "rotary",
    ...     "rotary_emb_base": 20000.0, "vocab_size": 250002, "hidden_size": 1024, "num_hidden_layers": 24,
    ...     "num_attention_heads": 16, "intermediate_size": 4096})  # Jina's own config.json, abridged
    >>> config.model_type, config.rope_theta, config.pad_token_id, config.max_position_embeddings
    ('jina_embeddings_v3', 20000.0, 1, 8194)
    """

    family: ClassVar[str] = "jina_embeddings_v3"

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str = "config") -> "JinaV3Config":
        if values.get("position_embedding_type") == "rotary":  # Jina's own config.json: transformers 5's keys
            values = {**values, "model_type": "jina_embeddings_v3",
                      **({"rope_theta": values["rotary_emb_base"]} if "rotary_emb_base" in values else {})}
        return super().from_dict(values, source)
