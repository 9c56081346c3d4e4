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

    Example:
    >>> config = MpnetConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
    ...                      intermediate_size=16, max_position_embeddings=514, model_type="mpnet")
    >>> config.relative_attention_num_buckets, config.longest_input
    (32, 512)
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
