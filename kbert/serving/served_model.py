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
        from kbert.tasks.predictors import load_predictor

        folder = ModelFolder.of(self.folder)
        predictor = (self._onnx_predictor(folder, threads) if self.runtime is not None
                     else load_predictor(folder, self.settings))
        warm_up = WARM_UP.get(predictor.task, WARM_UP[None])
        predictor([warm_up], [warm_up] if predictor.task == "rerank" else None)
        embedder = predictor.embedder
        for adapter in getattr(embedder, "adapter_models", None) or ():  # each other adapter's graph: its own call
            if adapter != embedder.adapter:
                embedder.for_adapter(adapter).encode([warm_up])
        return predictor

    def _onnx_predictor(self, folder, threads: Optional[int]):
        """A classifier, an embedding model or a reranker whose model is its ONNX export run by the runtime
        (`kbert.serving.runtimes.OnnxModel`), made from the float32 Keras model, which it then replaces; the
        predictor's `dtype` is the precision the runtime runs in."""
        from kbert.embeddings.embedder import Embedder
        from kbert.serving.runtimes import onnx_classifier, onnx_embedder, onnx_reranker
        from kbert.tasks.classification import load_classifier
        from kbert.tasks.predictors import classifier_predictor, embedding_predictor, reranker_predictor
        from kbert.tasks.reranking import Reranker
        from kbert.training.precision import DtypeChoice

        settings, runtime = self.settings, self.runtime
        if self.task == "rerank":
            reranker = Reranker.load(folder, dtype="float32")
            model = reranker.model = onnx_reranker(reranker, runtime, threads)
            predictor = reranker_predictor(folder, settings, reranker)
        elif self.task == "embed":
            embedder = Embedder.load(folder, adapter=settings.adapter, head=settings.head, dtype="float32")
            model = embedder.model = onnx_embedder(embedder, runtime, threads)
            predictor = embedding_predictor(folder, settings, embedder)
        else:
            classifier = load_classifier(folder)
            model = classifier.model = onnx_classifier(classifier, runtime, threads)
            predictor = classifier_predictor(classifier, folder.path, settings)
        predictor.dtype = DtypeChoice(model.precision, f"{runtime} runs the model's ONNX export")
        return predictor
