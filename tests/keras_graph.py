"""Reads a Keras 3 functional model the way the golden files describe one."""


def inbound(layer) -> list:
    """Names of the layers feeding `layer`: one per input, across its call sites."""
    return [tensor._keras_history.operation.name
            for node in layer._inbound_nodes for tensor in node.input_tensors]


def layer_table(model) -> list:
    return [(layer.name, layer.count_params(), inbound(layer)) for layer in model.layers]
