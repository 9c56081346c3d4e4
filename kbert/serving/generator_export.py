"""A seq2seq model for ONNX: its cached decoding step (and a T5's encoder), and `OnnxGenerator`, the loop that
drives it.

kbert generates by re-running the model on the new tokens only, with a
key/value cache per attention call (`kbert.generation.cache`). The export is
that step as one ONNX graph, the same graph for the prompt (all its tokens at
once) and for each token after it:

- inputs: `token_ids`, `segment_ids`, `positions` (each `[batch, new]`
  int32: the new tokens, their segments (UniLM: 1 for the target), their
  positions), `allowed` (`[batch, new, slots]` bool: which cache slots each
  new token attends to), `last` (`[batch]` int32: the new token whose
  next-token probabilities are returned), and per attention call `i`
  `keys_i`, `values_i` (`[batch, slots, heads, head_size]` float32, zeros
  before the prompt);
- outputs: `probabilities` (`[batch, vocab]`) and `next_keys_i`,
  `next_values_i`: the caches with the new tokens' keys and values written
  at their positions, for the next step.

A T5 is two graphs: `NAME.encoder.onnx` beside the step `NAME.onnx` reads
`source_ids` (`[batch, source]`, padded with the padding id) and gives each
decoder block's cross-attention keys and values of the encoder's output,
`cross_keys_i` and `cross_values_i`, and `source_mask` (True at real source
tokens); the step takes those as inputs too, and its prompt is the decoder's
start id alone.

The file's metadata (`kbert_*` keys) gives the application, the number of
attention calls, heads and head size, the end and padding ids and how to
decode. `OnnxGenerator` is greedy decoding on it with NumPy and onnxruntime
alone (no TensorFlow, no kbert model); the export is checked with it: the same
tokens as `kbert.generate`'s greedy decoding on sample text, and the first
step's probabilities within 1e-4 of Keras's.
"""

from __future__ import annotations

import itertools
import json
import os
from typing import List, Optional, Sequence

import numpy as np

from kbert.errors import KbertError, require_tensorflow
from kbert.generation.search import Search, log_probabilities  # NumPy alone: no Keras is imported
from kbert.generation.steps import next_step, prompt_step
from kbert.serving.conversion import (FLOAT_TOLERANCE, INT8_PROBABILITY_TOLERANCE, INT8_TOKEN_SHARE, SAMPLE_TEXTS,
                                      ExportReport, convert_to_onnx, export_staging, publish, refuse_existing)
from kbert.tokenizers import pad_batch

DECODING_NOTE = ("the prompt first: all its tokens as new tokens at positions 0..n-1, each allowed the prompt's "
                 "real tokens (kbert_application unilm) or those up to itself (lm), zero caches of "
                 "kbert_slots >= prompt + new tokens; then each chosen token alone, at the next position, allowed "
                 "every slot up to its own, segment kbert_new_segment, with the caches the last step returned; "
                 "never choose kbert_pad_id; stop at kbert_end_id")
T5_DECODING_NOTE = ("run kbert_encoder on the sources (padded with kbert_pad_id) once; then the step as for a "
                    "language model, its prompt kbert_start_id alone at position 0, fed the encoder's "
                    "cross_keys_i, cross_values_i and source_mask at every step; where kbert_hide_start is true, "
                    "no token (the start itself included) is allowed slot 0; never choose kbert_pad_id; stop at "
                    "kbert_end_id")
NOT_EXPORTED = "kbert predict and kbert serve run the model directory itself"


def encoder_path(step_file: str) -> str:
    """Where a T5 export's encoder goes: `NAME.encoder.onnx` beside the step `NAME.onnx`."""
    return os.path.splitext(step_file)[0] + ".encoder.onnx"


def write_generator_onnx(model_dir: str, out: str, quantize: Optional[str]) -> ExportReport:
    """Exports a `kbert train --task seq2seq` model (UniLM, a language model or T5) as its cached step, and
    a T5's encoder beside it (module docstring)."""
    from kbert.generation.cache import cached_graph
    from kbert.tasks.seq2seq import decoder_start_id, load_generator

    tf = require_tensorflow("ONNX export (through tf2onnx)", "--format keras")
    loaded = load_generator(model_dir)
    graph, tokenizer = cached_graph(loaded.model), loaded.tokenizer
    if graph.seq2seq:
        refuse_existing(encoder_path(out))
    start_id = decoder_start_id(tokenizer) if graph.seq2seq else None
    metadata = {"kbert_task": "seq2seq", "kbert_output": "probabilities", "kbert_application": graph.application,
                "kbert_calls": graph.calls, "kbert_heads": graph.cache_shape[0],
                "kbert_head_size": graph.cache_shape[1], "kbert_end_id": tokenizer.sep_id,
                "kbert_pad_id": graph.config.pad_token_id, "kbert_new_segment": int(graph.application == "unilm"),
                "kbert_decoding": DECODING_NOTE}
    if graph.seq2seq:
        metadata.update(kbert_application="t5", kbert_start_id=start_id, kbert_hide_start=graph.hides_start(start_id),
                        kbert_encoder=os.path.basename(encoder_path(out)), kbert_decoding=T5_DECODING_NOTE)
    calls = graph.calls

    def pairs(tensors):
        return list(zip(tensors[0::2], tensors[1::2]))

    def step(token_ids, segment_ids, positions, allowed, last, *tensors):
        state = {"self": pairs(tensors[:2 * calls])}
        if graph.seq2seq:
            state.update(cross=pairs(tensors[2 * calls:4 * calls]), source=tensors[-1])
        probabilities, state = graph.step(token_ids, segment_ids, positions, allowed, last, state)
        return {"probabilities": probabilities, **_named_caches("next_", state["self"])}

    def cache_specs(prefix: str = ""):
        return [tf.TensorSpec([None, None, *graph.cache_shape], tf.float32, name=f"{prefix}{kind}_{index}")
                for index in range(calls) for kind in ("keys", "values")]

    ids = [tf.TensorSpec([None, None], tf.int32, name=name) for name in ("token_ids", "segment_ids", "positions")]
    signature = [*ids, tf.TensorSpec([None, None, None], tf.bool, name="allowed"),
                 tf.TensorSpec([None], tf.int32, name="last"), *cache_specs()]
    if graph.seq2seq:
        signature += [*cache_specs("cross_"), tf.TensorSpec([None, None], tf.bool, name="source_mask")]
    prompts = [ids for ids, _ in tokenizer.encode_all(list(SAMPLE_TEXTS))]
    with export_staging() as staging:
        path = convert_to_onnx(tf.function(step, input_signature=signature), signature, metadata,
                               _folder(staging, "step"), quantize, "seq2seq", NOT_EXPORTED)
        encoder = None
        if graph.seq2seq:
            source = [tf.TensorSpec([None, None], tf.int32, name="source_ids")]
            encoder = convert_to_onnx(tf.function(lambda source_ids: _encoded(graph.encode(source_ids)), source),
                                      source, {"kbert_task": "seq2seq-encoder"}, _folder(staging, "encoder"),
                                      quantize, "seq2seq", NOT_EXPORTED)
        difference = _check(OnnxGenerator(path, encoder), loaded.model, graph, prompts, start_id, quantize)
        publish({**({encoder: encoder_path(out)} if encoder else {}), path: out})
    return ExportReport(out, "onnx", quantize, difference, companion=encoder_path(out) if encoder else None)


def _folder(staging: str, name: str) -> str:
    os.makedirs(os.path.join(staging, name))
    return os.path.join(staging, name)


def _named_caches(prefix: str, caches) -> dict:
    """`(keys, values)` per attention call as `{prefix}keys_i` and `{prefix}values_i`."""
    named = {}
    for index, (keys, values) in enumerate(caches):
        named[f"{prefix}keys_{index}"], named[f"{prefix}values_{index}"] = keys, values
    return named


def _encoded(state: dict) -> dict:
    """A T5 encoder's state (`CachedGraph.encode`) as the encoder file's named outputs."""
    return {**_named_caches("cross_", state["cross"]), "source_mask": state["source"]}


def _check(generator: "OnnxGenerator", model, graph, prompts: List[List[int]], start_id: Optional[int],
           quantize: Optional[str]) -> float:
    """The largest difference of the first step's probabilities from Keras's; an error where it is NaN or above
    1e-4 (float32; int8: `INT8_PROBABILITY_TOLERANCE`), or where greedy decoding gives other tokens than
    `kbert.generate`'s (int8: other first tokens, or more than `INT8_TOKEN_SHARE` of the rest)."""
    from kbert.generation import generate

    first = generator.first_probabilities(prompts)
    expected = np.stack([_keras_probabilities(model, graph, prompt, start_id) for prompt in prompts])
    difference = float(np.abs(first - expected).max())
    allowed = INT8_PROBABILITY_TOLERANCE if quantize else FLOAT_TOLERANCE
    if not difference <= allowed:  # NaN included
        raise KbertError(f"the ONNX step's probabilities{' (int8)' if quantize else ''} differ from Keras's by "
                         f"{difference:.2e} on sample text (allowed: {allowed}); nothing was written")
    wanted = generate(model, prompts, max_new_tokens=8, end_id=generator.end_id, strategy="greedy",
                      start_id=start_id)
    got = generator.greedy(prompts, max_new_tokens=8)
    if quantize:  # int8 may flip a near tie: the first tokens must agree, and nearly all the rest
        changed = _changed_share(got, wanted)
        if [tokens[:1] for tokens in got] == [tokens[:1] for tokens in wanted] and changed <= INT8_TOKEN_SHARE:
            return difference
    if got != wanted:
        raise KbertError(f"greedy decoding on the ONNX step{' (int8)' if quantize else ''} gives {got}, "
                         f"kbert.generate {wanted}, on sample text" + (
                             f" ({_changed_share(got, wanted):.0%} of tokens differ; allowed: the same first tokens "
                             f"and {INT8_TOKEN_SHARE:.0%} of the rest); nothing was written. Export this model in "
                             "float32" if quantize else "; nothing was written"))
    return difference


def _changed_share(got: List[List[int]], wanted: List[List[int]]) -> float:
    """The share of token positions where two decodings differ (a missing token counts as a difference)."""
    pairs = [(a, b) for mine, theirs in zip(got, wanted) for a, b in itertools.zip_longest(mine, theirs)]
    return sum(a != b for a, b in pairs) / max(len(pairs), 1)


def _keras_probabilities(model, graph, prompt: List[int], start_id: Optional[int]) -> np.ndarray:
    """The model's next-token probabilities after `prompt` (segment 0), whole-sequence, in Keras; a T5's
    first decoder step on the source `prompt`."""
    from keras import ops

    if graph.seq2seq:
        inputs, last = [np.array([prompt], np.int32), np.array([[start_id]], np.int32)], 0
    else:
        inputs, last = [np.array([prompt], np.int32)] * len(model.inputs), len(prompt) - 1
        if graph.has_segments:
            inputs[1] = np.zeros_like(inputs[1])
    return ops.convert_to_numpy(graph.forward(inputs, np.array([last], np.int32)))[0]


class OnnxGenerator:
    """Greedy decoding and beam search on a `kbert export` seq2seq ONNX file, with NumPy and onnxruntime alone
    (the search is `kbert.generation.search`'s, which imports no Keras).

    Args:
        path: the `.onnx` file (a T5's decoder step).
        encoder: a T5's encoder file (default: the one its metadata names, beside `path`).

    Usage, on a file `kbert export --model runs/toy-extraction out.onnx` wrote (the source's ids from
    the model directory's vocab.txt, as `[CLS] source [SEP]`; `tests/test_export.py` runs it):

        generator = OnnxGenerator("out.onnx")
        generator.greedy([[2, 27, 55, 40, 3]], max_new_tokens=16)  # -> [[the target's ids]]
        generator.beam([[2, 27, 55, 40, 3]], max_new_tokens=16, beam_size=4)
    """

    def __init__(self, path: str, encoder: Optional[str] = None):
        import onnxruntime

        self.session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        meta = self.session.get_modelmeta().custom_metadata_map
        if meta.get("kbert_task") != "seq2seq":
            raise KbertError(f"{path}: not a kbert seq2seq export (its kbert_task is {meta.get('kbert_task')!r})")
        self.application = meta["kbert_application"]
        self.calls, self.heads, self.head_size, self.end_id, self.new_segment = (
            int(meta[key]) for key in ("kbert_calls", "kbert_heads", "kbert_head_size", "kbert_end_id",
                                       "kbert_new_segment"))
        self.pad_id = json.loads(meta["kbert_pad_id"])
        self.inputs = {item.name for item in self.session.get_inputs()}
        self.outputs = [item.name for item in self.session.get_outputs()]
        self.encoder = None
        if self.application == "t5":
            self.start_id, self.hide_start = json.loads(meta["kbert_start_id"]), json.loads(meta["kbert_hide_start"])
            encoder = encoder or os.path.join(os.path.dirname(os.path.abspath(path)), meta["kbert_encoder"])
            if not os.path.exists(encoder):
                raise KbertError(f"{encoder}: not found; a T5 export's step ({path}) needs the encoder file written "
                                 "beside it")
            self.encoder = onnxruntime.InferenceSession(encoder, providers=["CPUExecutionProvider"])

    def first_probabilities(self, prompts: Sequence[Sequence[int]]) -> np.ndarray:
        """The next-token probabilities after each prompt (a T5's first target token), `[batch, vocab]`."""
        return self._start(prompts, new_tokens=0)[0]

    def greedy(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> List[List[int]]:
        """Each prompt's continuation (a T5's target for each source), the most likely token each step, the
        end id left out."""
        return self._search(max_new_tokens).one_path(_Decoding(self, max_new_tokens), list(prompts),
                                                     [[0] * len(prompt) for prompt in prompts], None)

    def beam(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, beam_size: int = 4) -> List[List[int]]:
        """Each prompt's continuation of highest total log-probability that a beam of `beam_size` finds, as
        `kbert.generate(..., strategy="beam")` finds it."""
        return self._search(max_new_tokens).beam(_Decoding(self, max_new_tokens), list(prompts),
                                                 [[0] * len(prompt) for prompt in prompts], beam_size)

    def _search(self, max_new_tokens: int) -> Search:
        return Search(self.end_id, max_new_tokens, 0, self.pad_id)

    def _start(self, prompts, new_tokens: int):
        """The first step, with caches of room for `new_tokens` more: a language model's prompts, or a T5's
        start id after encoding the sources."""
        sources = self._encode(prompts) if self.encoder else {}
        if self.encoder:
            prompts = [[self.start_id]] * len(prompts)
        lengths = np.array([len(prompt) for prompt in prompts], np.int32)
        token_ids = pad_batch([(prompt, []) for prompt in prompts])[0]
        longest = token_ids.shape[1]
        slots = longest + new_tokens
        allowed = prompt_step(lengths, longest, slots, causal=self.application in ("lm", "t5"),
                              hide_start=bool(self.encoder and self.hide_start))
        caches = [np.zeros([len(prompts), slots, self.heads, self.head_size], np.float32)] * (2 * self.calls)
        positions = np.broadcast_to(np.arange(longest, dtype=np.int32), token_ids.shape)
        probabilities, caches = self._run(token_ids, np.zeros_like(token_ids), positions, allowed, lengths - 1,
                                          caches, sources)
        return probabilities, caches, lengths, sources

    def _encode(self, sources) -> dict:
        """A T5 encoder's outputs on the sources, by name: what every step is fed beside its caches."""
        outputs = [item.name for item in self.encoder.get_outputs()]
        ids = pad_batch([(source, []) for source in sources], 0 if self.pad_id is None else self.pad_id)[0]
        return dict(zip(outputs, self.encoder.run(None, {"source_ids": ids})))

    def _run(self, token_ids, segment_ids, positions, allowed, last, caches, sources):
        feed = {"token_ids": token_ids, "segment_ids": segment_ids, "positions": np.ascontiguousarray(positions),
                "allowed": allowed, "last": last, **sources}
        for index in range(self.calls):
            feed[f"keys_{index}"], feed[f"values_{index}"] = caches[2 * index], caches[2 * index + 1]
        results = dict(zip(self.outputs, self.session.run(None, {k: v for k, v in feed.items() if k in self.inputs})))
        caches = [results[f"next_{kind}_{index}"] for index in range(self.calls) for kind in ("keys", "values")]
        return results["probabilities"].astype(np.float64), caches


class _Decoding:
    """One generation on an exported step: the engine `kbert.generation.search` runs its strategies on."""

    compiles_loops = False

    def __init__(self, generator: OnnxGenerator, max_new_tokens: int):
        self.generator, self.max_new_tokens = generator, max_new_tokens

    def start(self, prompts: List[List[int]], segments: List[List[int]]) -> np.ndarray:
        probabilities, self.caches, self.lengths, self.sources = self.generator._start(prompts, self.max_new_tokens)
        self.slots = np.arange(self.caches[0].shape[1])
        return log_probabilities(probabilities)

    def extend(self, tokens: np.ndarray, parents: np.ndarray) -> np.ndarray:
        """Row i continues row `parents[i]` with `tokens[i]` (beam search reorders the rows)."""
        if not np.array_equal(parents, np.arange(len(parents))):  # greedy decoding keeps every row in place
            self.caches = [cache[parents] for cache in self.caches]
            self.sources = {name: value[parents] for name, value in self.sources.items()}
            self.lengths = self.lengths[parents]
        positions, allowed = next_step(self.lengths, len(self.slots),
                                       bool(self.generator.encoder and self.generator.hide_start))
        probabilities, self.caches = self.generator._run(
            np.asarray(tokens, np.int32)[:, None], np.full_like(positions, self.generator.new_segment), positions,
            allowed, np.zeros(len(tokens), np.int32), self.caches, self.sources)
        self.lengths = self.lengths + 1
        return log_probabilities(probabilities)
