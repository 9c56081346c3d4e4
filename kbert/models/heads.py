"""The heads a model can carry: the backbone's (bert4keras's `with_*` flags) and a tagger's.

Pure Python: the command line shows the tagger heads in `--help` without
importing TensorFlow.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

# A tagger's heads (`build_token_classifier(head=...)`, `kbert train --task ner --head`).
TOKEN_HEADS = ("crf", "softmax", "global_pointer")
DEFAULT_TOKEN_HEAD = "crf"


@dataclasses.dataclass(frozen=True)
class Heads:
    """The heads a backbone is built with, or that a checkpoint holds weights for.

    `mlm` is the MLM output's activation (`"softmax"`, `"linear"`) or None.

    Example:
    >>> heads = Heads.from_flags(with_nsp=True, with_mlm=True)
    >>> heads, heads.flags()["with_pool"]
    (Heads(pool=True, nsp=True, mlm='softmax', discriminator=False), True)
    """

    pool: bool = False
    nsp: bool = False
    mlm: Optional[str] = None
    discriminator: bool = False

    @classmethod
    def from_flags(cls, with_pool: bool = False, with_nsp: bool = False, with_mlm=False,
                   with_discriminator: bool = False) -> "Heads":
        """From bert4keras's arguments: `with_nsp` implies the pooler; `with_mlm` True means softmax."""
        return cls(pool=bool(with_pool or with_nsp), nsp=bool(with_nsp), mlm=_mlm_activation(with_mlm),
                   discriminator=bool(with_discriminator))

    def flags(self) -> dict:
        """bert4keras's `with_*` keywords for these heads."""
        return {"with_pool": self.pool, "with_nsp": self.nsp, "with_mlm": self.mlm or False,
                "with_discriminator": self.discriminator}


def _mlm_activation(with_mlm) -> Optional[str]:
    """The MLM head's output activation (None: no head): True means softmax, as in bert4keras."""
    if with_mlm is True:
        return "softmax"
    if with_mlm in (False, None):
        return None
    if with_mlm in ("softmax", "linear"):
        return with_mlm
    raise ValueError(f"with_mlm: expected True, False, 'softmax' or 'linear', got {with_mlm!r}")


@dataclasses.dataclass(frozen=True)
class SequenceHead:
    """A family's sequence classifier (a reranker's head) between the encoder and its output layer, as Hugging
    Face's `...ForSequenceClassification` computes it: `pooling` (`cls`: the first token; `mean`: the real
    tokens' mean), a dense of the hidden width with `activation` (and a bias where `bias`), then, where
    `norm_epsilon` is set, a LayerNorm (with a bias where `norm_bias`). `late` pooling (EuroBERT's) takes the
    dense and activation on every token first, then the real tokens' mean. A decoder's (`LlamaForSequenceClassification`
    and the families built on it) has no dense (`hidden` False): the last real token (`lasttoken`) goes straight
    to the output layer, `score`, which has no bias (`output_bias` False).

    Example (ModernBERT's, its `ModernBertPredictionHead`):
    >>> SequenceHead(pooling="mean", activation="gelu", bias=False, norm_epsilon=1e-5, norm_bias=False).pooling
    'mean'
    """

    pooling: str = "cls"
    activation: str = "tanh"
    bias: bool = True
    norm_epsilon: Optional[float] = None
    norm_bias: bool = True
    hidden: bool = True
    output_bias: bool = True
