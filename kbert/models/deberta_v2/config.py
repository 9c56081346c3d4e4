"""DeBERTa-v2/v3's config as Hugging Face writes it (`relative_attention`, `position_buckets`, `pos_att_type`, ...)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, Tuple

from kbert.errors import ConfigError, is_whole_number
from kbert.models.config import BertConfig


@dataclasses.dataclass(frozen=True)
class DebertaV2Config(BertConfig):
    """`BertConfig` with DeBERTa's keys; a v3 config (no segments: `type_vocab_size` 0) reads as written.

    Args (beyond BERT's):
        position_buckets: relative distances beyond half of these are log-bucketed (v3: 256); 0 (or less): none.
        max_relative_positions: the distance the buckets reach (-1: `max_position_embeddings`).
        pos_att_type: the position terms, of `c2p` and `p2c` (left out: none, as transformers reads it).
        norm_rel_ebd: `layer_norm` (the relative table is normalised) or `none` (left out: none).
        position_biased_input: absolute positions added to the embeddings (v3: no; left out: yes).

    A key left out means what transformers' `DebertaV2Config` takes it to mean, so `relative_attention` and
    `share_att_key` left out are false, which kbert does not build (refused by name).
        pooler_hidden_act: the sequence classifier's pooler activation (GELU, the only one kbert reads).

    Example:
    >>> config = DebertaV2Config.from_dict({"model_type": "deberta-v2", "vocab_size": 128100, "hidden_size": 768,
    ...     "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "type_vocab_size": 0,
    ...     "position_buckets": 256, "relative_attention": True, "position_biased_input": False,
    ...     "pos_att_type": ["p2c", "c2p"], "norm_rel_ebd": "layer_norm", "share_att_key": True})
    >>> config.span, config.relative_reach, config.type_vocab_size
    (256, 512, 0)
    """

    family: ClassVar[str] = "deberta_v2"

    type_vocab_size: int = 0
    layer_norm_eps: float = 1e-7
    position_buckets: int = 0
    max_relative_positions: int = -1
    pos_att_type: Tuple[str, ...] = ()
    norm_rel_ebd: str = "none"
    position_biased_input: bool = True
    pooler_hidden_act: str = "gelu"
    legacy: bool = True

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str = "config") -> "DebertaV2Config":
        if isinstance(values, Mapping):
            values = dict(values)
            if isinstance(values.get("pos_att_type"), str):  # the original configs: "p2c|c2p"
                values["pos_att_type"] = [term.strip() for term in values["pos_att_type"].lower().split("|")]
            if isinstance(values.get("pos_att_type"), list):
                values["pos_att_type"] = tuple(values["pos_att_type"])
            if isinstance(values.get("norm_rel_ebd"), str):  # transformers reads "layer_norm|..." as its parts
                parts = {part.strip() for part in values["norm_rel_ebd"].lower().split("|")}
                values["norm_rel_ebd"] = "layer_norm" if parts == {"layer_norm"} else \
                    "none" if parts == {"none"} else values["norm_rel_ebd"]
            if values.get("pos_att_type") is None and "pos_att_type" in values:
                values["pos_att_type"] = ()
        return super().from_dict(values, source)

    @classmethod
    def check(cls, values: Mapping[str, Any], source: str) -> None:
        segments = values.get("type_vocab_size", 0)
        super().check({**values, "type_vocab_size": segments or None}, source)  # 0: no segment table
        terms = values.get("pos_att_type", ())
        if not isinstance(terms, tuple) or not set(terms) <= {"c2p", "p2c"}:
            raise ConfigError(f"{source}: key 'pos_att_type': expected terms of 'c2p' and 'p2c' (a list, or a "
                              f"string such as 'p2c|c2p'), got {values['pos_att_type']!r}")
        if values.get("norm_rel_ebd", "none") not in ("layer_norm", "none"):
            raise ConfigError(f"{source}: key 'norm_rel_ebd': expected 'layer_norm' or 'none', "
                              f"got {values['norm_rel_ebd']!r}")
        for key in ("position_buckets", "max_relative_positions"):
            if not is_whole_number(values.get(key, 0), minimum=-(1 << 62)):
                raise ConfigError(f"{source}: key {key!r}: expected a whole number, got {values[key]!r}")
        cls.check_buckets(values.get("position_buckets", 0), values.get("max_relative_positions", -1),
                          values.get("max_position_embeddings", 512), source)
        if values.get("pooler_hidden_act", "gelu") != "gelu":
            raise ConfigError(f"{source}: key 'pooler_hidden_act': kbert's DeBERTa classifier pools with GELU, as "
                              f"every released DeBERTa does (expected 'gelu', got {values['pooler_hidden_act']!r})")

    @staticmethod
    def check_buckets(buckets: int, reach: int, positions: int, source: str) -> None:
        """Refuses log buckets whose formula has no value: `position_buckets` 1 (a middle of 0), and a reach
        (`max_relative_positions`, else `max_position_embeddings`) of 1 or one more than the middle (a log of 0 or
        a division by log 1). transformers computes NaN or infinity for these."""
        if buckets <= 0:
            return
        reach = reach if reach > 0 else positions
        if buckets < 2:
            raise ConfigError(f"{source}: key 'position_buckets': {buckets} leaves no distance unbucketed "
                              "(DeBERTa's log buckets need 2 or more; 0: none)")
        if reach < 2 or reach - 1 == buckets // 2:
            raise ConfigError(f"{source}: key 'max_relative_positions': a reach of {reach} with position_buckets "
                              f"{buckets} puts log(reach - 1) / log(position_buckets / 2) out of reach (a log of 0 "
                              "or a division by 0); expected a reach of 2 or more other than "
                              f"{buckets // 2 + 1}")

    @classmethod
    def check_unread_keys(cls, values: Mapping[str, Any], source: str) -> None:
        refused = {"relative_attention": (True, "kbert builds DeBERTa with its relative attention, which "
                                                "transformers leaves off where the key is left out"),
                   "share_att_key": (True, "kbert projects the relative table with the attention's own query and "
                                           "key (DeBERTa-v2 and v3 do; transformers' default, where the key is left "
                                           "out, is separate projections)"),
                   "conv_kernel_size": (0, "kbert has no convolution layer (DeBERTa-v2-xlarge's)"),
                   "legacy": (True, "kbert reads the MLM head at cls.predictions (transformers' legacy layout)")}
        defaults = {"relative_attention": False, "share_att_key": False}  # transformers' where left out
        for key, (expected, why) in refused.items():
            value = values.get(key, defaults.get(key, expected))
            if value != expected and not (key == "conv_kernel_size" and not value):
                got = f"got {values[key]!r}" if key in values else "the key is left out"
                raise ConfigError(f"{source}: key {key!r}: {why} (expected {expected!r}, {got})")

    @property
    def relative_reach(self) -> int:
        """`max_relative_positions`, or the position table's length where it is not set."""
        return self.max_relative_positions if self.max_relative_positions > 0 else self.max_position_embeddings

    @property
    def span(self) -> int:
        """Half the relative table's rows: `position_buckets`, else the reach."""
        return self.position_buckets if self.position_buckets > 0 else self.relative_reach

    def to_dict(self) -> dict:
        """The config with the two keys that transformers' defaults would read otherwise: kbert's DeBERTa is
        relative attention over a shared projection."""
        return {**super().to_dict(), "relative_attention": True, "share_att_key": True}

    def to_hf_dict(self) -> dict:
        return {**{key: value for key, value in self.to_dict().items() if key != "legacy"},
                "pos_att_type": list(self.pos_att_type), "pooler_hidden_size": self.hidden_size, "legacy": True}
