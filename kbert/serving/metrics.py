"""`GET /metrics`: what a server has done, in Prometheus's text format, through `prometheus_client`.

Each app has its own registry (two apps in one process, as in the tests, do
not count into each other). Requests are labelled by their route's template
(`/v1/embeddings`, not the path a client typed), so that unknown paths add
one label value (`unmatched`), not one per path.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, Optional

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
TOKEN_BUCKETS = (16, 64, 256, 1024, 4096, 16384, 65536)


class ServerMetrics:
    """The counters, histograms and gauge of one server.

    Args:
        queue_depth: gives the texts waiting in the batcher's queue when scraped.
        model: labels of the `kbert_model_info` metric (the task, the weights' `dtype` and `dtype_reason`).

    Example:
    >>> metrics = ServerMetrics(queue_depth=lambda: 3)
    >>> metrics.observe_batch(texts=4, tokens=40)
    >>> [line for line in metrics.exposition().decode().splitlines() if line.startswith("kbert_queue")]
    ['kbert_queue_texts 3.0']
    """

    def __init__(self, queue_depth: Callable[[], int], model: Optional[Dict[str, str]] = None):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

        self.registry = CollectorRegistry()
        self.requests = Counter("kbert_requests", "HTTP requests answered, by route and status",
                                ["route", "status"], registry=self.registry)
        self.latency = Histogram("kbert_request_duration_seconds", "time from a request's arrival to its answer",
                                 ["route"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.batch_texts = Histogram("kbert_batch_size", "texts in each model call (batch)",
                                     buckets=BATCH_BUCKETS, registry=self.registry)
        self.batch_tokens = Histogram("kbert_batch_tokens", "tokens in each model call (batch)",
                                      buckets=TOKEN_BUCKETS, registry=self.registry)
        self.tokens = Counter("kbert_tokens", "tokens of the texts run through the model",
                              registry=self.registry)
        self.texts = Counter("kbert_texts", "texts run through the model", registry=self.registry)
        queue = Gauge("kbert_queue_texts", "texts waiting for a batch", registry=self.registry)
        queue.set_function(queue_depth)
        if model:
            Info("kbert_model", "what the server runs: the task, the weights' dtype and why",
                 registry=self.registry).info(model)

    def observe_batch(self, texts: int, tokens: int) -> None:
        self.batch_texts.observe(texts)
        self.batch_tokens.observe(tokens)
        self.texts.inc(texts)
        self.tokens.inc(tokens)

    def observe_request(self, route: str, status: int, started: float) -> None:
        self.requests.labels(route, str(status)).inc()
        self.latency.labels(route).observe(time.perf_counter() - started)

    def exposition(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)
