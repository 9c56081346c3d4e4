"""The search strategies of generation, in NumPy alone: greedy, sampling and beam search.

They run on an engine, anything with:

- `start(prompts, segments)`: the next-token log-probabilities `[rows, V]`
  after each prompt (a list of id lists, with their segments);
- `extend(tokens, parents)`: row i continues row `parents[i]` with
  `tokens[i]`; the log-probabilities after it;
- `compiles_loops`: True where the engine runs the searches' loops itself,
  in one compiled call (`one_path(tokens, done, search, sampler)`,
  `beam(log_probs, beam_size, search)`).

`kbert.generation.engines` run a Keras model; the ONNX export's
`kbert.serving.generator_export.OnnxGenerator` runs onnxruntime, and imports
this module without Keras.
"""

from __future__ import annotations

import itertools
from typing import List, Optional

import numpy as np


def log_softmax(x: np.ndarray) -> np.ndarray:
    """Log-probabilities of logits along the last axis."""
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def log_probabilities(outputs: np.ndarray, softmaxed: bool = True) -> np.ndarray:
    """An engine's log-probabilities (float64) of a model's next-token outputs: a softmax's probabilities,
    or logits (`softmaxed` False)."""
    outputs = np.asarray(outputs).astype(np.float64)
    return np.log(np.maximum(outputs, 1e-38)) if softmaxed else log_softmax(outputs)


class Sampler:
    """Draws each row's next token from its log-probabilities: `top_k`, `top_p` (nucleus) and `temperature`,
    from one NumPy generator seeded with `seed`, so a seed gives the same tokens on every backend.

    A draw is one uniform number per row, mapped through the cumulative
    probabilities of the tokens kept, in vocabulary order (inverse transform
    sampling): the tokens kept come from the ranking, most likely first (ties:
    the lower id first), but the pick needs no ranking, so a compiled loop
    that keeps no more than the top k need not sort the vocabulary. It takes
    its numbers from `draws` and maps them the same way.

    Example:
    >>> Sampler(top_k=1, top_p=None, temperature=1.0, seed=0)(np.log(np.array([[0.2, 0.7, 0.1]]))).tolist()
    [1]
    """

    def __init__(self, top_k: Optional[int], top_p: Optional[float], temperature: float, seed: Optional[int]):
        self.top_k, self.top_p, self.temperature = top_k, top_p, temperature
        self.random = np.random.default_rng(seed)

    def draws(self, steps: int, rows: int) -> np.ndarray:
        """The uniform numbers `steps` more calls on `rows` rows would draw, in order: `[steps, rows]`."""
        return self.random.random((steps, rows))

    def __call__(self, log_probs: np.ndarray) -> np.ndarray:
        probs = np.exp(log_softmax(log_probs / self.temperature))
        order = np.argsort(-probs, axis=-1, kind="stable")
        ranked = np.take_along_axis(probs, order, -1)
        keep = np.ones_like(ranked, dtype=bool)
        if self.top_k is not None:
            keep[:, self.top_k:] = False
        if self.top_p is not None:  # the smallest head of the ranking whose sum reaches top_p
            keep &= np.cumsum(ranked, -1) - ranked < self.top_p
        kept = np.zeros_like(probs)
        np.put_along_axis(kept, order, np.where(keep, ranked, 0), -1)
        cumulative = np.cumsum(kept, -1)
        cumulative /= cumulative[:, -1:]
        return (cumulative <= self.draws(1, len(kept))[0][:, None]).sum(-1)


class Search:
    """Greedy, sampled and beam-search continuations on an engine (module docstring), in NumPy.

    Args:
        end_id: the token that ends a continuation (left out of it; -1: none).
        max_new_tokens: the most tokens a continuation gets.
        min_new_tokens: `end_id` is not chosen before this many.
        pad: the padding id, never chosen (None: none; nor when it is `end_id`, which ends a continuation).

    Example (an engine whose first token is most likely 2, and whose next is most likely the end, 3):
    >>> class Toy:
    ...     compiles_loops = False
    ...     def start(self, prompts, segments):
    ...         return np.log(np.full((len(prompts), 4), 0.1) + 0.6 * np.eye(4)[[2] * len(prompts)])
    ...     def extend(self, tokens, parents):
    ...         return np.log(np.full((len(tokens), 4), 0.1) + 0.6 * np.eye(4)[[3] * len(tokens)])
    >>> search = Search(end_id=3, max_new_tokens=5, min_new_tokens=0, pad=0)
    >>> search.one_path(Toy(), [[1]], [[0]], sampler=None), search.beam(Toy(), [[1]], [[0]], beam_size=2)
    ([[2]], [[2]])
    >>> Search(end_id=3, max_new_tokens=5, min_new_tokens=0, pad=3).one_path(Toy(), [[2]], [[0]], sampler=None)
    [[2]]
    """

    def __init__(self, end_id: int, max_new_tokens: int, min_new_tokens: int, pad: Optional[int]):
        self.end_id, self.max_new_tokens, self.min_new_tokens = end_id, max_new_tokens, min_new_tokens
        self.pad = None if pad == end_id else pad  # an end token that is also the padding id must stay choosable

    def _allowed(self, log_probs: np.ndarray, step: int) -> np.ndarray:
        # The padding id: the model would mask it as a key, so it is never generated.
        log_probs = log_probs.copy()
        if self.pad is not None:
            log_probs[:, self.pad] = -np.inf
        if step < self.min_new_tokens and 0 <= self.end_id < log_probs.shape[-1]:
            log_probs[:, self.end_id] = -np.inf
        return log_probs

    def one_path(self, engine, prompts, segments, sampler) -> List[List[int]]:
        """Greedy (no sampler) or sampled continuations, one per prompt."""
        rows = np.arange(len(prompts))
        log_probs = engine.start(prompts, segments)
        generated: List[List[int]] = [[] for _ in prompts]
        done = np.zeros(len(prompts), dtype=bool)
        for step in range(self.max_new_tokens):
            scores = self._allowed(log_probs, step)
            tokens = scores.argmax(-1) if sampler is None else sampler(scores)
            for row in np.flatnonzero(~done):
                if tokens[row] == self.end_id:
                    done[row] = True
                else:
                    generated[row].append(int(tokens[row]))
            if done.all() or step == self.max_new_tokens - 1:
                break
            if engine.compiles_loops:  # the rest of the loop in one compiled call
                for row, chosen in enumerate(engine.one_path(tokens, done, self, sampler)):
                    generated[row] += itertools.takewhile(lambda token: token >= 0, chosen[1:].tolist())
                break
            log_probs = engine.extend(np.where(done, 0, tokens), rows)
        return generated

    def beam(self, engine, prompts, segments, beam_size: int) -> List[List[int]]:
        """The continuation of highest total log-probability found by a beam of `beam_size`, per prompt."""
        batch = len(prompts)
        repeat = np.repeat(np.arange(batch), beam_size)
        log_probs = engine.start([prompts[i] for i in repeat], [segments[i] for i in repeat])
        if engine.compiles_loops:  # the whole search in one compiled call
            return engine.beam(log_probs, beam_size, self)
        scores = np.full((batch, beam_size), -np.inf)
        scores[:, 0] = 0.0  # the beams of a prompt start as one
        beams: List[List[int]] = [[] for _ in repeat]
        finished: List[list] = [[] for _ in range(batch)]  # (score, tokens)
        for step in range(self.max_new_tokens):
            candidates = scores[:, :, None] + self._allowed(log_probs, step).reshape(batch, beam_size, -1)
            vocab = candidates.shape[-1]
            flat = candidates.reshape(batch, -1)
            ranked = np.argsort(-flat, axis=-1, kind="stable")[:, :2 * beam_size]
            # A beam left empty (fewer live candidates than beams) follows its prompt's first; score -inf.
            parents, tokens = repeat * beam_size, np.zeros(batch * beam_size, int)
            new_scores, new_beams = np.full((batch, beam_size), -np.inf), []
            for prompt in range(batch):
                kept = 0
                for index in ranked[prompt]:
                    score = flat[prompt, index]
                    parent, token = prompt * beam_size + index // vocab, index % vocab
                    if not np.isfinite(score) or kept == beam_size:
                        break
                    if token == self.end_id:
                        finished[prompt].append((score, beams[parent]))
                        continue
                    row = prompt * beam_size + kept
                    parents[row], tokens[row], new_scores[prompt, kept] = parent, token, score
                    kept += 1
                new_beams += [beams[parents[prompt * beam_size + k]] + [int(tokens[prompt * beam_size + k])]
                              if k < kept else [] for k in range(beam_size)]
            scores, beams = new_scores, new_beams
            # Log-probabilities only fall: a finished beam above every live one cannot be beaten.
            if all(f and max(f)[0] >= scores[p].max() for p, f in enumerate(finished)):
                break
            if step < self.max_new_tokens - 1:
                log_probs = engine.extend(tokens, parents)
        best = []
        for prompt in range(batch):
            alive = [(scores[prompt, k], beams[prompt * beam_size + k]) for k in range(beam_size)]
            best.append(max(finished[prompt] + alive, key=lambda pair: pair[0])[1])
        return best
