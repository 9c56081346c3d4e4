"""`bert4keras.models` on kbert: `build_transformer_model` and `Transformer`.

kbert's builder takes bert4keras's arguments already; this one also honours
`kbert.compat.backend.set_gelu`, as bert4keras's did.

Example:
>>> from kbert.compat.backend import set_gelu
>>> from kbert.compat.models import build_transformer_model
>>> set_gelu("tanh")
>>> model = build_transformer_model("configs/bert_tiny.json")
>>> model.get_layer("Transformer-0-FeedForward").activation.__name__
'gelu_tanh'
>>> set_gelu("erf")
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Optional, Sequence

import keras

from kbert.builder import Transformer as _Transformer
from kbert.builder import build_transformer_model as _build
from kbert.checkpoints.formats import load_weights
from kbert.checkpoints.google import save_google_checkpoint
from kbert.compat.backend import gelu_version
from kbert.errors import KbertError
from kbert.models.config import ACTIVATIONS
from kbert.models.t5.family import CROSS_ATTENTION, DECODER
from kbert.models.t5.graph import CONTEXT_INPUT
from kbert.models.registry import get_family, graph_class, resolve

__all__ = ["Transformer", "build_transformer_model"]

ENCODER_OUTPUT = "Encoder-Output-Dropout"


@dataclasses.dataclass
class Transformer(_Transformer):
    """kbert's `Transformer` (`.model`, `.inputs`, `.outputs`, `.initializer`) with bert4keras's checkpoint methods
    and graph hooks.

    It remembers the build's `keep_tokens` and `compound_tokens`, which a later
    `load_weights_from_checkpoint` applies, as bert4keras's did, and its layer
    name `prefix`. `apply_embeddings(inputs)` and `apply_main_layers(x, index)`
    call the model's own layers on new tensors (bert4keras's BERT-of-Theseus
    mixes two models' blocks so).
    """

    keep_tokens: Optional[Sequence[int]] = None
    compound_tokens: Optional[Sequence] = None
    prefix: str = ""

    @property
    def output(self):
        return self.model.output

    @property
    def initializer(self):
        with _without_prefix(self.model, self.prefix):
            return super().initializer

    @property
    def num_hidden_layers(self) -> int:
        return self.config.num_hidden_layers

    def apply_embeddings(self, inputs):
        """The embeddings layers (token, segment, position, norm, dropout) on new inputs."""
        return self._graph().apply_embeddings(inputs)

    def apply_main_layers(self, x, index: int):
        """Transformer block `index` (attention and feed-forward, with their norms) on a new tensor."""
        return self._graph().apply_main_layers(x, index)

    def _graph(self):
        """The family's graph around the model's layers, by their names without the prefix."""
        family = get_family(self.model.family)
        graph = graph_class(family).from_model(self.model, family)
        graph.layers = {layer.name[len(self.prefix):]: layer for layer in self.model.layers}
        return graph

    def load_weights_from_checkpoint(self, checkpoint: str, mapping=None) -> None:
        """Loads the family's original checkpoint (all or nothing), e.g. after building a model around the
        backbone (bert4keras's multi-GPU examples load last)."""
        if mapping is not None:
            raise ValueError("load_weights_from_checkpoint(mapping=...): kbert reads each family's own names; "
                             "leave mapping out")
        with _without_prefix(self.model, self.prefix):
            load_weights(self.model, checkpoint, keep_tokens=self.keep_tokens, compound_tokens=self.compound_tokens)

    @property
    def encoder(self) -> keras.Model:
        """T5's encoder alone, `[encoder ids] → encoded`, sharing the model's layers (bert4keras's `t5.encoder`)."""
        return keras.Model(self.model.inputs[0], self._t5_layer(ENCODER_OUTPUT).output, name="Encoder")

    @property
    def decoder(self) -> keras.Model:
        """T5's decoder alone, `[context, decoder ids] → probabilities`, sharing the model's layers
        (bert4keras's `t5.decoder`): the decoder's first call, on `Input-Context`."""
        cross_attention = self._t5_layer(f"{DECODER}-Transformer-0-{CROSS_ATTENTION}")
        context = next(tensor for tensor in cross_attention._inbound_nodes[0].input_tensors
                       if tensor._keras_history.operation.name == CONTEXT_INPUT)
        on_context = self.model.layers[-1]._inbound_nodes[0].output_tensors[0]
        return keras.Model([context, self.model.inputs[1]], on_context, name="Decoder")

    def _t5_layer(self, name: str):
        try:
            return self.model.get_layer(self.prefix + name)
        except ValueError:
            raise KbertError(f"encoder/decoder: bert4keras's T5 parts; this {self.config.model_type or 'model'} "
                             "is not a whole T5") from None

    def save_weights_as_checkpoint(self, filename: str, mapping=None, dtype=None) -> None:
        """Writes the weights in the family's original checkpoint layout."""
        if mapping is not None or dtype is not None:
            raise ValueError("save_weights_as_checkpoint: kbert writes each family's own names and dtypes; "
                             "leave mapping and dtype out")
        with _without_prefix(self.model, self.prefix):
            save_google_checkpoint(self.model, filename)


def build_transformer_model(config_path=None, checkpoint_path=None, model=None, application="encoder",
                            return_keras_model=True, prefix: Optional[str] = None, **kwargs):
    """`kbert.build_transformer_model`, with the GELU of `set_gelu` for a config's `"gelu"`, bert4keras's
    `prefix` (before every layer's name, so two models can share one graph) and, as in bert4keras, any
    config key as a keyword (`num_hidden_layers=3`)."""
    config = kwargs.pop("config", None) if config_path is None else config_path
    _, config = resolve(config, model)
    fields = {field.name for field in dataclasses.fields(config)}
    config = dataclasses.replace(config, **{name: kwargs.pop(name) for name in list(kwargs) if name in fields})
    if gelu_version() == "tanh" and ACTIVATIONS.get(config.hidden_act) == "gelu":
        config = dataclasses.replace(config, hidden_act="gelu_tanh")
    built = _build(config, checkpoint_path, model, application, False, **kwargs)
    if prefix:
        _rename_layers(built.model, lambda name: prefix + name)
    if return_keras_model:
        return built.model
    return Transformer(built.model, built.config, kwargs.get("keep_tokens"), kwargs.get("compound_tokens"),
                       prefix or "")


def _rename_layers(model: keras.Model, rename) -> None:
    for layer in model.layers:
        layer.name = rename(layer.name)


@contextlib.contextmanager
def _without_prefix(model: keras.Model, prefix: str):
    """The layers under the family's own names for the block (the checkpoint loader finds them by those)."""
    if not prefix:
        yield
        return
    _rename_layers(model, lambda name: name[len(prefix):])
    try:
        yield
    finally:
        _rename_layers(model, lambda name: prefix + name)
