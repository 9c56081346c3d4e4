"""A built `lm`/`unilm` model, re-run on new tokens only, with a key/value cache per attention call.

`CachedGraph` makes the family's graph again around the model's own layers
(the template's `apply` reuses a layer by name) and runs it on the new tokens
of each row. Every layer computes as in the model but five, which need the
positions of the new tokens or the earlier tokens' keys and values:

- `Dropout`: skipped (inference);
- `PositionEmbedding`: the rows of each new token's own position;
- `AttentionMask`: the `allowed` slots given for the step;
- `RelativePositionEmbedding` / `SinusoidalPositionEmbedding`: for each new
  token's position (NEZHA against every cache slot; RoFormer's rotation);
- `MultiHeadSelfAttention`: `call_cached`, which writes the new keys and
  values into its call's cache and attends over it.

The cache is a fixed `[batch, slots, heads, head_size]` pair per attention
call, so one compiled step serves the prompt (many new tokens) and every
later token (one each).
"""

from __future__ import annotations

import importlib
from typing import List, Tuple

import keras
from keras import ops

from kbert.errors import KbertError
from kbert.layers import (AttentionMask, MultiHeadSelfAttention, PositionEmbedding, RelativePositionEmbedding,
                          SinusoidalPositionEmbedding)
from kbert.layers.rotary import sinusoids
from kbert.models.registry import get_family


class _Step:
    """What one run of the graph needs besides the token ids."""

    def __init__(self, positions, allowed, caches):
        self.positions, self.allowed, self.caches = positions, allowed, list(caches)
        self.calls = 0


class _CachedApply:
    """Mixed into a family's graph class: `apply` on real tensors, with the five layers above replaced."""

    step: _Step

    def apply(self, inputs, layer_class, name, **kwargs):
        layer = self.layers[name]
        if isinstance(layer, keras.layers.Dropout):
            return inputs
        if isinstance(layer, PositionEmbedding):
            return inputs + ops.cast(ops.take(layer.embeddings, self.step.positions, axis=0), inputs.dtype)
        if isinstance(layer, AttentionMask):
            return self.step.allowed
        if isinstance(layer, RelativePositionEmbedding):
            slots = ops.arange(ops.shape(self.step.allowed)[-1])
            distances = slots[None, None, :] - self.step.positions[:, :, None]
            reach = (layer.input_dim - 1) // 2
            return ops.take(layer.embeddings, ops.clip(distances, -reach, reach) + reach, axis=0)
        if isinstance(layer, SinusoidalPositionEmbedding):
            return sinusoids(self.step.positions, layer.output_dim)
        if isinstance(layer, MultiHeadSelfAttention):
            call = self.step.calls
            self.step.calls += 1
            positions = inputs[-1] if layer.position_encoding else None
            output, self.step.caches[call] = layer.call_cached(
                inputs[0], self.step.allowed, self.step.caches[call], self.step.positions, positions)
            return output
        return layer(inputs)

    def run_step(self, inputs, step: _Step):
        self.inputs, self.step = inputs, step
        # Made once per run in the model's graph: made again for every step here.
        self.attention_mask = self.position_bias = None
        outputs = self.run(inputs)
        return outputs[-1] if isinstance(outputs, (list, tuple)) else outputs, step.caches


class CachedGraph:
    """Runs a model built with `application="lm"` or `"unilm"` and an MLM head on new tokens only.

    Args:
        model: from `build_transformer_model(..., application="lm"|"unilm", with_mlm=True|"linear")`,
            or a GPT family's (`model="gpt"`, `"gpt2"`, `"gpt2_ml"`: language models by construction).

    `step(token_ids, segment_ids, positions, allowed, last, caches)` returns
    the MLM output at each row's new token `last` (`[batch, vocab]`) and the
    updated caches; `forward(token_ids, segment_ids, last)` is the same
    output from the whole model on whole sequences. Each is a `tf.function`
    traced once.
    """

    def __init__(self, model):
        import tensorflow as tf

        spec = getattr(model, "build_spec", None)
        family = get_family(getattr(model, "family", "bert"))
        names = {layer.name for layer in model.layers}
        if spec is None or spec["application"] not in ("lm", "unilm") or family.lm_output not in names:
            raise KbertError("generation needs a model from build_transformer_model(..., "
                             "application='lm' or 'unilm', with_mlm=True), or a GPT family's model "
                             "(model='gpt', 'gpt2' or 'gpt2_ml')")
        module, class_name = family.graph.split(":")
        graph_class = getattr(importlib.import_module(module), class_name)
        cached_class = type(f"Cached{class_name}", (_CachedApply, graph_class), {})
        self.graph = cached_class.from_model(model, family)
        self.config, self.application = self.graph.config, spec["application"]
        self.has_segments = bool(spec["segment_vocab_size"])
        self.calls = len(family.block_indices(self.config))
        self.cache_shape = (self.config.num_attention_heads, self.config.head_size)
        self.mask_layer = next((layer for layer in model.layers if isinstance(layer, AttentionMask)), None)
        ids = tf.TensorSpec([None, None], tf.int32)
        cache = tf.TensorSpec([None, None, *self.cache_shape], tf.float32)
        last = tf.TensorSpec([None], tf.int32)
        self.step = tf.function(self._step, input_signature=[
            ids, ids, ids, tf.TensorSpec([None, None, None], tf.bool), last, [(cache, cache)] * self.calls])
        self.model = model
        self.forward = tf.function(self._forward, input_signature=[ids, ids, last])

    def empty_caches(self, rows: int, slots: int) -> List[Tuple]:
        """Zero caches for `rows` sequences of up to `slots` tokens."""
        import tensorflow as tf

        zeros = tf.zeros([rows, slots, *self.cache_shape], tf.float32)
        return [(zeros, zeros) for _ in range(self.calls)]

    def _forward(self, token_ids, segment_ids, last):
        """The whole model on whole sequences: its MLM output at each row's position `last`."""
        import tensorflow as tf

        inputs = [token_ids, segment_ids] if self.has_segments else [token_ids]
        return tf.gather(self.model(inputs, training=False), last, batch_dims=1)

    def _step(self, token_ids, segment_ids, positions, allowed, last, caches):
        import tensorflow as tf

        inputs = [token_ids, segment_ids] if self.has_segments else [token_ids]
        outputs, caches = self.graph.run_step(inputs, _Step(positions, allowed, caches))
        return tf.gather(outputs, last, batch_dims=1), caches


_GRAPH_ATTRIBUTE = "_kbert_cached_graph"


def cached_graph(model) -> CachedGraph:
    """The model's `CachedGraph`, made (and its step traced) once per model.

    It is kept on the model itself, so it lives exactly as long as the model
    (set past Keras's attribute tracking: it is no part of the model's state).
    """
    graph = model.__dict__.get(_GRAPH_ATTRIBUTE)
    if graph is None:
        graph = CachedGraph(model)
        object.__setattr__(model, _GRAPH_ATTRIBUTE, graph)
    return graph
