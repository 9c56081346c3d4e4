"""NEZHA's config, checkpoint names and parameter formulas (`model="nezha"`)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, ClassVar, List, Mapping, Optional

from kbert.models import naming
from kbert.models.config import BertConfig, check_even_head_size, check_positive_int
from kbert.errors import ConfigError
from kbert.models.bert.family import BertFamily
from kbert.models.tables import LayerParams

logger = logging.getLogger("kbert")

# bert4keras 0.11.5 builds NEZHA's relative-position table for distances −64…64 whatever the
# config says (64 is the value of every NEZHA release); kbert does the same, so models,
# tables and outputs carry over.
TABLE_DISTANCE = 64


@dataclasses.dataclass(frozen=True)
class NezhaConfig(BertConfig):
    """BERT's keys plus NEZHA's `max_relative_position` and `use_relative_position`.

    Args:
        max_relative_position: the largest relative distance NEZHA's release
            encodes (64). The table covers ±64 as in bert4keras; another
            value is accepted with a warning that it is not used.
        use_relative_position: NEZHA's switch; kbert builds relative
            positions (True) only.
        **kwargs: as for `BertConfig`.
    """

    family: ClassVar[str] = "nezha"

    max_relative_position: int = TABLE_DISTANCE
    use_relative_position: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_relative_position != TABLE_DISTANCE:
            logger.warning("max_relative_position is %d: kbert, as bert4keras, encodes relative distances "
                           "up to %d", self.max_relative_position, TABLE_DISTANCE)

    @classmethod
    def check(cls, values: Mapping[str, Any], source: str) -> None:
        super().check(values, source)
        check_even_head_size(values, source, "NEZHA's relative positions are sines and cosines in pairs")
        if "max_relative_position" in values:
            check_positive_int(values["max_relative_position"], "max_relative_position", source)
        if values.get("use_relative_position", True) is not True:
            raise ConfigError(f"{source}: key 'use_relative_position': NEZHA without relative positions "
                              f"is not a model kbert builds (expected true, got "
                              f"{values['use_relative_position']!r})")


class NezhaFamily(BertFamily):
    """NEZHA as bert4keras builds it: no position table; relative positions in every attention layer.

    `Embedding-Relative-Position` holds sinusoidal vectors for the distances
    −64…64 (computed, not trained, in no checkpoint), added to the keys when
    scoring and to the values when summing, as in the NEZHA paper. The
    checkpoint names are BERT's (`bert/…`).
    """

    hf_sequence_classifier = False  # no Hugging Face sequence classifier kbert writes

    name = "nezha"
    model_type = "nezha"
    config_class = NezhaConfig
    graph = "kbert.models.nezha.graph:NezhaGraph"
    derived_layers = frozenset({naming.EMBEDDING_RELATIVE_POSITION})
    # Hugging Face's NEZHA (transformers 4.x; removed in 5.0): BERT's names under `nezha.`,
    # the layout that `sijunhe/nezha-cn-base` ships.
    hf_model_type = "nezha"
    hf_class = "Nezha"
    hf_prefix = "nezha"

    @staticmethod
    def named_in(names: List[str]) -> Optional[str]:
        """NEZHA's Hugging Face names (`relative_positions_encoding`); its Google ones are BERT's."""
        return "nezha" if any(".relative_positions_encoding." in name for name in names) else None

    def position_params(self, config: NezhaConfig) -> List[LayerParams]:
        rows = 2 * TABLE_DISTANCE + 1
        return [LayerParams(naming.EMBEDDING_RELATIVE_POSITION, "embeddings", f"{rows}·H/A",
                            rows * config.head_size,
                            f"sinusoidal, not trained: distances −{TABLE_DISTANCE}…{TABLE_DISTANCE} "
                            "× head size")]
