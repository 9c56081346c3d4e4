"""One step of cached decoding, as the layers that run differently in it see it.

A language model generating token by token runs its graph on the new tokens
only (`kbert.generation.cache`). Most layers compute as they always do; the
few that need the new tokens' positions or the earlier tokens' keys and values
have a `call_step(inputs, step)` beside their `call`, and the graph calls that
instead, with the step's `DecodingStep`:

- `PositionEmbedding`, `SinusoidalPositionEmbedding`, `RelativePositionEmbedding`,
  `T5RelativePositionBias`: the encodings of each new token's own position;
- `AttentionMask`: the cache slots each new token may attend to;
- `MultiHeadSelfAttention`: its call's key/value cache handed to the layer's
  own `call(..., cache=, cache_slots=)`, the updated cache it returns kept for
  the next step; T5's cross-attention reads the encoder output's keys and values.
"""

from __future__ import annotations

from typing import Sequence, Tuple

from keras import ops


class DecodingStep:
    """What one step of cached decoding gives the layers' `call_step`.

    The self-attention caches are taken in call order (`next_self_attention`),
    not by layer: ALBERT's one attention layer is called once per block, each
    call with its own cache. After the step, `caches` holds the updated ones.

    Args:
        positions: `[batch, q]` int32, each new token's position, which is
            also the cache slot its key and value go to.
        allowed: `[batch, q, slots]` bool, True where a new token may attend
            to a cache slot.
        caches: `(keys, values)` per self-attention call, each
            `[batch, slots, heads, head_size]`.
        cross: T5: `(keys, values)` of the encoder's output per
            cross-attention call, each `[batch, source length, heads, head_size]`.
        source: T5: `[batch, source length]` bool, True at real source tokens.

    Example:
    >>> step = DecodingStep(ops.convert_to_tensor([[2]]), ops.ones((1, 1, 4), "bool"), caches=[])
    >>> [int(d) for d in step.distances(step.slots)[0, 0]]  # slots 0..3 seen from position 2
    [-2, -1, 0, 1]
    """

    def __init__(self, positions, allowed, caches: Sequence[Tuple], cross: Sequence[Tuple] = (),
                 source=None):
        self.positions, self.allowed, self.source = positions, allowed, source
        self.caches, self.cross = list(caches), list(cross)
        self._self_calls = self._cross_calls = 0

    @property
    def slots(self):
        """The number of cache slots (the longest sequence the caches hold)."""
        return ops.shape(self.allowed)[-1]

    def distances(self, keys):
        """`[batch, q, keys]`: each key's position minus each new token's, for `keys` keys from position 0."""
        return ops.arange(keys)[None, None, :] - self.positions[:, :, None]

    def next_self_attention(self) -> int:
        """The index in `caches` of the next self-attention call's cache."""
        self._self_calls += 1
        return self._self_calls - 1

    def next_cross_attention(self) -> Tuple:
        """The encoder output's keys and values for the next cross-attention call."""
        self._cross_calls += 1
        return self.cross[self._cross_calls - 1]
