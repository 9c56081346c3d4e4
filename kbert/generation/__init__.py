"""Generation with `lm` and `unilm` models: `generate` (greedy, beam, sampling) with a key/value cache.

- `search`: the search strategies in NumPy alone, on any engine (a Keras model's, an ONNX export's).
- `steps`: the decoding-step rule (positions, the slots a new token sees) every engine takes, NumPy alone.
- `cache`: `CachedGraph`, the model re-run on new tokens only, keys and values cached.
- `engines`: the engines on a Keras model (cached, or full recomputation) and `generate` itself.
- `decoder`: `AutoRegressiveDecoder`, bert4keras's base class for scripts with their own step.

The names are imported on first use, so that `kbert.generation.search` loads without Keras.
"""

import importlib

_EXPORTS = {"AutoRegressiveDecoder": "kbert.generation.decoder", "generate": "kbert.generation.engines"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'kbert.generation' has no attribute {name!r}")
