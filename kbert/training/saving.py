"""Loading `.keras` files of kbert models in a fresh process.

`import kbert` loads nothing until used, so Keras alone would not find
kbert's registered classes: its layers (`kbert.layers`), `IdModel`
(`kbert.models.transformer`) and, for a compiled model, its learning-rate
schedule (`kbert.training.schedules`). This module imports them all.
"""

from __future__ import annotations

import keras

import kbert.layers  # noqa: F401  (registers the layers)
import kbert.models.transformer  # noqa: F401  (registers IdModel)
import kbert.training.schedules  # noqa: F401  (registers the schedules)


def load_keras_model(path: str, *, safe_mode: bool = True) -> keras.Model:
    """Loads a `.keras` file of a kbert model (`model.save("m.keras")`, `kbert export`).

    Example:

    >>> import os, tempfile
    >>> from kbert import build_transformer_model
    >>> bert = build_transformer_model("configs/bert_tiny.json")
    >>> path = os.path.join(tempfile.mkdtemp(), "bert.keras")
    >>> bert.save(path)
    >>> load_keras_model(path).count_params() == bert.count_params()
    True
    """
    return keras.saving.load_model(path, safe_mode=safe_mode)
