"""The skeleton every family's Keras graph fills in: inputs, embeddings, blocks, heads.

It follows bert4keras's `Transformer` template: `apply_embeddings`, then
`apply_main_layers` once per block, then `apply_final_layers`, each a hook a
family overrides. Layers are made through `apply(inputs, layer_class, name,
**kwargs)`, which makes a layer the first time a name is used and reuses it
after, as bert4keras does: ALBERT's shared block is BERT's block under one
name, called L times.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Optional

import keras
import numpy as np
from keras import ops

from kbert.errors import InputError
from kbert.layers.checks import checked
from kbert.models import naming
from kbert.models.config import BertConfig
from kbert.models.heads import Heads
from kbert.tokenizers.wordpiece import NEGATIVE_PADDING
from kbert.layers import clone_initializer


@keras.saving.register_keras_serializable(package="kbert")
class IdModel(keras.Model):
    """A functional model on token and segment ids that rejects fractional ids.

    Keras casts inputs to the `Input`'s int32 dtype, which would silently turn
    an id of 2.7 into 2. Floating-point arrays of whole numbers (e.g. segment
    ids from `np.zeros`) are accepted; any other fraction raises an error that
    names the input. Integer inputs pass untouched, at no cost.

    `family` is the model family that built it (`"bert"`, `"albert"`, ...):
    its checkpoint names are the ones loading and saving use. It is saved in
    the model's config.
    """

    family = "bert"
    # How the graph was built (config, application, segment inputs, heads), for decoders that
    # re-run it (`kbert.generation`); None for models built by hand.
    build_spec: Optional[dict] = None

    def call(self, inputs, training=None, mask=None):
        flat = keras.tree.flatten(inputs)
        for index, (tensor, reference) in enumerate(zip(flat, self.inputs)):
            tensor = ops.convert_to_tensor(tensor)
            if "float" in str(tensor.dtype) and "int" in str(reference.dtype):  # not T5's Input-Context
                flat[index] = checked(tensor, ops.all(ops.equal(tensor, ops.round(tensor))),
                                      f"{reference.name}: ids must be whole numbers")
        return super().call(keras.tree.pack_sequence_as(inputs, flat), training=training, mask=mask)

    def _run_through_graph(self, inputs, operation_fn=lambda op: op, call_fn=None):
        """Keras's walk of the graph, letting go of each layer's output once the last layer that reads it has run.

        Keras keeps every output until the call returns: run eagerly (PyTorch), a model's activations then
        grow with depth × length (4.1 GiB for ModernBERT-base on 8,192 tokens), where transformers frees each
        as it goes. Under tracing (TensorFlow, JAX) the compiler frees them and this walk changes nothing.
        Keras's own walk runs where a caller passes its own `call_fn` (symbolic execution).
        """
        nodes = self._graph_nodes()
        if call_fn is not None or not all(hasattr(node, "arguments") for node in nodes):
            return super()._run_through_graph(inputs, operation_fn=operation_fn, call_fn=call_fn)
        tensors = {id(x): y for x, y in zip(self.inputs, keras.tree.flatten(inputs))}
        kept = {id(x) for x in self.outputs}
        readers = collections.Counter(id(x) for node in nodes for x in node.input_tensors)
        for node in nodes:
            if any(id(x) not in tensors for x in node.input_tensors):
                continue  # not computable from these inputs, as Keras skips it
            args, kwargs = node.arguments.fill_in(tensors)
            outputs = operation_fn(node.operation)(*args, **kwargs)
            tensors.update(zip((id(x) for x in node.outputs), keras.tree.flatten(outputs)))
            del args, kwargs, outputs
            for x in node.input_tensors:
                readers[id(x)] -= 1
                if not readers[id(x)] and id(x) not in kept:
                    tensors.pop(id(x), None)
        missing = [x.name for x in self.outputs if id(x) not in tensors]
        if missing:
            raise ValueError(f"outputs {missing} are not connected to the inputs")
        return keras.tree.pack_sequence_as(self._outputs_struct, [tensors[id(x)] for x in self.outputs])

    def _graph_nodes(self) -> list:
        """The graph's layer calls in the order Keras runs them (deepest first), inputs left out."""
        return [node for depth in sorted(self._nodes_by_depth, reverse=True) for node in self._nodes_by_depth[depth]
                if node.operation and not node.is_input]

    def predict(self, x, *args, **kwargs):
        self._check_arrays(x)
        return super().predict(x, *args, **kwargs)

    def evaluate(self, x=None, *args, **kwargs):
        self._check_arrays(x)
        return super().evaluate(x, *args, **kwargs)

    def fit(self, x=None, *args, **kwargs):
        self._check_arrays(x)
        return super().fit(x, *args, **kwargs)

    def _check_arrays(self, x) -> None:
        """The graph's checks on arrays given to `predict`, `evaluate` or `fit`, before a compiled backend runs them.

        JAX compiles those loops, and a compiled function cannot raise: the
        checks `call` and the embeddings make would be traced away (and an
        error while tracing leaves Keras's JAX trainer with the model's
        variables released). Datasets and generators are not read ahead;
        TensorFlow raises from its graph.
        """
        if keras.backend.backend() == "tensorflow" or x is None:
            return
        if isinstance(x, dict):
            x = [x.get(reference.name) for reference in self.inputs]
        arrays = [x] if hasattr(x, "shape") else list(x) if isinstance(x, (list, tuple)) else []
        if len(arrays) != len(self.inputs) or not all(hasattr(a, "shape") or isinstance(a, list) for a in arrays):
            return
        for array, reference in zip(arrays, self.inputs):
            array = np.asarray(ops.convert_to_numpy(array))
            if "int" not in str(reference.dtype):
                continue
            if array.dtype.kind == "f" and not np.array_equal(array, np.round(array)):
                raise InputError(f"{reference.name}: ids must be whole numbers")
            for layer in self._layers_reading(reference):
                layer.check_ids(array)
        for layer in self.layers:
            if hasattr(layer, "check_length") and arrays[0] is not None:
                layer.check_length(np.shape(arrays[0])[-1])

    def _layers_reading(self, reference):
        """The layers of the graph with a `check_ids` that take the input `reference` as it is."""
        return [layer for layer in self.layers if hasattr(layer, "check_ids")
                and any(tensor is reference for node in layer._inbound_nodes for tensor in node.input_tensors)]

    def get_config(self):
        return {**super().get_config(), "family": self.family, "build_spec": self.build_spec}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        family, build_spec = config.pop("family", "bert"), config.pop("build_spec", None)
        model = super().from_config(config, custom_objects=custom_objects)
        model.family, model.build_spec = family, build_spec
        return model


def id_model(inputs, outputs, family: str, name: str, build_spec: Optional[dict] = None) -> IdModel:
    """An `IdModel` of the given family."""
    model = IdModel(inputs, outputs, name=name)
    model.family, model.build_spec = family, build_spec
    return model


def built_config(model: keras.Model, family) -> Optional[BertConfig]:
    """The config a model from kbert's builders was built with (`family`'s class); None for a model built by hand."""
    spec = getattr(model, "build_spec", None)
    return family.config_class.from_dict(spec["config"]) if spec else None


def remasked(model: IdModel) -> IdModel:
    """`model`'s graph traced again over the same layers (the same weights), each layer's mask derived anew
    from its input. Keras records the mask it gives a layer in the graph as the graph is built, so a setting
    that changes a mask afterwards (`TokenEmbedding.hidden_ids`) reaches the layers only in a graph traced after
    it."""
    def call(layer, *args, **kwargs):
        kwargs.pop("mask", None)  # derived again by Keras from the input, as the new graph is traced
        return layer(*args, **kwargs)

    traced = keras.models.clone_model(model, clone_function=lambda layer: layer, call_function=call)
    return id_model(traced.inputs, traced.outputs, model.family, model.name, model.build_spec)


@dataclasses.dataclass
class Transformer:
    """What `build_transformer_model(..., return_keras_model=False)` returns, as in bert4keras.

    Attributes:
        model: the `keras.Model`.
        inputs, outputs: the model's inputs and outputs.
        initializer: a copy of the initializer of the model's weights, for heads added later.
        config: the model's config.
    """

    model: keras.Model
    config: BertConfig

    @property
    def inputs(self):
        return self.model.inputs

    @property
    def outputs(self):
        return self.model.outputs

    @property
    def initializer(self):
        return initializer_of(self.model)


def initializer_of(model: keras.Model):
    """A copy of a backbone's initializer, for a head added later."""
    return clone_initializer(model.get_layer(naming.EMBEDDING_TOKEN).embeddings_initializer)


@dataclasses.dataclass(frozen=True)
class NormCondition:
    """bert4keras's `layer_norm_cond`: a tensor every layer norm of the model is conditioned on.

    Attributes:
        tensor: the condition, `[batch, C]`, a Keras tensor of the caller's graph.
        hidden_size: each norm first projects it to this width (None: no projection).
        hidden_act: that projection's activation.
        inputs: the caller's inputs the condition comes from (`additional_input_layers`);
            they become inputs of the model, after the family's own.
    """

    tensor: Any
    hidden_size: Optional[int] = None
    hidden_act: str = "linear"
    inputs: tuple = ()


class TransformerGraph:
    """Builds one family's functional model; subclasses override the hooks.

    Args:
        family: the family (`kbert.models.<family>.family`).
        config: its config.
        heads: the heads to build.
        segment_vocab_size: segment ids the model takes (0: no segment input).
        application: `"encoder"`, `"lm"` or `"unilm"` (bert4keras's names); `"packed"`: an encoder
            over rows of several documents (`build_masked_lm(packed=True)`), with a third input, each
            token's position within its document, which restarts the positions and keeps attention
            within each document.
        condition: conditional layer norms (`NormCondition`), or None.
        residual_attention_scores: each attention layer adds the previous one's
            scores to its own (RealFormer; bert4keras's option of that name).
        task_lora: task LoRA pairs beside every weight that has them in the family's checkpoints
            (`kbert.layers.task_lora`: Jina-v3's), or None; the families whose `task_lora_layers` is True.
    """

    # Made once per run from its first block's input and shared by every block (T5: per stack, the
    # decoder's mask by both decoder runs); `reset_run_state` forgets them.
    position_bias = None  # the positions or position biases every attention layer takes
    attention_mask = None  # the lm / unilm mask
    padding = None  # the builder's `padding`: None, the config's pad_token_id

    def __init__(self, family, config: BertConfig, heads: Heads, segment_vocab_size: int,
                 application: str = "encoder", condition: Optional[NormCondition] = None,
                 residual_attention_scores: bool = False, task_lora: Optional[dict] = None):
        self.family = family
        self.task_lora = task_lora
        self.config = config
        self.heads = heads
        self.segment_vocab_size = segment_vocab_size
        self.application = application
        self.condition = condition
        self.residual_attention_scores = residual_attention_scores
        self.layers: dict = {}
        self.inputs: list = []

    def build(self, name: str) -> IdModel:
        inputs = self.inputs = self.get_inputs()
        extra = list(self.condition.inputs) if self.condition else []
        return id_model(inputs + extra, self.run(inputs), self.family.name, name, self.spec())

    def run(self, inputs):
        """The outputs of the graph on `inputs`: embeddings, every block, the heads."""
        x = self.apply_embeddings(inputs)
        for index in self.family.block_indices(self.config):
            x = self.apply_main_layers(x, index)
        return self.apply_final_layers(x)

    def spec(self) -> dict:
        """What `from_model` needs to make this graph again around a built model's layers."""
        return {"config": self.config.to_dict(), "heads": dataclasses.asdict(self.heads),
                "segment_vocab_size": self.segment_vocab_size, "application": self.application,
                "layer_norm_cond": self.condition is not None}

    @classmethod
    def from_model(cls, model: IdModel, family) -> "TransformerGraph":
        """The graph of a built model, holding its layers: `apply` then reuses them by name."""
        spec = model.build_spec
        graph = cls(family, built_config(model, family), Heads(**spec["heads"]), spec["segment_vocab_size"],
                    spec["application"])
        graph.layers = {layer.name: layer for layer in model.layers}
        return graph

    def reset_run_state(self) -> None:
        """Forgets what a run made once for all its blocks (the attention mask, the position biases), so that
        the graph runs again on other inputs (cached decoding runs it once per step)."""
        self.attention_mask = self.position_bias = None

    def apply(self, inputs, layer_class, name: str, **kwargs) -> Any:
        """Calls the layer named `name` on `inputs`, making it (`layer_class(**kwargs)`) on first use."""
        if name not in self.layers:
            self.layers[name] = layer_class(name=name, **kwargs)
        return self.layers[name](inputs) if inputs is not None else self.layers[name]

    @staticmethod
    def initialise(model: keras.Model, config) -> None:
        """Redraws the weights of a model kbert trains from random weights, where the family's own scheme
        differs from bert4keras's truncated normal (std 0.02, made for post-norm stacks, whose layer norms
        rescale every sub-layer's output): nothing here; T5's graph draws as Google's T5."""

    @staticmethod
    def learning_rate_multipliers(model: keras.Model, optimizer: str) -> dict:
        """`{weight path: multiplier}`: weights of a model kbert trains from random weights with `optimizer`
        (`kbert.training.options.OPTIMIZERS`) that need a larger learning rate than the rest: none here; T5's
        relative position biases under Adam."""
        return {}

    def initializer(self):
        """A new truncated-normal initializer: every weight gets its own (see `clone_initializer`)."""
        return keras.initializers.TruncatedNormal(stddev=self.config.initializer_range)

    def task_settings(self) -> dict:
        """The keywords that give a layer its task LoRA pairs (`task_lora`), where the model has them."""
        return {} if self.task_lora is None else {"task_lora": self.task_lora}

    def token_padding(self) -> dict:
        """`TokenEmbedding`'s padding keywords: the builder's `padding` (a tokenizer's: the id its batches are
        padded with, or `"negative"` ids), else the config's `pad_token_id` (0: Keras's `mask_zero`)."""
        pad = self.config.pad_token_id if self.padding is None else self.padding
        if pad == NEGATIVE_PADDING:
            return {"hidden_ids": True}
        return {"mask_zero": True} if pad == 0 else {} if pad is None else {"pad_id": pad}

    def get_inputs(self) -> list:
        inputs = [keras.Input(shape=(None,), dtype="int32", name=naming.INPUT_TOKEN)]
        if self.segment_vocab_size:
            inputs.append(keras.Input(shape=(None,), dtype="int32", name=naming.INPUT_SEGMENT))
        if self.application == "packed":
            inputs.append(keras.Input(shape=(None,), dtype="int32", name=naming.INPUT_POSITION))
        return inputs

    def apply_embeddings(self, inputs):
        raise NotImplementedError

    def apply_main_layers(self, x, index: Optional[int]):
        raise NotImplementedError

    def apply_final_layers(self, x):
        raise NotImplementedError


class PreNormGraph(TransformerGraph):
    """A pre-norm stack (each block normalises its input; EuroBERT's, ModernBERT's): it ends with one more
    norm, `Output-Norm`, then the MLM head where the model has one.

    Subclasses give `apply_norm(x, name)` and `apply_mlm_head(x)`, with the other hooks."""

    def apply_norm(self, x, name: str):
        raise NotImplementedError

    def apply_mlm_head(self, x):
        raise NotImplementedError

    def apply_final_layers(self, x):
        x = self.apply_norm(x, naming.OUTPUT_NORM)
        return self.apply_mlm_head(x) if self.heads.mlm else x
