"""MPNet's config as Hugging Face writes it: RoBERTa's keys and `relative_attention_num_buckets`."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

from kbert.errors import ConfigError
from kbert.models.hf_roberta.config import RobertaConfig

# transformers' MPNet buckets relative distances into 32 whatever its table holds, and numbers positions from
# its padding id 1 whatever pad_token_id says: a config that says otherwise is not computed as it reads.
BUCKETS, PADDING_ID = 32, 1


@dataclasses.dataclass(frozen=True)
class MpnetConfig(RobertaConfig):
    """`RobertaConfig` with MPNet's relative position table (`relative_attention_num_buckets`, 32).

    Example (all-mpnet-base-v2's config.json, as kbert reads it):
    >>> from kbert.models.registry import resolve
    >>> family, config = resolve({"model_type": "mpnet", "vocab_size": 30527, "hidden_size": 768,
    ...     "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
    ...     "max_position_embeddings": 514, "relative_attention_num_buckets": 32})
    >>> family.name, config.pad_token_id, config.relative_attention_num_buckets, config.longest_input
    ('mpnet', 1, 32, 512)
    """

    family: ClassVar[str] = "mpnet"

    relative_attention_num_buckets: int = BUCKETS

    @classmethod
    def check(cls, values: Mapping[str, Any], source: str) -> None:
        super().check(values, source)
        for key, expected in (("relative_attention_num_buckets", BUCKETS), ("pad_token_id", PADDING_ID)):
            if values.get(key, expected) != expected:
                raise ConfigError(f"{source}: key {key!r}: transformers' MPNet computes with {expected} whatever "
                                  f"its config says, so kbert reads only {expected}; got {values[key]!r}")

    def to_hf_dict(self) -> dict:
        """The config as transformers' `MPNetConfig` writes it (no segment table)."""
        return {key: value for key, value in self.to_dict().items()
                if key not in ("type_vocab_size", "embedding_size")}
