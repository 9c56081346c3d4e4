"""`generate`: greedy, beam and sampled continuations of `lm` and `unilm` models (and T5), batched.

The search strategies (`kbert.generation.search`) run on an engine. Two
engines give the next token's log-probabilities for every row:
`CachedEngine` feeds only the new token and keeps each attention call's keys
and values (`kbert.generation.cache`); `FullEngine` runs the whole model on
the whole sequence every step (the reference, and what bert4keras does).
Both give the same tokens; the search strategies run on either.

For `unilm`, the given tokens are the source (segment 0, or the segments
given) and generated tokens get segment 1; for `lm`, every token has segment 0.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import keras
import numpy as np
from keras import ops

from kbert.errors import KbertError
from kbert.generation.search import Sampler, Search, log_probabilities
from kbert.generation.steps import next_step
from kbert.models.registry import get_family

STRATEGIES = ("greedy", "beam", "sample")
# Cached generation sizes its key/value caches in steps of this many slots: fewer compiled programs, more
# cache read at each step (benchmarks.backends' kbert-slots16 engine measures a smaller step).
CACHE_STEP = 64


class _Engine:
    """Rows of token sequences and the log-probabilities of their next token (`kbert.generation.search`'s
    engine).

    For T5 the rows are the decoder's tokens, from `start_id` on, and each
    row also keeps its source (beam search reorders both together).
    """

    def __init__(self, model, max_new_tokens: int, start_id: Optional[int] = None):
        from kbert.generation.cache import cached_graph

        self.graph = cached_graph(model)  # checks the model; the full engine uses its facts too
        self.model, self.max_new_tokens, self.start_id = model, max_new_tokens, start_id
        if self.graph.seq2seq and start_id is None:
            raise KbertError("start_id: a T5 model's decoder starts from a token the model was trained with "
                             "(bert4keras's mT5 and T5 scripts: 0; T5 PEGASUS and kbert's seq2seq: [CLS]); "
                             "pass it as generate(..., start_id=...)")
        if not self.graph.seq2seq and start_id is not None:
            raise KbertError("start_id is for encoder-decoder models (T5); a language model continues its "
                             "prompt: leave start_id out")
        activation = model.get_layer(get_family(model.family).lm_output).activation.__name__
        self.probabilities = activation == "softmax"
        limit = getattr(self.graph.config, "max_position_embeddings", None)
        self.limit = limit if getattr(self.graph.graph, "position_encoding", None) is None else None

    def _log_probs(self, outputs) -> np.ndarray:
        return log_probabilities(ops.convert_to_numpy(outputs), self.probabilities)

    def _check_length(self, longest: int) -> None:
        # The last new token is chosen, never fed back: it needs no position.
        needed = longest + self.max_new_tokens - 1
        if self.limit is not None and needed > self.limit:
            raise KbertError(f"a prompt of {longest} tokens and max_new_tokens {self.max_new_tokens} need "
                             f"{needed} positions; the model has max_position_embeddings {self.limit}")

    def _decoder_prompts(self, prompts: List[List[int]], segments: List[List[int]]):
        """T5: the sources are kept and every row's decoder starts from `start_id`; otherwise as given."""
        if not self.graph.seq2seq:
            return prompts, segments
        self.sources = [list(p) for p in prompts]
        return [[self.start_id] for _ in prompts], [[0] for _ in prompts]

    def new_segment(self) -> int:
        return 1 if self.graph.application == "unilm" else 0

    def _encoder_input(self, sources: List[List[int]]) -> np.ndarray:
        """T5's sources as one array, padded with the model's padding id to a multiple of 16 tokens (where it
        has one): the cached engine's cross-attention caches take its length, and JAX compiles the decoding
        loop once per shape."""
        from kbert.tokenizers.wordpiece import pad_batch

        pad = self.graph.config.pad_token_id
        ids = pad_batch([(source, []) for source in sources], pad or 0)[0]
        if pad is None:
            return ids
        longest = _rounded_up(ids.shape[1], 16, self.limit)
        return np.pad(ids, [(0, 0), (0, longest - ids.shape[1])], constant_values=pad)


class FullEngine(_Engine):
    """Recomputes every position every step."""

    compiles_loops = False

    def start(self, prompts: List[List[int]], segments: List[List[int]]) -> np.ndarray:
        prompts, segments = self._decoder_prompts(prompts, segments)
        self._check_length(max(map(len, prompts)))
        self.tokens, self.segments = [list(p) for p in prompts], [list(s) for s in segments]
        return self._next()

    def extend(self, tokens: np.ndarray, parents: np.ndarray) -> np.ndarray:
        self.tokens = [self.tokens[p] + [int(t)] for p, t in zip(parents, tokens)]
        self.segments = [self.segments[p] + [self.new_segment()] for p in parents]
        if self.graph.seq2seq:
            self.sources = [self.sources[p] for p in parents]
        return self._next()

    def _next(self) -> np.ndarray:
        from kbert.tokenizers.wordpiece import pad_batch

        token_ids, segment_ids = pad_batch(list(zip(self.tokens, self.segments)))
        inputs = [self._encoder_input(self.sources), token_ids] if self.graph.seq2seq \
            else [token_ids, segment_ids][:len(self.model.inputs)]
        last = np.array([len(row) - 1 for row in self.tokens], dtype=np.int32)
        return self._log_probs(self.graph.forward([_tensor(array) for array in inputs], _tensor(last)))


class CachedEngine(_Engine):
    """Feeds each new token alone; keys and values of earlier tokens come from the cache."""

    @property
    def compiles_loops(self) -> bool:
        """The searches' loops run compiled where the backend compiles them."""
        return keras.backend.backend() in ("tensorflow", "jax")

    def start(self, prompts: List[List[int]], segments: List[List[int]]) -> np.ndarray:
        from kbert.tokenizers.wordpiece import pad_batch

        state = self.graph.encode(_tensor(self._encoder_input(prompts))) if self.graph.seq2seq else {}
        prompts, segments = self._decoder_prompts(prompts, segments)
        self._check_length(max(map(len, prompts)))
        # Shapes in steps of 16 (prompt) and CACHE_STEP (cache), so that a compiled step (JAX compiles one per
        # shape) serves many prompts; the extra positions are padding, hidden as a short row's are.
        longest = _rounded_up(max(map(len, prompts)), 16, self.limit)
        slots = _rounded_up(max(map(len, prompts)) + self.max_new_tokens, CACHE_STEP, None)
        token_ids, segment_ids = (np.pad(ids, [(0, 0), (0, longest - ids.shape[1])])
                                  for ids in pad_batch(list(zip(prompts, segments))))
        self.lengths = np.array([len(p) for p in prompts], dtype=np.int32)
        real = np.arange(longest)[None, :] < self.lengths[:, None]
        rule = self.graph.mask_layer(segment_ids if self.graph.application == "unilm" else token_ids)
        allowed = ops.convert_to_numpy(rule)[:, 0] & real[:, None, :]  # [rows, longest, longest]
        allowed = np.pad(allowed, [(0, 0), (0, 0), (0, slots - longest)])
        if self._hides_start:  # the start token is hidden from itself too: the model gives it no key at all
            allowed[:, :, 0] = False
        positions = np.broadcast_to(np.arange(longest, dtype=np.int32), token_ids.shape)
        outputs, self.state = self.graph.step(
            _tensor(token_ids), _tensor(segment_ids), _tensor(positions), _tensor(allowed),
            _tensor(self.lengths - 1), {**state, "self": self.graph.empty_caches(len(prompts), slots)})
        self.slots = np.arange(slots)
        return self._log_probs(outputs)

    @property
    def _hides_start(self) -> bool:
        return self.graph.hides_start(self.start_id)

    def _search_args(self, search: "Search") -> list:
        """The ids a compiled loop bans or stops at, the new tokens' segment and the start's hiding, as tensors."""
        return [*(_tensor(np.int32(value)) for value in (search.end_id, search.min_new_tokens,
                                                         -1 if search.pad is None else search.pad,
                                                         self.new_segment())),
                ops.convert_to_tensor(self._hides_start)]

    def one_path(self, tokens: np.ndarray, done: np.ndarray, search: "Search",
                 sampler: Optional["Sampler"]) -> np.ndarray:
        """Greedy decoding (no `sampler`) or sampling on from the first new `tokens`, in one compiled call
        (TensorFlow, JAX): `[rows, slots]`, column i the i-th new token, -1 once a row has ended. The sampler's
        uniform numbers for the remaining steps are drawn here, from its generator, in the order its own
        calls would draw them."""
        args = [_tensor(np.asarray(tokens, np.int32)), _tensor(self.lengths), ops.convert_to_tensor(done),
                self.state, _tensor(np.int32(search.max_new_tokens)), *self._search_args(search)]
        if sampler is None:
            return ops.convert_to_numpy(self.graph.greedy(*args))
        draws = np.zeros([len(self.slots), len(tokens)], np.float32)  # one shape per cache size (JAX)
        draws[:search.max_new_tokens - 1] = sampler.draws(search.max_new_tokens - 1, len(tokens))
        top_p = 2.0 if sampler.top_p is None else sampler.top_p
        return ops.convert_to_numpy(self.graph.sample(sampler.top_k, sampler.top_p is not None)(
            *args, _tensor(draws), _tensor(np.float32(top_p)), _tensor(np.float32(sampler.temperature)),
            ops.convert_to_tensor(self.probabilities)))

    def beam(self, log_probs: np.ndarray, beam_size: int, search: "Search") -> List[List[int]]:
        """Beam search on from the first step's `log_probs` (`[prompts × beam_size, V]`), in one compiled call
        (TensorFlow, JAX): the best continuation of each prompt, as `Search.beam` finds it."""
        batch = len(log_probs) // beam_size
        scores = np.full((batch, beam_size), -np.inf, np.float32)
        scores[:, 0] = 0.0  # the beams of a prompt start as one
        history = np.full((len(log_probs), search.max_new_tokens), -1, np.int32)
        best, best_tokens, scores, history, turns = (ops.convert_to_numpy(value) for value in self.graph.beam(
            _tensor(log_probs.astype(np.float32)), _tensor(scores), _tensor(self.lengths), self.state,
            _tensor(history), *self._search_args(search), ops.convert_to_tensor(self.probabilities)))
        continuations = []
        for prompt in range(batch):
            beam = int(np.argmax(scores[prompt]))  # the first of equal scores, as max() keeps it
            if np.isfinite(best[prompt]) and best[prompt] >= scores[prompt, beam]:  # finished ones come first
                continuations.append([int(token) for token in best_tokens[prompt] if token >= 0])
            else:
                continuations.append(history[prompt * beam_size + beam, :int(turns)].tolist())
        return continuations

    def extend(self, tokens: np.ndarray, parents: np.ndarray) -> np.ndarray:
        if not np.array_equal(parents, np.arange(len(parents))):
            rows = _tensor(np.asarray(parents, np.int32))
            self.state = keras.tree.map_structure(lambda tensor: ops.take(tensor, rows, axis=0), self.state)
            self.lengths = self.lengths[parents]
        positions, allowed = next_step(self.lengths, len(self.slots), self._hides_start)
        outputs, self.state = self.graph.step(
            _tensor(np.asarray(tokens, np.int32)[:, None]),
            _tensor(np.full_like(positions, self.new_segment())), _tensor(positions),
            _tensor(allowed), _tensor(np.zeros([len(tokens)], np.int32)), self.state)
        self.lengths = self.lengths + 1
        return self._log_probs(outputs)


def _rounded_up(length: int, step: int, limit: Optional[int]) -> int:
    """`length` rounded up to a multiple of `step`, but not past `limit` (nor below `length`)."""
    rounded = -(-length // step) * step
    return max(length, min(rounded, limit)) if limit is not None else rounded


def _tensor(array):
    """A NumPy array as a tensor of the backend (int64 ids made int32, as the step's signature expects)."""
    array = np.asarray(array)
    return ops.convert_to_tensor(array.astype(np.int32) if array.dtype.kind in "iu" else array)


def generate(model, token_ids: Sequence[Sequence[int]], segment_ids: Optional[Sequence[Sequence[int]]] = None, *,
             max_new_tokens: int, end_id: int, strategy: str = "greedy", beam_size: int = 4,
             top_k: Optional[int] = None, top_p: Optional[float] = None, temperature: float = 1.0,
             min_new_tokens: int = 0, seed: Optional[int] = None, use_cache: bool = True,
             start_id: Optional[int] = None) -> List[List[int]]:
    """Continues each prompt of a batch (T5: decodes each source): the generated ids of each row, `end_id` left out.

    Args:
        model: from `build_transformer_model(..., application="lm" or "unilm",
            with_mlm=True or "linear")`, a GPT family's (`model="gpt2"`, ...),
            or a whole T5 (`model="t5.1.1"`, ...).
        token_ids: the prompts (for `unilm`, the sources, e.g. `[CLS] source [SEP]`;
            for T5, the encoder's input), as lists (each taken whole, whatever
            ids it ends with), or an array padded at the end with the model's
            `pad_token_id` (stripped from each row).
        segment_ids: the prompts' segments (default: 0).
        max_new_tokens: the most tokens to add to a prompt.
        end_id: the token that ends a continuation (e.g. `[SEP]`).
        strategy: `"greedy"`, `"beam"` (the highest total log-probability
            among `beam_size` beams) or `"sample"`.
        beam_size: beams per prompt.
        top_k, top_p: sample only among the k most likely tokens / the most
            likely tokens whose probabilities sum to `top_p`.
        temperature: divides the log-probabilities before sampling.
        min_new_tokens: `end_id` is not chosen before this many tokens.
            The model's `pad_token_id` (0 for bert4keras's vocabularies) is
            never chosen.
        seed: the sampler's seed (the same seed, the same samples).
        use_cache: reuse keys and values (True) or recompute the whole
            sequence every step (the same tokens, slower).
        start_id: T5 only: the decoder's first token (the one its training
            targets started with; the output leaves it out).

    Example:
    >>> from kbert import build_transformer_model
    >>> import keras; keras.utils.set_random_seed(0)
    >>> lm = build_transformer_model("configs/bert_tiny.json", application="lm", with_mlm=True)
    >>> [len(ids) for ids in generate(lm, [[101, 2769], [101]], max_new_tokens=5, end_id=-1)]
    [5, 5]
    """
    if strategy not in STRATEGIES:
        raise KbertError(f"strategy: expected one of {', '.join(STRATEGIES)}, got {strategy!r}")
    for name, value in (("max_new_tokens", max_new_tokens), ("beam_size", beam_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise KbertError(f"{name} must be a whole number of at least 1, got {value!r}")
    if not temperature > 0:
        raise KbertError(f"temperature must be positive, got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise KbertError(f"top_k must be a whole number of at least 1 (or None: every token), got {top_k!r}")
    if top_p is not None and not 0 < top_p <= 1:
        raise KbertError(f"top_p must be in (0, 1] (or None: every token), got {top_p!r}")
    engine = (CachedEngine if use_cache else FullEngine)(model, max_new_tokens, start_id)
    pad = engine.graph.config.pad_token_id
    # Padding is what the caller padded: an array's rows are padded at the end; a list's prompts are as given.
    prompts = [_unpadded(row, pad if _is_array(token_ids) else None) for row in token_ids]
    if not prompts or not all(prompts):
        raise KbertError("token_ids: every prompt needs at least one token")
    _check_ids(prompts, engine.graph.config.vocab_size)
    segments = [list(row[:len(p)]) for row, p in zip(segment_ids, prompts)] if segment_ids is not None \
        else [[0] * len(p) for p in prompts]
    search = Search(end_id, max_new_tokens, min_new_tokens, pad)
    if strategy == "beam":
        return search.beam(engine, prompts, segments, beam_size)
    sampler = None if strategy == "greedy" else Sampler(top_k, top_p, temperature, seed)
    return search.one_path(engine, prompts, segments, sampler)


def _check_ids(prompts: List[List[int]], vocab_size: int) -> None:
    """Every id within the vocabulary, before a step runs: a compiled step could not say which is not."""
    for row, prompt in enumerate(prompts):
        wrong = [token for token in prompt if not 0 <= token < vocab_size]
        if wrong:
            raise KbertError(f"token_ids, row {row}: ids must be in [0, {vocab_size}) (the model's vocab_size), "
                             f"found {wrong[0]}")


def _is_array(token_ids) -> bool:
    """A NumPy array or a backend tensor (anything with a shape): prompts padded to one length."""
    return hasattr(token_ids, "shape")


def _unpadded(row, pad: Optional[int]) -> List[int]:
    """The row without the padding ids at its end (None: no id is padding)."""
    row = [int(token) for token in row]
    while row and pad is not None and row[-1] == pad:
        row.pop()
    return row
