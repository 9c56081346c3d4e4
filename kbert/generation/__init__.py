"""Generation with `lm` and `unilm` models: `generate` (greedy, beam, sampling) with a key/value cache.

- `cache`: `CachedGraph`, the model re-run on new tokens only, keys and values cached.
- `generate`: the search strategies, on the cached engine or on full recomputation.
- `decoder`: `AutoRegressiveDecoder`, bert4keras's base class for scripts with their own step.
"""

from kbert.generation.decoder import AutoRegressiveDecoder
from kbert.generation.generate import generate

__all__ = ["AutoRegressiveDecoder", "generate"]
