"""What a server runs, decided once and loaded where it serves: `kbert serve` loads it in its own process, and each
replica of `kbert serve --ray` loads it in its own (`kbert.serving.server_on_ray`)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional

from kbert.serving.app import ServerLimits

if TYPE_CHECKING:
    from kbert.io import ModelFolder
    from kbert.serving.runtimes import Runtime
    from kbert.tasks.predictors import PredictionSettings

WARM_UP = {"mlm": "[MASK]", None: "warm up"}


@dataclasses.dataclass(frozen=True)
class ServedModel:
    """A model as a server runs it (every field checked before anything loads).

    Args:
        folder: the model directory (`kbert train`'s, a sentence-transformers or CrossEncoder folder); a
            `ModelFolder` brings the files it has parsed (a Ray replica gets them with it).
        task: its task (`kbert.tasks.predictors.model_task`).
        settings: how it predicts (`PredictionSettings`).
        runtime: the runtime of its ONNX export (`kbert.serving.runtimes.Runtime`), None for Keras.
        limits: the server's batching and request limits.
    """

    folder: "str | ModelFolder"
    task: str
    settings: "PredictionSettings"
    runtime: "Optional[Runtime]"
    limits: ServerLimits

    def load(self, threads: Optional[int] = None):
        """The predictor, compiled by a first call before any request waits for it; `threads` each model call
        gets (None: every core), where the runtime takes a count (the Keras backends' pools are set beforehand:
        `kbert.serving.instances`)."""
        from kbert.io import ModelFolder
        from kbert.serving.runtimes import onnx_predictor
        from kbert.tasks.predictors import load_predictor

        folder = ModelFolder.of(self.folder)
        predictor = (onnx_predictor(folder, self.task, self.settings, self.runtime, threads)
                     if self.runtime is not None else load_predictor(folder, self.settings))
        warm_up = WARM_UP.get(predictor.task, WARM_UP[None])
        predictor([warm_up], [warm_up] if predictor.task == "rerank" else None)
        embedder = predictor.embedder
        for adapter in getattr(embedder, "adapter_models", None) or ():  # each other adapter's graph: its own call
            if adapter != embedder.adapter:
                embedder.for_adapter(adapter).encode([warm_up])
        return predictor
