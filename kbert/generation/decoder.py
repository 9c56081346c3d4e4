"""`AutoRegressiveDecoder`: bert4keras's decoding base class, for scripts that bring their own step.

A bert4keras script subclasses it, writes `predict(inputs, output_ids, states)`
(the next token's probabilities for each row, usually from
`self.last_token(model).predict(...)`), decorates it with `wraps`, and calls
`beam_search` or `random_sample`. The semantics are bert4keras 0.11's: a
beam search returns as soon as its best beam has ended; sampled rows are
returned in the order they end. For new code, `kbert.generate` does the same
searches batched, with a key/value cache.
"""

from __future__ import annotations

import functools
from typing import List, Optional

import numpy as np

RETURN_TYPES = ("probas", "logits")


def _softmax(x: np.ndarray) -> np.ndarray:
    x = np.exp(x - x.max(-1, keepdims=True))
    return x / x.sum(-1, keepdims=True)


class AutoRegressiveDecoder:
    """Beam search and sampling around a user's `predict` step, as bert4keras's.

    Args:
        start_id: the first output token (None: outputs start empty, as for UniLM).
        end_id: the token that ends an output.
        maxlen: the most decoding steps.
        minlen: outputs shorter than this do not end.

    Example:
    >>> class Counter(AutoRegressiveDecoder):  # a toy step: after token t, t + 1 is likely
    ...     @AutoRegressiveDecoder.wraps(default_rtype="probas")
    ...     def predict(self, inputs, output_ids, states):
    ...         last = output_ids[:, -1] if output_ids.shape[1] else inputs[0][:, 0]
    ...         return np.eye(5)[(last + 1) % 5] * 0.9 + 0.02
    >>> decoder = Counter(start_id=None, end_id=4, maxlen=10)
    >>> decoder.beam_search([np.array([1])], topk=2).tolist()
    [2, 3, 4]
    >>> [ids.tolist() for ids in decoder.random_sample([np.array([1])], n=2, topk=1)]
    [[2, 3, 4], [2, 3, 4]]
    """

    def __init__(self, start_id: Optional[int], end_id: int, maxlen: int, minlen: int = 1):
        self.start_id, self.end_id, self.maxlen, self.minlen = start_id, end_id, maxlen, minlen
        self.models: dict = {}
        self.first_output_ids = (np.empty((1, 0), dtype=int) if start_id is None
                                 else np.array([[start_id]]))

    @staticmethod
    def wraps(default_rtype: str = "probas", use_states: bool = False):
        """Decorates `predict` (which returns `default_rtype`, and states if `use_states`).

        The decorated step takes `temperature` and `rtype` and returns
        `(probabilities or log-probabilities, states)`.
        """
        if default_rtype not in RETURN_TYPES:
            raise ValueError(f"default_rtype: expected one of {', '.join(RETURN_TYPES)}, got {default_rtype!r}")

        def decorator(predict):
            @functools.wraps(predict)
            def step(self, inputs, output_ids, states, temperature=1, rtype=default_rtype):
                if rtype not in RETURN_TYPES:
                    raise ValueError(f"rtype: expected one of {', '.join(RETURN_TYPES)}, got {rtype!r}")
                prediction, states = predict(self, inputs, output_ids, states) if use_states \
                    else (predict(self, inputs, output_ids, states), None)
                prediction = np.asarray(prediction, dtype=np.float64)
                if default_rtype == "logits":
                    probas = _softmax(prediction / temperature)
                else:
                    probas = prediction ** (1.0 / temperature) if temperature != 1 else prediction
                    probas = probas / probas.sum(-1, keepdims=True)
                return (probas if rtype == "probas" else np.log(probas + 1e-12)), states
            return step
        return decorator

    def last_token(self, model):
        """`model` with each output cut to its last position (made once per model)."""
        if model not in self.models:
            import keras

            from kbert.layers import TakeToken

            outputs = [TakeToken(-1, name=f"last-token-{index}")(output)
                       for index, output in enumerate(model.outputs)]
            self.models[model] = keras.Model(model.inputs, outputs)
        return self.models[model]

    def predict(self, inputs, output_ids, states=None):
        """The next token's scores for each row of `output_ids`; a subclass writes it (and decorates it)."""
        raise NotImplementedError("subclass AutoRegressiveDecoder and write predict, decorated with wraps")

    def _ended(self, output_ids: np.ndarray, min_ends: int) -> np.ndarray:
        """Rows whose last token is the `min_ends`-th end token (once outputs are long enough)."""
        if output_ids.shape[1] < self.minlen:
            return np.zeros(len(output_ids), dtype=bool)
        return (output_ids[:, -1] == self.end_id) & ((output_ids == self.end_id).sum(1) >= min_ends)

    def beam_search(self, inputs, topk: int, states=None, temperature: float = 1, min_ends: int = 1) -> np.ndarray:
        """The best output of a beam of `topk` (ended with `end_id`, or `maxlen` long)."""
        inputs = [np.array([item]) for item in inputs]
        output_ids, output_scores = self.first_output_ids, np.zeros(1)
        for step in range(self.maxlen):
            scores, states = self.predict(inputs, output_ids, states, temperature, "logits")
            if step == 0:  # one row so far: the beams start from it
                inputs = [np.repeat(item, topk, axis=0) for item in inputs]
            scores = output_scores[:, None] + scores
            best = scores.argpartition(-topk, axis=None)[-topk:]
            rows, tokens = np.unravel_index(best, scores.shape)
            output_ids = np.concatenate([output_ids[rows], tokens[:, None]], 1)
            output_scores = scores[rows, tokens]
            ended = self._ended(output_ids, min_ends)
            if ended[output_scores.argmax()]:
                return output_ids[output_scores.argmax()]
            if ended.any():  # an ended beam that is not the best is dropped; the beam narrows
                inputs = [item[~ended] for item in inputs]
                output_ids, output_scores = output_ids[~ended], output_scores[~ended]
                topk = int((~ended).sum())
        return output_ids[output_scores.argmax()]

    def random_sample(self, inputs, n: int, topk: Optional[int] = None, topp: Optional[float] = None,
                      states=None, temperature: float = 1, min_ends: int = 1) -> List[np.ndarray]:
        """`n` sampled outputs (NumPy's global random state), among the `topk` / `topp` most likely tokens."""
        inputs = [np.array([item]) for item in inputs]
        output_ids, results = self.first_output_ids, []
        for step in range(self.maxlen):
            probas, states = self.predict(inputs, output_ids, states, temperature, "probas")
            probas = probas / probas.sum(1, keepdims=True)
            if step == 0:  # the n samples start from the one row
                probas = np.repeat(probas, n, axis=0)
                inputs = [np.repeat(item, n, axis=0) for item in inputs]
                output_ids = np.repeat(output_ids, n, axis=0)
            candidates = np.argsort(-probas, axis=1, kind="stable")
            probas = np.take_along_axis(probas, candidates, axis=1)
            if topk is not None:
                probas[:, topk:] = 0
                probas /= probas.sum(1, keepdims=True)
            if topp is not None:  # keep the head of the ranking up to the token that reaches topp
                probas[np.cumsum(probas, axis=1) - probas >= topp] = 0
            probas /= probas.sum(1, keepdims=True)
            picks = np.array([np.random.choice(len(row), p=row) for row in probas])
            output_ids = np.concatenate([output_ids, candidates[np.arange(len(picks)), picks][:, None]], 1)
            ended = self._ended(output_ids, min_ends)
            results += list(output_ids[ended])
            inputs = [item[~ended] for item in inputs]
            output_ids = output_ids[~ended]
            if not len(output_ids):
                break
        return results + list(output_ids)
