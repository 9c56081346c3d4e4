"""The analytic parameter table, cross-checked against a built model.

`crosscheck` compares every row of a `ParamAnalysis` with the
`count_params()` of the model's layer of the same name, and flags any model
layer with parameters that the analysis does not expect. `format_table`
renders the rows with their formulas, the group totals with their shares,
and the total. Pure Python: the model is only asked for `layers`,
`get_layer` and `count_params`.

`keras2_summary` prints a model in the text layout of Keras 2's
`model.summary()`, the layout of the layer tables in bert4keras tutorials.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, List, Optional, Sequence

from kbert import naming
from kbert.params import ParamAnalysis, explain_claim

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
    """One row per analytic layer, plus any unexpected model layer with parameters."""
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
             if layer.note and (naming.parse_block(layer.name) or (None,))[0] is None]
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


# Keras 2's layout for models that are not a plain stack: 98 columns, the
# column ends at 33 %, 55 %, 67 % and 100 % of the width.
KERAS2_WIDTH = 98
_KERAS2_COLUMNS = [int(KERAS2_WIDTH * share) for share in (0.33, 0.55, 0.67, 1.0)]


def keras2_summary(model) -> str:
    """The model's summary in Keras 2's text layout (tf.keras 2.x, as bert4keras printed it).

    One row per layer: `name (class)`, the output shape (`[(None, None)]` for
    an input, `multiple` for a layer called with different output shapes),
    the parameter count, and the layers feeding it as `name[node][tensor]`,
    one per line. Cells are cut at the column ends, as Keras 2 cut them. The
    class is kbert's own (e.g. `TokenEmbedding` where bert4keras shows
    `Embedding`).

    Example:
    >>> from kbert import build_transformer_model
    >>> from kbert.config import bundled_config_path
    >>> text = keras2_summary(build_transformer_model(bundled_config_path("bert_tiny")))
    >>> print(text.splitlines()[4].rstrip())
    Input-Token (InputLayer)        [(None, None)]       0
    """
    rule, double_rule = "_" * KERAS2_WIDTH, "=" * KERAS2_WIDTH
    lines = [f'Model: "{model.name}"', rule,
             _keras2_row(["Layer (type)", "Output Shape", "Param #", "Connected to"]), double_rule]
    model_nodes = {id(node) for nodes in model._nodes_by_depth.values() for node in nodes}
    for index, layer in enumerate(model.layers):
        connections = list(_keras2_connections(layer, model_nodes))
        first = connections[0] if connections else ""
        lines.append(_keras2_row([f"{layer.name} ({type(layer).__name__})", _keras2_output_shape(layer),
                                  layer.count_params(), first]))
        lines += [_keras2_row(["", "", "", connection]) for connection in connections[1:]]
        lines.append(double_rule if index == len(model.layers) - 1 else rule)
    trainable = _parameter_count(model.trainable_weights)
    non_trainable = _parameter_count(model.non_trainable_weights)
    lines += [f"Total params: {trainable + non_trainable:,}", f"Trainable params: {trainable:,}",
              f"Non-trainable params: {non_trainable:,}", rule]
    return "\n".join(lines)


def _keras2_row(fields: Sequence) -> str:
    """Keras 2's `print_row`: each cell cut and padded to its column end."""
    line = ""
    for field, end in zip(fields, _KERAS2_COLUMNS):
        if line:
            line = line[:-1] + " "
        line = (line + str(field))[:end]
        line += " " * (end - len(line))
    return line


def _keras2_connections(layer, model_nodes: set) -> Iterator[str]:
    for node in layer._inbound_nodes:
        if id(node) not in model_nodes:
            continue
        for tensor in node.input_tensors:
            history = tensor._keras_history
            yield f"{history.operation.name}[{history.node_index}][{history.tensor_index}]"


def _keras2_output_shape(layer) -> str:
    shapes = [[tuple(tensor.shape) for tensor in node.output_tensors] for node in layer._inbound_nodes]
    if any(shape != shapes[0] for shape in shapes):
        return "multiple"
    if type(layer).__name__ == "InputLayer":
        return str(shapes[0])
    return str(shapes[0][0] if len(shapes[0]) == 1 else shapes[0])


def _parameter_count(weights) -> int:
    """Values in `weights`, each variable counted once (a tied weight is listed twice)."""
    unique = {id(weight): weight for weight in weights}.values()
    total = 0
    for weight in unique:
        size = 1
        for dimension in weight.shape:
            size *= dimension
        total += size
    return total
