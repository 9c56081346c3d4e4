"""The two tables every family writes: where its weights live in checkpoints, and what they count.

A family (`kbert.models.<family>.family`) describes each of its layers twice:

- `WeightName` rows: every Keras variable (by its path, e.g.
  `Transformer-0-FeedForward/intermediate/kernel`) and the variable of the
  family's original TF checkpoint (`bert/encoder/layer_0/intermediate/dense/kernel`)
  and, where kbert knows the family's Hugging Face layout, the Hugging Face
  tensor (`encoder.layer.0.intermediate.dense.weight`, stored transposed as
  PyTorch's Linear does). `kbert.checkpoints` reads, writes and inspects
  checkpoints through these rows, and no other module spells these names.
- `LayerParams` rows: every layer's parameter count, with its formula in the
  config's symbols (`SYMBOL_KEYS`). `kbert.analysis` builds the parameter
  table from them; the builder checks a model fits in memory with them.

Pure Python: no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Dict, List, Optional, Tuple

GOOGLE, HF = "google", "hf"


@dataclasses.dataclass(frozen=True)
class WeightName:
    """Where one Keras variable lives in the two checkpoint formats.

    Attributes:
        path: the Keras variable path (`layer/.../name`).
        google: the Google checkpoint variable name.
        hf: the Hugging Face tensor name, without the `bert.` prefix (None:
            kbert does not know this family's Hugging Face layout).
        google_transposed: Google stores the transpose of the Keras kernel.
        hf_transposed: Hugging Face stores the transpose (every Linear weight).
        axes: for each Keras axis, the config key that sets its size.
        hf_part: `(i, n)`: the variable is the i-th of n equal slices of the
            Hugging Face tensor's last axis (GPT-2's fused query/key/value
            `c_attn`); `(0, 1)`: the whole tensor.
        hf_tied: the Hugging Face tensor this one is tied to, read in its
            place when a file leaves it out (T5's `lm_head` and `shared`).
    """

    path: str
    google: str
    hf: Optional[str]
    google_transposed: bool
    hf_transposed: bool
    axes: Tuple[str, ...]
    hf_part: Tuple[int, int] = (0, 1)
    hf_tied: Optional[str] = None

    def part_axis(self, fmt: str) -> int:
        """The stored tensor's axis that `hf_part` slices: the one that is last in Keras's layout (a Linear's
        output rows, stored first; GPT-2's Conv1D columns, stored last)."""
        return 0 if self.transposed(fmt) else -1

    def name(self, fmt: str) -> Optional[str]:
        return self.google if fmt == GOOGLE else self.hf

    def renamed(self, google: str, hf: Optional[str] = None) -> "WeightName":
        """The same variable under another family's checkpoint names (`hf` None: no Hugging Face name)."""
        return dataclasses.replace(self, google=google, hf=hf)

    def transposed(self, fmt: str) -> bool:
        return self.google_transposed if fmt == GOOGLE else self.hf_transposed

    def part(self, fmt: str) -> Tuple[int, int]:
        """`(i, n)`: which of n slices of the stored tensor's last axis the variable is."""
        return (0, 1) if fmt == GOOGLE else self.hf_part


# A Keras variable's last name -> the PyTorch parameter it is in Hugging Face's modules.
_HF_SUFFIXES = {"kernel": "weight", "gamma": "weight", "embeddings": "weight", "bias": "bias", "beta": "bias"}


def hf_suffix(row: WeightName) -> str:
    """`weight` or `bias`: the Hugging Face parameter of a row's Keras variable."""
    return _HF_SUFFIXES[row.path.rsplit("/", 1)[1]]


H, V, I, E = "hidden_size", "vocab_size", "intermediate_size", "embedding_size"


def dense(path: str, google: str, hf: Optional[str], axes: Tuple[str, str]) -> List[WeightName]:
    return [
        WeightName(f"{path}/kernel", f"{google}/kernel", hf and f"{hf}.weight", False, True, axes),
        WeightName(f"{path}/bias", f"{google}/bias", hf and f"{hf}.bias", False, False, axes[1:]),
    ]


def linear(path: str, hf: str, axes: Tuple[str, str], bias: bool = True) -> List[WeightName]:
    """A Linear of a family released for transformers only, under its Hugging Face name, with or without its
    bias (the Google-style name, for inspection only, is the same with `/`)."""
    return dense(path, hf.replace(".", "/"), hf, axes)[:2 if bias else 1]


def output_weights(path: str, google_scope: str, hf: str, axes: Tuple[str, str]) -> List[WeightName]:
    """Google's NSP and run_classifier heads: `[outputs, H]` output_weights and output_bias."""
    return [
        WeightName(f"{path}/kernel", f"{google_scope}output_weights", f"{hf}.weight", True, True, axes),
        WeightName(f"{path}/bias", f"{google_scope}output_bias", f"{hf}.bias", False, False, axes[1:]),
    ]


def norm(path: str, google: str, hf: str, width: str = H) -> List[WeightName]:
    return [
        WeightName(f"{path}/gamma", f"{google}/gamma", f"{hf}.weight", False, False, (width,)),
        WeightName(f"{path}/beta", f"{google}/beta", f"{hf}.bias", False, False, (width,)),
    ]


def embedding(path: str, google: str, hf: str, rows: str, width: str = H) -> WeightName:
    return WeightName(f"{path}/embeddings", google, f"{hf}.weight", False, False, (rows, width))


GROUPS = ("embeddings", "encoder", "decoder", "pooler", "heads")
# The config key behind each symbol of a formula (C, the number of labels, is not a config key).
SYMBOL_KEYS = {"V": "vocab_size", "H": "hidden_size", "I": "intermediate_size",
               "L": "num_hidden_layers", "P": "max_position_embeddings", "T": "type_vocab_size",
               "E": "embedding_size", "A": "num_attention_heads", "K": "attention_head_size",
               "G": "num_key_value_heads"}
SYMBOL = re.compile(r"\b[VHIPTLCEAKG]\b")


def symbol_values(config, num_labels: int = 0) -> Dict[str, int]:
    """Each formula symbol's value for `config` (C: `num_labels`; K: a head's width; G: the key and value heads,
    where queries share them)."""
    return {"V": config.vocab_size, "H": config.hidden_size, "I": config.intermediate_size,
            "L": config.num_hidden_layers, "P": config.max_position_embeddings,
            "T": config.type_vocab_size, "C": num_labels, "E": config.embedding_width,
            "A": config.num_attention_heads, "K": config.head_size,
            "G": getattr(config, "key_value_heads", config.num_attention_heads)}


def expand_formula(formula: str, symbols: Dict[str, int]) -> str:
    """The formula with each symbol replaced by its value.

    >>> expand_formula("4·(H·H + H)", {"H": 768})
    '4·(768·768 + 768)'
    """
    return SYMBOL.sub(lambda match: str(symbols[match.group()]), formula)


@dataclasses.dataclass(frozen=True)
class LayerParams:
    """One layer's expected parameter count.

    Attributes:
        name: the bert4keras layer name.
        group: one of `GROUPS`.
        formula: the count in symbols, e.g. `4·(H·H + H)`.
        params: the count for this config.
        note: why the formula is what it is, when that is not obvious.
    """

    name: str
    group: str
    formula: str
    params: int
    note: str = ""
