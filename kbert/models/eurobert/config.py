"""EuroBERT's config as its files and transformers 5 write it (Llama's keys: `num_key_value_heads`,
`rms_norm_eps`, `rope_parameters`, `attention_bias`, `mlp_bias`)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, Optional

from kbert.errors import ConfigError
from kbert.models.config import (LLAMA_RENAMED, BertConfig, check_even_head_size, check_head_dim,
                                 check_key_value_heads, check_rope_theta, rope_parameters, with_own_keys,
                                 with_rope_theta)


@dataclasses.dataclass(frozen=True)
class EuroBertConfig(BertConfig):
    """`BertConfig` with EuroBERT's keys.

    Args (beyond BERT's):
        num_key_value_heads: key and value heads, each shared by a group of query heads (None: one each).
        rope_theta: the rotary base θ (`rope_parameters["rope_theta"]`).
        rope_factor: the rotary frequencies divided by it (`rope_parameters` or the older `rope_scaling` of
            `rope_type` `linear`: its `factor`); None: not scaled.
        attention_bias, mlp_bias: biases in the attention and the feed-forward (and the MLM output).
        tie_word_embeddings: the MLM output is the token table (EuroBERT's releases: no).
        bos_token_id, eos_token_id, mask_token_id: the special tokens' ids, kept for the config kbert writes.

    Example:
    >>> config = EuroBertConfig.from_dict({"vocab_size": 128256, "hidden_size": 768, "num_hidden_layers": 12,
    ...     "num_attention_heads": 12, "intermediate_size": 3072, "rms_norm_eps": 1e-5,
    ...     "rope_parameters": {"rope_type": "default", "rope_theta": 250000.0}})
    >>> config.key_value_heads, config.rope_theta, config.layer_norm_eps
    (12, 250000.0, 1e-05)
    """

    family: ClassVar[str] = "eurobert"

    hidden_act: str = "silu"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 8192
    layer_norm_eps: float = 1e-5
    pad_token_id: Optional[int] = 128001
    num_key_value_heads: Optional[int] = None
    rope_theta: float = 10000.0
    rope_factor: Optional[float] = None
    attention_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    classifier_pooling: str = "late"  # the sequence classifier's: bos, mean, or late (its logits' mean)
    # Carried through to the config.json kbert writes (transformers' defaults are Llama-3's ids).
    bos_token_id: Optional[int] = 128000
    eos_token_id: Optional[int] = 128001
    mask_token_id: Optional[int] = 128002

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str = "config") -> "EuroBertConfig":
        if not isinstance(values, Mapping):
            return super().from_dict(values, source)
        values = with_own_keys(values, LLAMA_RENAMED)
        return super().from_dict(with_rope_theta(values, source, linear=True), source)

    @classmethod
    def check(cls, values: Mapping[str, Any], source: str) -> None:
        super().check(values, source)
        check_even_head_size(values, source, "rotary positions turn a head's two halves against each other")
        check_rope_theta(values, "rope_theta", source)
        if values.get("classifier_pooling", "late") not in ("bos", "mean", "late"):
            raise ConfigError(f"{source}: key 'classifier_pooling': expected 'bos', 'mean' or 'late', "
                              f"got {values['classifier_pooling']!r}")
        check_key_value_heads(values, source)

    @classmethod
    def check_unread_keys(cls, values: Mapping[str, Any], source: str) -> None:
        check_head_dim(values, source)
        older, pooling = values.get("clf_pooling"), values.get("classifier_pooling", "late")
        if older is not None and older != pooling:
            raise ConfigError(f"{source}: key 'clf_pooling' is {older!r}: EuroBERT's older name for "
                              f"classifier_pooling, which transformers does not read (it pools {pooling!r}); set "
                              "classifier_pooling to the pooling the classifier was trained with")

    @property
    def key_value_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    def to_hf_dict(self) -> dict:
        """The config in EuroBERT's keys, as transformers writes them."""
        renamed = {value: key for key, value in LLAMA_RENAMED.items()}
        own = {renamed.get(key, key): value for key, value in self.to_dict().items()
               if key not in ("type_vocab_size", "embedding_size", "hidden_dropout_prob", "rope_theta", "rope_factor")}
        return {**own, "num_key_value_heads": self.key_value_heads,
                "rope_parameters": rope_parameters(self.rope_theta, self.rope_factor)}
