"""T5's config: bert4keras's T5 keys (`attention_head_size`, `dropout_rate`, a gated `hidden_act`)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, Optional, Tuple, Union

from kbert.errors import ConfigError
from kbert.models.config import ACTIVATIONS, BertConfig, check_positive_int

# T5.1.1's gated feed-forward names a second, linear activation.
_ACTIVATIONS = {**ACTIVATIONS, "linear": "linear"}
NORM_EPSILON = 1e-6  # T5's RMS norm's, and bert4keras's for T5
# Hugging Face's T5 key -> kbert's (bert4keras's) key.
_HF_KEYS = {"d_model": "hidden_size", "d_kv": "attention_head_size", "d_ff": "intermediate_size",
            "num_layers": "num_hidden_layers", "num_heads": "num_attention_heads"}


def _from_hugging_face(values: Mapping[str, Any]) -> dict:
    """A Hugging Face T5/mT5 config.json in bert4keras's keys, with Hugging Face's computation:
    no position bias in the cross-attention, the output scaled only when tied, no decoder padding.

    >>> config = _from_hugging_face({"d_model": 16, "d_kv": 4, "d_ff": 32, "num_layers": 2, "num_heads": 2,
    ...                              "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False})
    >>> config["hidden_act"], config["scale_decoder_outputs"], config["cross_position_bias"]
    (['gelu_new', 'linear'], False, False)
    """
    translated = {_HF_KEYS.get(key, key): value for key, value in values.items()}
    projection = str(values.get("feed_forward_proj", "relu"))
    activation = projection.split("-")[-1]
    if projection.startswith("gated-"):  # Hugging Face's gated-gelu is the tanh form
        translated["hidden_act"] = ["gelu_new" if activation == "gelu" else activation, "linear"]
        if values.get("model_type") == "t5":
            translated["model_type"] = "t5.1.1"  # kbert's name for Hugging Face's gated T5
    else:
        translated["hidden_act"] = activation
    for key in ("cross_position_bias", "decoder_mask_zero"):  # kbert's own keys, when it wrote the file
        translated.setdefault(key, False)
    if "scale_decoder_outputs" not in values:  # transformers 5 writes it for T5; before, it scaled when tied
        tied = values.get("tie_word_embeddings", True) is not False
        translated["scale_decoder_outputs"] = tied and values.get("model_type") != "mt5"  # mT5 never scales
    return translated


def hf_feed_forward(config: "T5Config") -> str:
    """Hugging Face's `feed_forward_proj` for the config's activation(s). Its `gated-gelu` is the
    tanh form; the erf form (bert4keras's `gelu`) is `gated-gelu_python` there.

    >>> hf_feed_forward(T5Config(vocab_size=8, hidden_size=4, num_hidden_layers=1, num_attention_heads=1,
    ...                          intermediate_size=8, hidden_act=["gelu", "linear"]))
    'gated-gelu_python'
    """
    if not config.gated:
        return config.hidden_act
    activation = config.activation[0]
    return {"gelu_tanh": "gated-gelu", "gelu": "gated-gelu_python"}.get(activation, f"gated-{activation}")


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
        cross_position_bias: the decoder's relative position bias also
            enters its cross-attention (bert4keras's default and option of
            that name; Google's and Hugging Face's T5 have none there).
        scale_decoder_outputs: the decoder's output is scaled by H^(−1/2)
            before the LM output (`Decoder-Output-Scale`): always in
            bert4keras; in Hugging Face's T5 only with tied embeddings (T5.1.0).
        decoder_mask_zero: decoder tokens with id 0 are padding, hidden as
            keys (bert4keras: its embedding masks zeros, T5's start token
            included); Hugging Face's decoder hides none.
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
    cross_position_bias: bool = True
    scale_decoder_outputs: bool = True
    decoder_mask_zero: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.hidden_act, list):  # JSON gives a list; the config is frozen and hashable
            object.__setattr__(self, "hidden_act", tuple(self.hidden_act))
        super().__post_init__()

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str = "config") -> "T5Config":
        if isinstance(values, Mapping) and "d_model" in values:
            values = _from_hugging_face(values)
        if isinstance(values, Mapping) and "dropout_rate" in values and "hidden_dropout_prob" not in values:
            values = {**values, "hidden_dropout_prob": values["dropout_rate"] or 0.0}
        return super().from_dict(values, source)

    @classmethod
    def check_unread_keys(cls, values: Mapping[str, Any], source: str) -> None:
        fixed = {"relative_attention_max_distance": (128, "T5's relative buckets reach up to 128, as in bert4keras"),
                 "layer_norm_epsilon": (NORM_EPSILON, f"T5's RMS norm divides with ε {NORM_EPSILON}")}
        for key, (expected, why) in fixed.items():
            if key in values and values[key] != expected:
                raise ConfigError(f"{source}: key {key!r}: {why} (expected {expected!r}, got {values[key]!r})")
        decoder_layers = values.get("num_decoder_layers")
        if decoder_layers is not None and decoder_layers != values.get("num_hidden_layers"):
            raise ConfigError(f"{source}: key 'num_decoder_layers': kbert, as bert4keras, builds T5's decoder with "
                              f"as many blocks as its encoder ({values.get('num_hidden_layers')}), got {decoder_layers}")

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
