"""Analytic parameter counts of a BERT-family model, from its config alone.

Every layer of the bert4keras model gets its expected parameter count with
the formula written out in the config's symbols:

    V vocab_size   H hidden_size   I intermediate_size   L num_hidden_layers
    P max_position_embeddings      T type_vocab_size     C num_labels
    E embedding_size (ALBERT, ELECTRA)                    A num_attention_heads

Each family (`kbert.models.<family>.family`) writes its own rows; this module
holds the table, its totals and the explanations of wrong totals.

The counts are grouped (embeddings / encoder / pooler / heads) for a table
that `kbert summary` checks row by row against the built Keras model. From
the same config, `explain_claim` explains a wrong total as a combination of
the usual omissions, and `flops_per_token` gives the inference cost used by
the benchmarks. This module is pure Python: it never imports TensorFlow.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Dict, FrozenSet, List, Optional

from kbert.models import naming
from kbert.models.config import BertConfig
from kbert.models.registry import resolve
from kbert.models.tables import GROUPS, SYMBOL, LayerParams, expand_formula, symbol_values

# Symbols every table names; the others only where a formula uses them.
_ALWAYS_SHOWN = ("V", "H", "I", "L", "P", "T")


@dataclasses.dataclass(frozen=True)
class ParamAnalysis:
    """The analytic parameter table of one model.

    Example:
    >>> analysis = analyze(BertConfig.from_json_file("configs/bert_base_chinese.json"),
    ...                    num_labels=2)
    >>> analysis.total
    101678594
    >>> analysis.expand("4·(H·H + H)")
    '4·(768·768 + 768)'
    """

    config: BertConfig
    layers: List[LayerParams]
    num_labels: int = 0
    with_pool: bool = False
    with_nsp: bool = False
    with_mlm: bool = False
    model: str = "bert"
    with_discriminator: bool = False

    @property
    def total(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def symbols(self) -> Dict[str, int]:
        return symbol_values(self.config, self.num_labels)

    def shown_symbols(self) -> Dict[str, int]:
        """The symbols a table header names: the usual ones, plus those the formulas use."""
        used = {symbol for layer in self.layers for symbol in SYMBOL.findall(layer.formula)}
        return {key: value for key, value in self.symbols.items() if key in _ALWAYS_SHOWN or key in used}

    def expand(self, formula: str) -> str:
        """The formula with each symbol replaced by its value."""
        return expand_formula(formula, self.symbols)

    def group_totals(self) -> Dict[str, int]:
        """Parameters per group, in `GROUPS` order, groups with none left out."""
        totals = {group: 0 for group in GROUPS}
        for layer in self.layers:
            totals[layer.group] += layer.params
        return {group: count for group, count in totals.items() if count}

    def to_dict(self) -> dict:
        """A JSON-ready dict: layers with formulas, groups with shares, total."""
        total = self.total
        return {
            "model": self.model,
            "config": self.config.to_dict(),
            "heads": {"num_labels": self.num_labels, "pool": self.with_pool,
                      "nsp": self.with_nsp, "mlm": self.with_mlm,
                      "discriminator": self.with_discriminator},
            "layers": [
                {**dataclasses.asdict(layer), "expanded": self.expand(layer.formula)}
                for layer in self.layers
            ],
            "groups": {
                group: {"params": count, "share": count / total}
                for group, count in self.group_totals().items()
            },
            "total": total,
        }


def analyze(
    config: BertConfig,
    *,
    model: Optional[str] = None,
    num_labels: int = 0,
    with_pool: bool = False,
    with_nsp: bool = False,
    with_mlm: bool = False,
    with_discriminator: bool = False,
) -> ParamAnalysis:
    """Expected parameters of every layer of `build_transformer_model(config, model=model, ...)`.

    Args:
        config: the model's config.
        model: the family (`"bert"`, `"albert"`, ...); default: the config's.
        num_labels: if positive, the `build_classifier` head with that many labels.
        with_pool, with_nsp, with_mlm, with_discriminator: the heads, as for
            the builder (`with_nsp` implies the pooler).
    """
    family, config = resolve(config, model)
    with_pool = with_pool or with_nsp
    layers = family.layer_params(config, with_pool=with_pool, with_nsp=with_nsp, with_mlm=with_mlm,
                                 with_discriminator=with_discriminator)
    if num_labels:
        h = config.hidden_size
        head_input = naming.POOLER_DENSE if with_pool else naming.CLS_TOKEN
        layers.append(LayerParams(naming.CLASSIFIER_DENSE, "heads", "H·C + C",
                                  h * num_labels + num_labels, f"reads {head_input}"))
    return ParamAnalysis(config, layers, num_labels, with_pool, with_nsp, with_mlm, family.name,
                         with_discriminator)


@dataclasses.dataclass(frozen=True)
class Mistake:
    """A common way to miscount BERT's parameters.

    `params` is what the mistake leaves out (negative: what it adds).
    Mistakes that touch the same parameters (`covers`) never combine.
    """

    description: str
    formula: str
    params: int
    covers: FrozenSet[str]


def common_mistakes(analysis: ParamAnalysis) -> List[Mistake]:
    """The omissions (and double counts) that explain the totals that circulate."""
    config = analysis.config
    v, h, i, l = config.vocab_size, config.hidden_size, config.intermediate_size, config.num_hidden_layers
    e = config.embedding_width
    rows = {layer.name: layer.params for layer in analysis.layers}
    formulas = {layer.name: layer.formula for layer in analysis.layers}  # P·H, or P·E for ALBERT and ELECTRA
    # Blocks with their own weights: L, or 1 for ALBERT's shared block.
    blocks = sum(1 for name in rows if (naming.parse_block(name) or ())[1:] == (naming.ATTENTION, False))
    block = _block_params(analysis)
    head_biases = (h * analysis.with_pool + 2 * analysis.with_nsp + (e + v) * analysis.with_mlm
                   + analysis.num_labels)
    norms = sum(layer.params for layer in analysis.layers if layer.name.endswith("Norm"))

    def mistake(description, formula, params, *covers):
        return Mistake(description, formula, params, frozenset(covers))

    if blocks > 1:
        mistakes = [
            mistake("attention weights counted for one block instead of L", "(L−1)·4·H·H",
                    (l - 1) * 4 * h * h, "attention weights"),
            mistake("feed-forward weights counted for one block instead of L", "(L−1)·2·H·I",
                    (l - 1) * 2 * h * i, "ffn weights"),
            mistake("one Transformer block counted instead of L", "(L−1)·block", (l - 1) * block,
                    "attention weights", "ffn weights", "attention biases", "ffn biases", "norms"),
        ]
    else:
        mistakes = [mistake("the shared block counted once per layer (L times)", "−(L−1)·block",
                            -(l - 1) * block, "attention weights", "ffn weights",
                            "attention biases", "ffn biases", "norms")]
    mistakes += [
        mistake("attention biases left out", f"{'L·' if blocks > 1 else ''}4·H", blocks * 4 * h,
                "attention biases"),
        mistake("feed-forward biases left out", f"{'L·' if blocks > 1 else ''}(I + H)", blocks * (i + h),
                "ffn biases"),
        mistake("LayerNorm gammas and betas left out", "(2·L + 1)·2·H (+ heads' norms)",
                norms, "norms"),
        mistake("position embeddings left out", formulas.get(naming.EMBEDDING_POSITION, ""),
                rows.get(naming.EMBEDDING_POSITION, 0), "positions"),
        mistake("segment embeddings left out", formulas.get(naming.EMBEDDING_SEGMENT, ""),
                rows.get(naming.EMBEDDING_SEGMENT, 0), "segments"),
    ]
    if head_biases:  # without heads this is just attention + feed-forward biases
        mistakes.append(mistake("all dense-layer biases left out", "L·(4·H + I + H) + head biases",
                                blocks * (5 * h + i) + head_biases, "attention biases", "ffn biases",
                                "head biases"))
    if analysis.with_pool:
        mistakes.append(mistake("pooler left out", "H·H + H", h * h + h, "pooler", "head biases"))
    else:
        mistakes.append(mistake("pooler counted though not in the model", "−(H·H + H)",
                                -(h * h + h), "pooler"))
    if analysis.num_labels:
        c = analysis.num_labels
        mistakes.append(mistake("classifier head left out", "H·C + C", h * c + c,
                                "classifier", "head biases"))
    if analysis.with_mlm:
        mistakes.append(mistake("tied MLM output matrix counted a second time", "−V·H" if e == h else "−V·E",
                                -v * e, "tied output"))
    return [m for m in mistakes if m.params]


def explain_claim(analysis: ParamAnalysis, claimed: int, max_mistakes: int = 4) -> List[List[Mistake]]:
    """Combinations of `common_mistakes` that turn the true total into `claimed`.

    Returns the smallest combinations that account for the difference exactly
    (usually one); an empty list when the claim is right or nothing fits.
    """
    difference = analysis.total - claimed
    if difference == 0:
        return []
    mistakes = common_mistakes(analysis)
    for size in range(1, max_mistakes + 1):
        found = [list(combo) for combo in itertools.combinations(mistakes, size)
                 if sum(m.params for m in combo) == difference and _disjoint(combo)]
        if found:
            return found
    return []


def flops_per_token(config: BertConfig, seq_len: int) -> int:
    """Forward FLOPs per token of the backbone at sequence length `seq_len`.

    Two FLOPs per multiply-add, for every dense layer (Q, K, V, output:
    4·H·H; feed-forward: 2·H·I) and for the attention score and context
    products (2·seq_len·H each). Embedding look-ups, LayerNorms, softmax and
    activations are element-wise and left out.
    """
    h, i = config.hidden_size, config.intermediate_size
    per_block = 2 * (4 * h * h + 2 * h * i) + 2 * 2 * seq_len * h
    return config.num_hidden_layers * per_block


def _block_params(analysis: ParamAnalysis) -> int:
    """The parameters of the first block (ALBERT: the shared one)."""
    first = {naming.block(index, sublayer, suffix) for index in (0, None)
             for sublayer in (naming.ATTENTION, naming.FEED_FORWARD) for suffix in ("", "Norm")}
    return sum(layer.params for layer in analysis.layers if layer.name in first)


def _disjoint(combo) -> bool:
    seen: set = set()
    for mistake in combo:
        if seen & mistake.covers:
            return False
        seen |= mistake.covers
    return True
