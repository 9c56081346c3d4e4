"""T5's config: bert4keras's T5 keys (`attention_head_size`, `dropout_rate`, a gated `hidden_act`)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, Optional, Tuple, Union

from kbert.errors import ConfigError
from kbert.models.config import ACTIVATIONS, BertConfig, check_positive_int

# T5.1.1's gated feed-forward names a second, linear activation.
_ACTIVATIONS = {**ACTIVATIONS, "linear": "linear"}


@dataclasses.dataclass(frozen=True)
class T5Config(BertConfig):
    """BERT's keys as bert4keras's T5 configs write them, plus T5's own.

    Args:
        attention_head_size: a head's width (`d_kv`); heads · head size may
            differ from H (mT5-small: 6 · 64 for H 512). Default H / heads.
        relative_attention_num_buckets: rows of the relative position bias (32).
        hidden_act: one activation, or two for T5.1.1's gated feed-forward
            (`["gelu", "linear"]`).
        dropout_rate: bert4keras's name for `hidden_dropout_prob`, read when
            that key is absent. Attention dropout is 0 unless
            `attention_probs_dropout_prob` is given, as in bert4keras.
        **kwargs: as for `BertConfig` (no position table: `max_position_embeddings`
            is not used).

    Example:
    >>> config = T5Config.from_dict({"vocab_size": 64, "hidden_size": 16, "num_hidden_layers": 2,
    ...     "num_attention_heads": 6, "attention_head_size": 4, "intermediate_size": 32,
    ...     "hidden_act": ["gelu", "linear"], "dropout_rate": 0.1})
    >>> config.head_size, config.activation, config.hidden_dropout_prob, config.attention_probs_dropout_prob
    (4, ('gelu', 'linear'), 0.1, 0.0)
    """

    family: ClassVar[str] = "t5.1.0"

    hidden_act: Union[str, Tuple[str, ...]] = "relu"
    attention_probs_dropout_prob: float = 0.0
    attention_head_size: Optional[int] = None
    relative_attention_num_buckets: int = 32

    def __post_init__(self) -> None:
        if isinstance(self.hidden_act, list):  # JSON gives a list; the config is frozen and hashable
            object.__setattr__(self, "hidden_act", tuple(self.hidden_act))
        super().__post_init__()

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str = "config") -> "T5Config":
        if isinstance(values, Mapping) and "dropout_rate" in values and "hidden_dropout_prob" not in values:
            values = {**values, "hidden_dropout_prob": values["dropout_rate"] or 0.0}
        return super().from_dict(values, source)

    @classmethod
    def check(cls, values: Mapping[str, Any], source: str) -> None:
        act = values.get("hidden_act", "relu")
        names = [act] if isinstance(act, str) else list(act) if isinstance(act, (list, tuple)) else [act]
        if not 1 <= len(names) <= 2 or any(not isinstance(name, str) or name not in _ACTIVATIONS for name in names):
            raise ConfigError(f"{source}: key 'hidden_act': expected an activation or two (gated, e.g. "
                              f"[\"gelu\", \"linear\"]) among {', '.join(sorted(_ACTIVATIONS))}; got {act!r}")
        super().check({**values, "hidden_act": "gelu"}, source)
        for key in ("attention_head_size", "relative_attention_num_buckets"):
            if values.get(key) is not None:
                check_positive_int(values[key], key, source)
        if values.get("embedding_size") not in (None, values["hidden_size"]):
            raise ConfigError(f"{source}: key 'embedding_size': T5 embeds tokens at hidden_size "
                              f"({values['hidden_size']}); remove the key")

    @property
    def head_size(self) -> int:
        return self.attention_head_size or self.hidden_size // self.num_attention_heads

    @property
    def activation(self) -> Union[str, Tuple[str, ...]]:
        """The canonical activation, or the two of a gated feed-forward."""
        if isinstance(self.hidden_act, str):
            return _ACTIVATIONS[self.hidden_act]
        return tuple(_ACTIVATIONS[name] for name in self.hidden_act)

    @property
    def gated(self) -> bool:
        """T5.1.1's gated feed-forward (two activations)."""
        return not isinstance(self.hidden_act, str)
