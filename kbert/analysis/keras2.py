"""A model's summary in the text layout of Keras 2's `model.summary()`.

The layout of the layer tables in bert4keras tutorials (`kbert summary
--style keras2`), so the two can be compared line by line.
"""

from __future__ import annotations

from typing import Iterator, Sequence


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
    >>> from kbert.models.config import bundled_config_path
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
