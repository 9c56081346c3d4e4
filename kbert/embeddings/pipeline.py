"""A sentence-transformers pipeline as one Keras graph: the modules after the transformer, each adding its layer.

Each module of `kbert.embeddings.modules` adds its layer in the folder's order (`Module.apply`); the layers are
named so that a model's folder can be written back from its graph (`Embedding-Pooling`, `Embedding-Dense-0`, ...,
`Embedding-Normalize`). The output kinds (`kbert.embeddings.kinds`) decide which modules a graph has.
"""

from __future__ import annotations

from typing import List, Sequence

from kbert.embeddings import modules as st_modules

#: The input of a model whose pooling leaves a prompt out: `[batch, tokens]`, 1 for a token it pools.
POOLED_INPUT = "Input-Pooled"

#: The names of the layers the modules add (what a folder's writer and the exporters find them by).
_LAYER_NAMES = {st_modules.Pooling: "Embedding-Pooling", st_modules.SpladePooling: "Embedding-Pooling",
                st_modules.Normalize: "Embedding-Normalize"}


def apply_modules(inputs: List, vectors, modules: Sequence[st_modules.Module], name: str):
    """The Keras model from `inputs` through `vectors` (the transformer's output) and each of `modules` in order.
    A `Pooling` that leaves the prompt out takes which tokens to pool as one more input (`POOLED_INPUT`)."""
    import keras

    inputs, projections = list(inputs), 0
    for module in modules:
        if isinstance(module, st_modules.Dense):  # numbered: a folder may have several
            layer_name, projections = f"Embedding-Dense-{projections}", projections + 1
        else:
            layer_name = _LAYER_NAMES.get(type(module), f"Embedding-{type(module).__name__}")
        if isinstance(module, st_modules.Pooling) and not module.include_prompt:
            # which tokens it pools, per text: a prompt's left out (`Embedder.pooled_rows` gives them)
            inputs.append(keras.Input((None,), dtype="int32", name=POOLED_INPUT))
            vectors = module.apply(vectors, layer_name, inputs[-1])
        else:
            vectors = module.apply(vectors, layer_name)
    return keras.Model(inputs, vectors, name=name)
