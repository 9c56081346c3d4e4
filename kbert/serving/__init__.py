"""Serving a trained model over HTTP (`kbert serve`): a FastAPI app on uvicorn with dynamic batching.

- `batcher`: gathers the texts of concurrent requests into batches for one model thread, with a
  bounded queue.
- `app`: the HTTP interface (`GET /health`, `POST /v1/predict`, the OpenAPI schema at
  `/openapi.json`), its request limits and its log line per request.
- `export` (`kbert export`): SavedModel, ONNX, LiteRT and `.keras` files of classifiers and
  taggers; `generator_export`: a UniLM's cached decoding step as ONNX, and `OnnxGenerator`;
  `conversion`: the tf2onnx conversion both use.
"""

from kbert.serving.app import ServerLimits, create_app, serve
from kbert.serving.batcher import Batcher, QueueFull

__all__ = ["Batcher", "QueueFull", "ServerLimits", "create_app", "serve"]
