"""RoBERTa's config as Hugging Face writes it: BERT's keys, `<pad>` at id 1 and the positions after it."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, Optional

from kbert.errors import ConfigError
from kbert.models.config import BertConfig


@dataclasses.dataclass(frozen=True)
class RobertaConfig(BertConfig):
    """`BertConfig` for Hugging Face's RoBERTa: `pad_token_id` (default 1) is also where positions start.

    Real tokens read position rows `pad_token_id + 1`, `pad_token_id + 2`, ...,
    so a row may hold `max_position_embeddings - pad_token_id - 1` tokens
    (`longest_input`: 512 of roberta-base's 514 rows).

    Example:
    >>> config = RobertaConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
    ...                        intermediate_size=16, max_position_embeddings=514, model_type="xlm-roberta")
    >>> config.pad_token_id, config.longest_input
    (1, 512)
    """

    family: ClassVar[str] = "hf_roberta"

    pad_token_id: Optional[int] = 1

    @classmethod
    def check(cls, values: Mapping[str, Any], source: str) -> None:
        super().check(values, source)
        pad, positions = values.get("pad_token_id", 1), values.get("max_position_embeddings", 512)
        if pad is None:
            raise ConfigError(f"{source}: key 'pad_token_id': RoBERTa numbers positions from the padding id "
                              "(transformers' padding_idx), so it needs one; Hugging Face's RoBERTa and XLM-R have 1")
        if positions <= pad + 1:
            raise ConfigError(f"{source}: key 'max_position_embeddings': {positions} rows leave no position for a "
                              f"token after the padding id {pad}; expected more than {pad + 1}")

    @property
    def longest_input(self) -> int:
        return self.max_position_embeddings - self.pad_token_id - 1
