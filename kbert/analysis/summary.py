"""The analytic parameter table, cross-checked against a built model.

`crosscheck` compares every row of a `ParamAnalysis` with the
`count_params()` of the model's layer of the same name, and flags any model
layer with parameters that the analysis does not expect. `format_table`
renders the rows with their formulas, the group totals with their shares,
and the total. Pure Python: the model is only asked for `layers`,
`get_layer` and `count_params`.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional

from kbert.models import naming
from kbert.analysis.params import ParamAnalysis, explain_claim

CHECK, CROSS = "✓", "✗"


@dataclasses.dataclass(frozen=True)
class CheckedRow:
    """A layer's expected and built parameter counts."""

    name: str
    expected: Optional[int]
    built: Optional[int]

    @property
    def ok(self) -> bool:
        return self.expected == self.built


def crosscheck(analysis: ParamAnalysis, model) -> List[CheckedRow]:
    """One row per analytic layer, plus any unexpected model layer with parameters.

    Example:
    >>> from kbert import build_transformer_model
    >>> from kbert.analysis.params import analyze
    >>> from kbert.models.config import BertConfig, bundled_config_path
    >>> path = bundled_config_path("bert_tiny")
    >>> rows = crosscheck(analyze(BertConfig.from_json_file(path)), build_transformer_model(path))
    >>> len(rows), all(row.ok for row in rows), rows[0]
    (12, True, CheckedRow(name='Embedding-Token', expected=676096, built=676096))
    """
    built = {layer.name: layer.count_params() for layer in model.layers}
    rows = [CheckedRow(layer.name, layer.params, built.get(layer.name)) for layer in analysis.layers]
    expected = {layer.name for layer in analysis.layers}
    rows += [CheckedRow(name, None, count) for name, count in built.items()
             if count and name not in expected]
    return rows


def format_table(analysis: ParamAnalysis, checked: Optional[List[CheckedRow]] = None) -> str:
    """The per-layer table with formulas, group shares and total.

    With `checked` (from `crosscheck`), each row also shows the built count
    and ✓/✗, and a closing line says how many rows disagree.
    """
    symbols = ", ".join(f"{key}={value}" for key, value in analysis.shown_symbols().items()
                        if key != "C" or analysis.num_labels)
    lines = [f"Analytic parameter count ({symbols})"]
    header = ["Layer", "Formula", "Params"] + (["Built", ""] if checked else [])
    body = []
    built = {row.name: row for row in checked or []}
    for layer in analysis.layers:
        cells = [layer.name, f"{layer.formula} = {analysis.expand(layer.formula)}", f"{layer.params:,}"]
        if checked:
            row = built[layer.name]
            cells += [_count(row.built), _mark(row)]
        body.append(cells)
    for row in checked or []:
        if row.expected is None:
            body.append([row.name, "(not expected)", "-", _count(row.built), CROSS])
    lines += _columns([header] + body, right_aligned={2, 3})

    total = analysis.total
    lines.append("")
    for group, count in analysis.group_totals().items():
        lines.append(f"  {group:<11} {count:>14,}  {100 * count / total:5.1f} %")
    lines.append(f"  {'total':<11} {total:>14,}  100.0 %")
    if checked:
        model_total = sum(row.built or 0 for row in checked)
        wrong = [row for row in checked if not row.ok]
        verdict = (f"{CHECK} all {len(checked)} rows agree with the built model "
                   f"(total {model_total:,})" if not wrong else
                   f"{CROSS} {len(wrong)} of {len(checked)} rows disagree with the built model: "
                   + ", ".join(f"{row.name} ({_difference(row)})" for row in wrong))
        lines += ["", verdict]
    # Notes of numbered blocks repeat L times: the table says them once, in its rows' formulas.
    notes = [f"  {layer.name}: {layer.note}" for layer in analysis.layers
             if layer.note and not naming.is_numbered_block(layer.name)]
    if notes:
        lines += ["", "Notes:"] + notes
    return "\n".join(lines)


def format_claim(analysis: ParamAnalysis, claimed: int) -> str:
    """Explains a claimed total as a combination of common counting mistakes."""
    total = analysis.total
    difference = total - claimed
    if difference == 0:
        return f"The claim {claimed:,} is right."
    lines = [f"Claimed {claimed:,}; the model has {total:,} ({_signed(-difference)})."]
    explanations = explain_claim(analysis, claimed)
    if not explanations:
        lines.append("No combination of the usual mistakes accounts for the difference exactly.")
    for number, combo in enumerate(explanations, 1):
        prefix = f"Explanation {number}:" if len(explanations) > 1 else "Explanation:"
        lines.append(prefix)
        for mistake in combo:
            lines.append(f"  - {mistake.description}: {mistake.formula} = {mistake.params:,}")
        terms = "".join(f" {'+' if m.params > 0 else '−'} {abs(m.params):,}" for m in combo)
        lines.append(f"  {claimed:,}{terms} = {total:,}")
    return "\n".join(lines)


def _columns(rows: List[List[str]], right_aligned: set) -> List[str]:
    widths = [max(len(row[column]) for row in rows if column < len(row))
              for column in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [cell.rjust(widths[c]) if c in right_aligned else cell.ljust(widths[c])
                 for c, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
        if row is rows[0]:
            lines.append("-" * len(lines[-1]))
    return lines


def _count(value: Optional[int]) -> str:
    return "missing" if value is None else f"{value:,}"


def _mark(row: CheckedRow) -> str:
    return CHECK if row.ok else f"{CROSS} {_difference(row)}"


def _difference(row: CheckedRow) -> str:
    if row.built is None:
        return "not in the model"
    if row.expected is None:
        return f"{row.built:,} unexpected"
    return _signed(row.built - row.expected)


def _signed(value: int) -> str:
    return f"{value:+,}"
