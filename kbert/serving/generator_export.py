"""A UniLM or language model for ONNX: its cached decoding step, and `OnnxGenerator`, the loop that drives it.

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

The file's metadata (`kbert_*` keys) gives the application, the number of
attention calls, heads and head size, the end and padding ids and how to
decode. `OnnxGenerator` is greedy decoding on it with NumPy and onnxruntime
alone (no TensorFlow, no kbert model); the export is checked with it: the same
tokens as `kbert.generate`'s greedy decoding on sample text, and the first
step's probabilities within 1e-4 of Keras's. T5 (an encoder and a decoder
step: two graphs) is not exported yet.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import List, Optional, Sequence

import numpy as np

from kbert.errors import KbertError, require_tensorflow
from kbert.io import atomic_path
from kbert.serving.conversion import FLOAT_TOLERANCE, SAMPLE_TEXTS, ExportReport, convert_to_onnx

DECODING_NOTE = ("the prompt first: all its tokens as new tokens at positions 0..n-1, each allowed the prompt's "
                 "real tokens (kbert_application unilm) or those up to itself (lm), zero caches of "
                 "kbert_slots >= prompt + new tokens; then each chosen token alone, at the next position, allowed "
                 "every slot up to its own, segment kbert_new_segment, with the caches the last step returned; "
                 "never choose kbert_pad_id; stop at kbert_end_id")


def write_generator_onnx(model_dir: str, out: str, quantize: Optional[str]) -> ExportReport:
    """Exports a `kbert train --task seq2seq` UniLM (or a language model) as its cached step (module docstring)."""
    from kbert.generation.cache import cached_graph
    from kbert.tasks.seq2seq import Seq2SeqTask, load_generator

    tf = require_tensorflow("ONNX export (through tf2onnx)", "--format keras")
    loaded = load_generator(model_dir)
    if Seq2SeqTask.from_options(loaded.options).encoder_decoder:
        raise KbertError(f"{model_dir}: a T5 model; kbert export takes UniLM seq2seq models (a T5's encoder and "
                         "cached decoder step are two graphs, not exported yet); kbert predict and kbert serve run "
                         "the model directory itself")
    graph = cached_graph(loaded.model)
    tokenizer = loaded.tokenizer
    metadata = {"kbert_task": "seq2seq", "kbert_output": "probabilities", "kbert_application": graph.application,
                "kbert_calls": graph.calls, "kbert_heads": graph.cache_shape[0],
                "kbert_head_size": graph.cache_shape[1], "kbert_end_id": tokenizer.sep_id,
                "kbert_pad_id": graph.config.pad_token_id, "kbert_new_segment": int(graph.application == "unilm"),
                "kbert_decoding": DECODING_NOTE}

    def step(token_ids, segment_ids, positions, allowed, last, *caches):
        state = {"self": list(zip(caches[0::2], caches[1::2]))}
        probabilities, state = graph.step(token_ids, segment_ids, positions, allowed, last, state)
        named = {"probabilities": probabilities}
        for index, (keys, values) in enumerate(state["self"]):
            named[f"next_keys_{index}"], named[f"next_values_{index}"] = keys, values
        return named

    ids = [tf.TensorSpec([None, None], tf.int32, name=name) for name in ("token_ids", "segment_ids", "positions")]
    cache = [tf.TensorSpec([None, None, *graph.cache_shape], tf.float32, name=f"{kind}_{index}")
             for index in range(graph.calls) for kind in ("keys", "values")]
    signature = [*ids, tf.TensorSpec([None, None, None], tf.bool, name="allowed"),
                 tf.TensorSpec([None], tf.int32, name="last"), *cache]
    function = tf.function(step, input_signature=signature)
    prompts = [ids for ids, _ in tokenizer.encode_all(list(SAMPLE_TEXTS))]
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(out)), prefix=".tmp-export-") as staging:
        path = convert_to_onnx(function, signature, metadata, staging, quantize, "seq2seq",
                               "kbert predict and kbert serve run the model directory itself")
        difference = _check(OnnxGenerator(path), loaded.model, graph, prompts, bounded=not quantize)
        with atomic_path(out) as temporary:
            shutil.copyfile(path, temporary)
    return ExportReport(out, "onnx", quantize, difference)


def _check(generator: "OnnxGenerator", model, graph, prompts: List[List[int]], bounded: bool) -> float:
    """The largest difference of the first step's probabilities from Keras's; an error where it is above
    1e-4 (float32), or where greedy decoding gives other tokens than `kbert.generate`'s."""
    from kbert.generation import generate

    first = generator.first_probabilities(prompts)
    expected = np.stack([_keras_probabilities(model, graph, prompt) for prompt in prompts])
    difference = float(np.abs(first - expected).max())
    if bounded and difference > FLOAT_TOLERANCE:
        raise KbertError(f"the ONNX step's probabilities differ from Keras's by {difference:.2e} on sample text "
                         f"(allowed: {FLOAT_TOLERANCE}); nothing was written")
    if bounded:
        wanted = generate(model, prompts, max_new_tokens=8, end_id=generator.end_id, strategy="greedy")
        got = generator.greedy(prompts, max_new_tokens=8)
        if got != wanted:
            raise KbertError(f"greedy decoding on the ONNX step gives {got}, kbert.generate {wanted}, on sample "
                             "text; nothing was written")
    return difference


def _keras_probabilities(model, graph, prompt: List[int]) -> np.ndarray:
    """The model's next-token probabilities after `prompt` (segment 0), whole-sequence, in Keras."""
    from keras import ops

    inputs = [np.array([prompt], np.int32)] * len(model.inputs)
    if graph.has_segments:
        inputs[1] = np.zeros_like(inputs[1])
    return ops.convert_to_numpy(graph.forward(inputs, np.array([len(prompt) - 1], np.int32)))[0]


class OnnxGenerator:
    """Greedy decoding on a `kbert export` seq2seq ONNX file, with NumPy and onnxruntime alone.

    Args:
        path: the `.onnx` file.

    Usage, on a file `kbert export --model runs/toy-extraction out.onnx` wrote (the source's ids from
    the model directory's vocab.txt, as `[CLS] source [SEP]`; `tests/test_export.py` runs it):

        generator = OnnxGenerator("out.onnx")
        generator.greedy([[2, 27, 55, 40, 3]], max_new_tokens=16)  # -> [[the target's ids]]
    """

    def __init__(self, path: str):
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

    def first_probabilities(self, prompts: Sequence[Sequence[int]]) -> np.ndarray:
        """The next-token probabilities after each prompt, `[batch, vocab]`."""
        return self._start(prompts, slots=max(map(len, prompts)))[0]

    def greedy(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> List[List[int]]:
        """Each prompt's continuation, the most likely token each step, the end id left out."""
        probabilities, caches, lengths = self._start(prompts, slots=max(map(len, prompts)) + max_new_tokens)
        slots = np.arange(caches[0].shape[1])
        generated: List[List[int]] = [[] for _ in prompts]
        done = np.zeros(len(prompts), dtype=bool)
        for step in range(max_new_tokens):
            if self.pad_id is not None:
                probabilities[:, self.pad_id] = -np.inf
            tokens = probabilities.argmax(-1).astype(np.int32)
            for row in np.flatnonzero(~done):
                done[row] = tokens[row] == self.end_id
                if not done[row]:
                    generated[row].append(int(tokens[row]))
            if done.all() or step == max_new_tokens - 1:
                break
            positions = lengths[:, None]
            probabilities, caches = self._run(np.where(done, 0, tokens)[:, None].astype(np.int32),
                                              np.full_like(positions, self.new_segment), positions,
                                              slots[None, None, :] <= positions[:, :, None],
                                              np.zeros(len(prompts), np.int32), caches)
            lengths = lengths + 1
        return generated

    def _start(self, prompts, slots: int):
        lengths = np.array([len(prompt) for prompt in prompts], np.int32)
        longest = int(lengths.max())
        token_ids = np.zeros([len(prompts), longest], np.int32)
        for row, prompt in enumerate(prompts):
            token_ids[row, :len(prompt)] = prompt
        columns = np.arange(slots)[None, None, :]
        allowed = columns < lengths[:, None, None]  # unilm: the whole prompt (the source, segment 0)
        if self.application == "lm":
            allowed &= columns <= np.arange(longest)[None, :, None]
        caches = [np.zeros([len(prompts), slots, self.heads, self.head_size], np.float32)] * (2 * self.calls)
        positions = np.broadcast_to(np.arange(longest, dtype=np.int32), token_ids.shape)
        probabilities, caches = self._run(token_ids, np.zeros_like(token_ids), positions, allowed, lengths - 1,
                                          caches)
        return probabilities, caches, lengths

    def _run(self, token_ids, segment_ids, positions, allowed, last, caches):
        feed = {"token_ids": token_ids, "segment_ids": segment_ids, "positions": np.ascontiguousarray(positions),
                "allowed": allowed, "last": last}
        for index in range(self.calls):
            feed[f"keys_{index}"], feed[f"values_{index}"] = caches[2 * index], caches[2 * index + 1]
        results = dict(zip(self.outputs, self.session.run(None, {k: v for k, v in feed.items() if k in self.inputs})))
        caches = [results[f"next_{kind}_{index}"] for index in range(self.calls) for kind in ("keys", "values")]
        return results["probabilities"].astype(np.float64), caches
