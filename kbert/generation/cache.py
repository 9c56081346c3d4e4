"""A built `lm`/`unilm` model, re-run on new tokens only, with a key/value cache per attention call.

`CachedGraph` makes the family's graph again around the model's own layers
(the template's `apply` reuses a layer by name) and runs it on the new tokens
of each row. Each layer computes as in the model, except those with a
`call_step` (positions, the attention mask, the attention itself), which the
graph calls instead with the step's `kbert.layers.decoding.DecodingStep`: the
new tokens' positions, the cache slots they may attend to, and a
`[batch, slots, heads, head_size]` key/value cache per attention call, which
each self-attention call takes in and gives back updated (the `cache` and
`cache_slots` arguments of `MultiHeadSelfAttention`'s call). Dropout is inert
outside training. The caches have a fixed number of slots, so one compiled
step serves the prompt (many new tokens) and every later token (one each).

T5 (`model="t5"`, `"t5.1.1"`, `"mt5.1.1"`) runs its encoder once per source
(`encode`); each decoder block's cross-attention keys and values of the
encoder's output are computed then and kept beside the self-attention cache.
The step runs the decoder alone, its cross-attention over those keys and
values.
"""

from __future__ import annotations

import functools
from typing import List, Optional, Tuple

import keras
import numpy as np
from keras import ops

from kbert.errors import KbertError
from kbert.generation.steps import next_step
from kbert.layers import AttentionMask
from kbert.layers.checks import traced_once
from kbert.layers.decoding import DecodingStep
from kbert.models.registry import get_family, graph_class


class _StepGraph:
    """Mixed into a family's graph class: runs the graph on real tensors, one decoding step at a time."""

    step: DecodingStep

    def apply(self, inputs, layer_class, name, **kwargs):
        layer = self.layers[name]
        return layer.call_step(inputs, self.step) if hasattr(layer, "call_step") else layer(inputs)

    def run_step(self, inputs, step: DecodingStep):
        """The graph's LM output on the new tokens `inputs`; `step.caches` is updated."""
        self.inputs, self.step = inputs, step
        self.reset_run_state()
        # T5: the decoder alone; the source mask stands in for the encoder's output, which the
        # cross-attention does not read (the step holds its keys and values).
        outputs = self.run(inputs) if step.source is None else self.run_decoder(step.source, inputs[0])
        return outputs[-1] if isinstance(outputs, (list, tuple)) else outputs


class CachedGraph:
    """Runs a language model, or T5's decoder, on new tokens only.

    Args:
        model: from `build_transformer_model(..., application="lm"|"unilm", with_mlm=True|"linear")`,
            a GPT family's (`model="gpt"`, `"gpt2"`, `"gpt2_ml"`: language models by construction),
            or a whole T5 (`model="t5"`, `"t5.1.1"`, `"mt5.1.1"`).

    `step(token_ids, segment_ids, positions, allowed, last, state)` returns
    the LM output at each row's new token `last` (`[batch, vocab]`) and the
    updated state: `"self"`, a `(keys, values)` cache per self-attention call;
    T5's also `"cross"`, the encoder output's keys and values per
    cross-attention call, and `"source"`, True at real source tokens (the
    parts of a `DecodingStep`). `forward(inputs, last)` is the same output
    from the whole model on whole sequences (T5: `[source ids, decoder
    ids]`). T5's `encode(source_ids)` gives the state's source part;
    `greedy(...)`, `sample(top_k, nucleus)(...)` and `beam(...)` run greedy
    decoding's, sampling's and beam search's remaining steps in one call. Each is
    compiled once on TensorFlow and JAX (`kbert.layers.checks.traced_once`).
    """

    def __init__(self, model):
        spec = getattr(model, "build_spec", None)
        family = get_family(getattr(model, "family", "bert"))
        self.seq2seq = getattr(family, "part", None) == "both"
        names = {layer.name for layer in model.layers}
        if spec is not None and spec.get("layer_norm_cond"):
            raise KbertError("generation re-runs the model's own graph, which cannot take layer_norm_cond's "
                             "condition yet; decode with kbert.AutoRegressiveDecoder around the model, as "
                             "bert4keras's scripts do")
        if spec is None or family.lm_output not in names or (
                spec["application"] not in ("lm", "unilm") and not self.seq2seq):
            raise KbertError("generation needs a model from build_transformer_model(..., "
                             "application='lm' or 'unilm', with_mlm=True), a GPT family's model "
                             "(model='gpt', 'gpt2' or 'gpt2_ml'), or a whole T5 (model='t5', 't5.1.1' or "
                             "'mt5.1.1', not its _encoder or _decoder part)")
        family_graph = graph_class(family)
        cached_class = type(f"Cached{family_graph.__name__}", (_StepGraph, family_graph), {})
        self.graph = cached_class.from_model(model, family)
        # T5's encoder runs once per source, as in the model: through the family's own graph.
        self.encoder_graph = family_graph.from_model(model, family) if self.seq2seq else None
        self.model = model
        self.config, self.application = self.graph.config, spec["application"]
        self.has_segments = bool(spec["segment_vocab_size"]) and not self.seq2seq
        self.calls = len(family.block_indices(self.config))
        self.cache_shape = (self.config.num_attention_heads, self.config.head_size)
        self.mask_layer = next((layer for layer in model.layers if isinstance(layer, AttentionMask)), None)
        self.encode, self.step, self.forward, self.greedy, self.beam = self._compiled(model)
        self._samplers = {}  # (top_k, nucleus) -> `_sample` compiled for them

    def _compiled(self, model):
        """`_encode`, `_step`, `_forward`, `_greedy` and `_beam`, each compiled once on TensorFlow and JAX
        (`traced_once`)."""
        def cache(tf):
            return tf.TensorSpec([None, None, *self.cache_shape], tf.float32)

        def state(tf):
            caches = [(cache(tf), cache(tf))] * self.calls
            if not self.seq2seq:
                return {"self": caches}
            return {"self": caches, "cross": caches, "source": tf.TensorSpec([None, None], tf.bool)}

        def ids(tf):
            return tf.TensorSpec([None, None], tf.int32)

        def last(tf):
            return tf.TensorSpec([None], tf.int32)

        def scalar(tf, dtype="int32"):
            return tf.TensorSpec([], dtype)

        def one_path(tf):  # `_greedy`'s arguments, the first of `_sample`'s
            return [last(tf), last(tf), tf.TensorSpec([None], tf.bool), state(tf), *[scalar(tf)] * 5,
                    scalar(tf, "bool")]

        self._sample_signature = lambda tf: [*one_path(tf), tf.TensorSpec([None, None], tf.float32),
                                             *[scalar(tf, "float32")] * 2, scalar(tf, "bool")]

        weights = model.weights
        return (traced_once(self._encode, lambda tf: [ids(tf)], weights),
                traced_once(self._step, lambda tf: [ids(tf), ids(tf), ids(tf),
                                                    tf.TensorSpec([None, None, None], tf.bool), last(tf), state(tf)],
                            weights),
                traced_once(self._forward, lambda tf: [[ids(tf)] * len(model.inputs), last(tf)], weights),
                traced_once(self._greedy, one_path, weights),
                traced_once(self._beam, lambda tf: [
                    tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None, None], tf.float32), last(tf),
                    state(tf), ids(tf), *[scalar(tf)] * 4, scalar(tf, "bool"), scalar(tf, "bool")], weights))

    def hides_start(self, start_id) -> bool:
        """Whether a T5 decoder started from `start_id` hides that token from every later one: its padding
        id, which bert4keras's T5 masks (`decoder_mask_zero`; Hugging Face's and kbert-trained T5 do not)."""
        return bool(self.seq2seq and self.config.decoder_mask_zero and start_id == self.config.pad_token_id)

    def empty_caches(self, rows: int, slots: int) -> List[Tuple]:
        """Zero self-attention caches for `rows` sequences of up to `slots` tokens."""
        zeros = ops.zeros([rows, slots, *self.cache_shape], "float32")
        return [(zeros, zeros) for _ in range(self.calls)]

    def _encode(self, source_ids):
        """T5: the encoder's output projected to each decoder block's cross-attention keys and values."""
        from kbert.models.t5.family import CROSS_ATTENTION, DECODER, block

        encoded = self.encoder_graph.run_encoder(source_ids)
        cross = [self.model.get_layer(block(DECODER, index, CROSS_ATTENTION)).keys_and_values(encoded)
                 for index in range(self.calls)]
        pad = self.config.pad_token_id
        return {"cross": cross, "source": source_ids != pad if pad is not None else source_ids == source_ids}

    def _forward(self, inputs, last):
        """The whole model on whole sequences: its LM output at each row's position `last`."""
        return _at(self.model(inputs, training=False), last)

    def _step(self, token_ids, segment_ids, positions, allowed, last, state):
        inputs = [token_ids, segment_ids] if self.has_segments else [token_ids]
        step = DecodingStep(positions, allowed, state["self"], state.get("cross", ()), state.get("source"))
        outputs = self.graph.run_step(inputs, step)
        return _at(outputs, last), {**state, "self": step.caches}

    def _greedy(self, tokens, lengths, done, state, steps, end_id, min_new_tokens, pad, segment, hide_start):
        """Greedy decoding from the second new token on, the whole loop in one compiled call.

        `tokens` are the first new tokens (chosen from `step`'s output, with
        `done` where that was the end), `lengths` the rows' lengths before
        them. Each turn feeds the last tokens, bans `pad` (-1: none) and,
        before `min_new_tokens`, `end_id`, and takes the most likely token,
        as `kbert.generation.search` does. Returns `[rows, slots]`:
        column i the token chosen i-th (column 0 unused), -1 once a row ended.
        """
        def most_likely(scores, index):
            return ops.argmax(scores, axis=-1)

        return self._one_path(most_likely, tokens, lengths, done, state, steps, end_id, min_new_tokens, pad,
                              segment, hide_start)

    def sample(self, top_k: Optional[int], nucleus: bool):
        """`_sample` for a sampler's `top_k` (None: every token) and whether it has a `top_p`, compiled once for
        them: the number of tokens kept is a shape."""
        key = (top_k, nucleus)
        if key not in self._samplers:
            self._samplers[key] = traced_once(functools.partial(self._sample, top_k=top_k, nucleus=nucleus),
                                              self._sample_signature, self.model.weights)
        return self._samplers[key]

    def _sample(self, tokens, lengths, done, state, steps, end_id, min_new_tokens, pad, segment, hide_start,
                draws, top_p, temperature, probabilities, *, top_k, nucleus):
        """Sampling from the second new token on, as `_greedy` runs greedy decoding: each turn picks as
        `kbert.generation.search.Sampler` does, with turn i's uniform numbers in `draws[i - 1]` (`[slots,
        rows]`, from the sampler's generator); `top_k`, `top_p` (where `nucleus`) and `temperature` as its;
        `probabilities`: the model's output is a softmax's (else logits)."""
        def drawn(scores, index):
            log_probs = ops.where(scores == -np.inf, -np.inf,  # a banned token's probability is 0
                                  _log_probabilities(scores, probabilities))
            return _drawn(ops.softmax(log_probs / temperature, axis=-1), ops.take(draws, index - 1, axis=0),
                          top_k, top_p if nucleus else None)

        return self._one_path(drawn, tokens, lengths, done, state, steps, end_id, min_new_tokens, pad, segment,
                              hide_start)

    def _one_path(self, choose, tokens, lengths, done, state, steps, end_id, min_new_tokens, pad, segment,
                  hide_start):
        """The loop of `_greedy` and `_sample`: `choose(scores, index)` picks each row's token from the
        step's output with the banned tokens at -inf."""
        rows, slots = ops.shape(state["self"][0][0])[:2]
        out = ops.full([rows, slots], -1, "int32")

        def turn(index, tokens, lengths, done, out, state):
            scores, state = self._next_step(ops.where(done, 0, tokens), lengths, state, segment, hide_start)
            tokens = ops.cast(choose(_banned(scores, index, end_id, min_new_tokens, pad), index), "int32")
            done = done | (tokens == end_id)
            out = ops.slice_update(out, [0, index], ops.where(done, -1, tokens)[:, None])
            return index + 1, tokens, lengths + 1, done, out, state

        def going(index, tokens, lengths, done, out, state):
            return (index < steps) & ops.logical_not(ops.all(done))

        return ops.while_loop(going, turn, (ops.convert_to_tensor(1, "int32"), tokens, lengths, done, out,
                                            state))[4]

    def _next_step(self, tokens, lengths, state, segment, hide_start):
        """Each row's next token `tokens` fed at its position `lengths`: the LM output after it (float32) and
        the state."""
        rows, slots = ops.shape(state["self"][0][0])[:2]
        positions, allowed = next_step(lengths, slots, hide_start, ops)
        fed = tokens[:, None]
        scores, state = self._step(fed, ops.full(ops.shape(fed), segment, "int32"), positions, allowed,
                                   ops.zeros([rows], "int32"), state)
        return ops.cast(scores, "float32"), state

    def _beam(self, log_probs, scores, lengths, state, history, end_id, min_new_tokens, pad, segment, hide_start,
              probabilities):
        """Beam search, the whole loop in one compiled call, as `kbert.generation.search` runs it.

        `log_probs` `[rows, V]` are the first step's (rows: `batch × beams`,
        a prompt's beams together), `scores` `[batch, beams]` (0 for each
        prompt's first beam, -inf for the others, which start as copies),
        `lengths` the rows' lengths, `history` `[rows, max_new_tokens]` all
        -1. Each turn adds each beam's score to its tokens' log-probabilities
        (the banned ones -inf), ranks a prompt's candidates, and takes them in
        order: one ending in `end_id` is a finished continuation (the best of
        them kept per prompt), the first `beams` others are the next beams
        (fewer: the rest get score -inf, as copies of the prompt's first). It
        stops when every prompt has a finished continuation at least as good
        as its best beam. `probabilities`: the model's output is a softmax's
        (else logits). Returns the best finished score `[batch]` (-inf: none)
        and its tokens `[batch, max_new_tokens]` (-1 past its end), the
        beams' scores and tokens, and the turns taken.
        """
        batch, beams = ops.shape(scores)[0], ops.shape(scores)[1]
        steps, vocab = ops.shape(history)[1], ops.shape(log_probs)[-1]
        best = ops.full([batch], -np.inf, "float32")
        best_tokens = ops.full([batch, steps], -1, "int32")
        ranks, prompts = ops.arange(beams, dtype="int32"), ops.arange(batch, dtype="int32")

        def turn(index, log_probs, scores, lengths, history, best, best_tokens, state, stop):
            log_probs = _banned(log_probs, index, end_id, min_new_tokens, pad)
            candidates = ops.reshape(scores[:, :, None] + ops.reshape(log_probs, [batch, beams, vocab]),
                                     [batch, beams * vocab])
            values, flat = ops.top_k(candidates, 2 * beams)  # best first, ties in index order, as the search's
            parents, tokens = ops.cast(flat // vocab, "int32"), ops.cast(flat % vocab, "int32")
            alive = ops.isfinite(values) & (tokens != end_id)
            before = ops.cumsum(ops.cast(alive, "int32"), axis=1) - ops.cast(alive, "int32")
            # The search takes candidates in order until it has `beams` beams; an end met before is finished.
            finished = ops.where(ops.isfinite(values) & (tokens == end_id) & (before < beams), values, -np.inf)
            ended, which = ops.max(finished, axis=1), ops.argmax(finished, axis=1)
            better = ended > best  # of equal scores the first stays, as the search's max() keeps the first
            ended_rows = prompts * beams + ops.take_along_axis(parents, which[:, None], axis=1)[:, 0]
            best = ops.where(better, ended, best)
            best_tokens = ops.where(better[:, None], ops.take(history, ended_rows, axis=0), best_tokens)
            # The k-th beam is the k-th candidate kept; a beam left empty follows its prompt's first, at -inf.
            kept = alive[:, None, :] & (before[:, None, :] == ranks[None, :, None])  # [batch, beams, 2 beams]
            has, slot = ops.any(kept, axis=-1), ops.argmax(kept, axis=-1)
            scores = ops.where(has, ops.take_along_axis(values, slot, axis=1), -np.inf)
            rows = ops.reshape(ops.where(has, ops.take_along_axis(parents, slot, axis=1), 0)
                               + prompts[:, None] * beams, [-1])
            tokens = ops.reshape(ops.where(has, ops.take_along_axis(tokens, slot, axis=1), 0), [-1])
            history = ops.slice_update(ops.take(history, rows, axis=0), [0, index], tokens[:, None])
            stop = ops.all(ops.isfinite(best) & (best >= ops.max(scores, axis=1)))
            state = keras.tree.map_structure(lambda tensor: ops.take(tensor, rows, axis=0), state)
            lengths = ops.take(lengths, rows, axis=0)

            def advance():
                outputs, next_state = self._next_step(tokens, lengths, state, segment, hide_start)
                return _log_probabilities(outputs, probabilities), next_state

            # No step after the last turn, as in the search: its token would need one more position.
            log_probs, state = ops.cond((index + 1 < steps) & ops.logical_not(stop), advance,
                                        lambda: (log_probs, state))
            return index + 1, log_probs, scores, lengths + 1, history, best, best_tokens, state, stop

        def going(index, log_probs, scores, lengths, history, best, best_tokens, state, stop):
            return (index < steps) & ops.logical_not(stop)

        index, _, scores, _, history, best, best_tokens, _, _ = ops.while_loop(going, turn, (
            ops.convert_to_tensor(0, "int32"), log_probs, scores, lengths, history, best, best_tokens, state,
            ops.convert_to_tensor(False)))
        return best, best_tokens, scores, history, index


def _log_probabilities(outputs, probabilities):
    """A step's log-probabilities `[rows, V]` of its LM output: a softmax's probabilities (`probabilities`
    True) or logits, as `kbert.generation.search.log_probabilities` gives them in NumPy."""
    return ops.where(probabilities, ops.log(ops.maximum(outputs, 1e-38)), ops.log_softmax(outputs, axis=-1))


def _banned(scores, index, end_id, min_new_tokens, pad):
    """`scores` `[rows, V]` with the padding id, and `end_id` before `min_new_tokens`, at -inf (-1: none)."""
    vocab = ops.arange(ops.shape(scores)[-1], dtype="int32")[None, :]
    return ops.where((vocab == pad) | ((vocab == end_id) & (index < min_new_tokens)), -np.inf, scores)


# Nucleus sampling without top_k ranks the vocabulary's most likely tokens this many first: a full sort
# of the vocabulary costs a compiled step more than the model on a CPU, and the nucleus is rarely larger.
NUCLEUS_CANDIDATES = 1024


def _drawn(probs, uniforms, top_k: Optional[int], top_p):
    """Each row's token drawn with its uniform number from `probs` `[rows, V]`, as `Sampler` draws it: the
    `top_k` most likely (None: all) and of them the head of the ranking whose sum reaches `top_p` (None:
    all), picked in vocabulary order."""
    vocab = probs.shape[-1]
    if top_k is None and top_p is None:
        return _first_past(probs, uniforms)
    if top_k is None and vocab > NUCLEUS_CANDIDATES:
        head, _ = ops.top_k(probs, NUCLEUS_CANDIDATES)
        within = ops.all(ops.sum(head, axis=-1) >= top_p)  # no token past the candidates is kept
        return ops.cond(within, lambda: _ranked_draw(probs, uniforms, NUCLEUS_CANDIDATES, top_p),
                        lambda: _ranked_draw(probs, uniforms, vocab, top_p))
    return _ranked_draw(probs, uniforms, min(top_k or vocab, vocab), top_p)


def _ranked_draw(probs, uniforms, k: int, top_p):
    """`_drawn` among the `k` most likely tokens (ties: the lower id first, as `ops.top_k` ranks them)."""
    ranked, ids = ops.top_k(probs, k)
    if top_p is not None:
        ranked = ops.where(ops.cumsum(ranked, axis=-1) - ranked < top_p, ranked, 0.0)
    order = ops.argsort(ids, axis=-1)  # back to vocabulary order
    ids = ops.take_along_axis(ids, order, axis=-1)
    picks = _first_past(ops.take_along_axis(ranked, order, axis=-1), uniforms)
    return ops.take_along_axis(ids, picks[:, None], axis=-1)[:, 0]


def _first_past(weights, uniforms):
    """Per row, the first column whose share of the running total passes the row's uniform number."""
    cumulative = ops.cumsum(weights, axis=-1)
    cumulative = cumulative / cumulative[:, -1:]
    return ops.sum(ops.cast(cumulative <= uniforms[:, None], "int32"), axis=-1)


def _at(outputs, last):
    """Each row's output `[batch, length, V]` at its position `last` `[batch]`: `[batch, V]`."""
    return ops.take_along_axis(outputs, ops.cast(last, "int32")[:, None, None], axis=1)[:, 0]


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
