"""`kbert serve`'s HTTP interface: FastAPI on uvicorn.

FastAPI because it writes the OpenAPI schema from the request and response
types and answers malformed JSON and wrong types with a 4xx that names the
field; uvicorn because it is the ASGI server FastAPI is made for, and on
SIGTERM it stops accepting connections and lets the requests in flight
finish before the app shuts down.

Endpoints:
- `GET /health`: 200 `{"status": "ok", "task", "model"}` (the model is
  loaded before the server listens).
- `POST /v1/predict` `{"texts": [...]}` (a classifier also takes
  `"text_pairs"`): 200 `{"predictions": [...]}`, a row per text, each what
  `kbert predict --json` prints for it. 413 for a body, request or text
  over the limits, 422 for a blank text or a request the model cannot take,
  503 when the queue is full (with `Retry-After`).
- an embedding model (`kbert.serving.embeddings`): `POST /v1/embeddings` (OpenAI's form) and
  `POST /embed` (Text Embeddings Inference's); its `/v1/predict` rows are `{"text", "embedding"}`. A sparse
  encoder: `POST /embed_sparse` (TEI's), and `/v1/predict` rows `{"text", "indices", "values"}`. A multi-vector
  encoder: `POST /embed_all` (TEI's), and `/v1/predict` rows `{"text", "embeddings"}` (the texts as documents).
- a reranker (`kbert.serving.reranking`): `POST /rerank` (TEI's form) and `POST /v1/rerank`
  (Cohere's and Jina's).
- a classifier (`kbert.serving.classification`): `POST /predict` (TEI's form), every label's probability.
- `GET /info`: the model, its task, its dimensions and input length, the task adapters it computes (a
  request's `task`), the server's limits.
- `GET /v1/models`: OpenAI's model list, the served model alone (what OpenAI-speaking tools ask first).
- `GET /metrics`: requests by route and status, latency, batch sizes in texts and tokens, the
  queue, tokens processed, in Prometheus's text format (`kbert.serving.metrics`).
- `GET /openapi.json`, `GET /docs`: the schema and its pages.
"""

import contextlib
import dataclasses
import logging
import socket
import time
from typing import List, Optional

from kbert.errors import KbertError
from kbert.serving.batcher import Batcher, QueueFull
from kbert.serving.requests import read_json, refusal, validation_message
from kbert.serving.routes import finite_rows
from kbert.serving.metrics import ServerMetrics

logger = logging.getLogger("kbert.serve")

@dataclasses.dataclass
class ServerLimits:
    """What one server takes: batching, its queue and the size of a request.

    Args:
        max_batch: texts a model call gathers from concurrent requests.
        max_wait_ms: how long a batch waits for more requests.
        max_queue: texts waiting at most; more is answered 503.
        max_texts: texts in one request at most (413 beyond).
        max_text_chars: characters in one text at most (413 beyond, unless the request asks to truncate: then
            only the body's bytes bound it, as Text Embeddings Inference's payload limit does). None: the model's
            input length in tokens times `CHARS_PER_TOKEN` (25,600 characters for 512 tokens).
        max_body_bytes: bytes in a request body at most (413 beyond).
        max_batch_tokens: tokens a model call gathers at most (None: only `max_batch` bounds it).
        max_connections: connections open at once (uvicorn answers 503 beyond).
        request_timeout_s: seconds a request has to arrive whole from its first byte (then its connection
            is closed: `kbert.serving.connections`).
        instances: batches run at once (`kbert.serving.instances`; one where `serial_reason` says why).
    """

    max_batch: int = 32
    max_wait_ms: float = 5.0
    max_queue: int = 256
    max_texts: int = 64
    max_text_chars: Optional[int] = None
    max_body_bytes: int = 1_000_000
    max_batch_tokens: Optional[int] = None
    max_connections: int = 1024
    request_timeout_s: float = 30.0
    instances: int = 2

def create_app(predictor, limits: Optional[ServerLimits] = None):
    """The FastAPI app serving `predictor` (`kbert.tasks.predictors.load_predictor`).

    Example (a model directory `kbert train` wrote):
    >>> from kbert.tasks.predictors import load_predictor  # doctest: +SKIP
    >>> app = create_app(load_predictor("runs/sentiment"))  # doctest: +SKIP
    """
    from fastapi import FastAPI
    from kbert.serving.classification import add_classifier_routes
    from kbert.serving.embeddings import EmbeddingService, add_embedding_routes
    from kbert.serving.instances import serial_reason
    from kbert.serving.reranking import RerankService, add_rerank_routes
    from kbert.serving.tokens import add_tokenizer_routes

    embedder, reranker = getattr(predictor, "embedder", None), getattr(predictor, "reranker", None)
    limits = _with_text_cap(limits or ServerLimits(), (embedder or reranker or predictor).maxlen)
    # An embedding model's and a reranker's batches run tokenized texts: each route tokenizes once, off the
    # event loop, and counts the tokens before the batch forms; other tasks' predictors take the texts.
    service = (EmbeddingService(embedder, limits.max_batch) if embedder is not None
               else RerankService(reranker, limits.max_batch) if reranker is not None else None)
    batcher = Batcher(service or predictor, limits.max_batch, limits.max_wait_ms, limits.max_queue,
                      max_batch_tokens=limits.max_batch_tokens,
                      instances=1 if serial_reason(predictor.task) else limits.instances)
    metrics = ServerMetrics(queue_depth=lambda: batcher.waiting,
                            model={"task": predictor.task, **_dtype_of(predictor)})
    batcher.observe = metrics.observe_batch

    @contextlib.asynccontextmanager
    async def lifespan(app):  # not run when the app is mounted in another: the first request starts the loop
        batcher.start()
        yield
        await batcher.close()  # after uvicorn has let the requests in flight finish
        logger.info("stopped: every accepted request was answered (%d batches)", batcher.batches)

    app = FastAPI(title="kbert", summary=f"a kbert {predictor.task} model: {predictor.model_dir}", lifespan=lifespan)
    app.state.batcher, app.state.metrics = batcher, metrics
    _add_model_routes(app, predictor, limits, metrics)
    _add_predict_route(app, predictor, service, batcher, limits)
    if hasattr(predictor.tokenizer, "ids_and_offsets"):  # a tokenizer that places its tokens in the text
        add_tokenizer_routes(app, predictor.tokenizer, limits, predictor.task,
                             embedder.prompted if embedder is not None else None)
    if embedder is not None:
        add_embedding_routes(app, service, batcher, limits, model_name=predictor.model_dir)
    if reranker is not None:
        add_rerank_routes(app, service, batcher, limits, model_name=predictor.model_dir)
    if predictor.task == "classify":
        add_classifier_routes(app, predictor, batcher, limits)
    app.add_middleware(_BodyLimit, max_bytes=limits.max_body_bytes)
    app.add_middleware(RequestLog, metrics=metrics)
    return app


#: The characters a text may hold per token of the model's input (`ServerLimits.max_text_chars` left unset): far
#: more than a token's text in any language, so a text the model takes whole is never refused for its characters.
CHARS_PER_TOKEN = 50


def _dtype_of(predictor) -> dict:
    """The weights' `dtype` and `dtype_reason` (`--dtype auto`'s rule, or that it was asked for) of a predictor
    that records them (`load_predictor`'s), for /info and /metrics."""
    choice = getattr(predictor, "dtype", None)
    return {"dtype": choice.dtype, "dtype_reason": choice.reason} if choice is not None else {}


def _with_text_cap(limits: ServerLimits, maxlen: Optional[int]) -> ServerLimits:
    """`limits` with `max_text_chars` derived from the model's input length where it is unset."""
    if limits.max_text_chars is not None:
        return limits
    return dataclasses.replace(limits, max_text_chars=CHARS_PER_TOKEN * (maxlen or 512))


def _add_model_routes(app, predictor, limits: ServerLimits, metrics: ServerMetrics) -> None:
    """`GET /health`, `/info`, `/v1/models` and `/metrics`: what is served, and how it is doing."""
    from fastapi.responses import Response
    from pydantic import BaseModel

    embedder = getattr(predictor, "embedder", None)

    class Health(BaseModel):
        status: str
        task: str
        model: str

    @app.get("/health", response_model=Health)
    async def health():
        return {"status": "ok", "task": predictor.task, "model": predictor.model_dir}

    @app.get("/info", summary="the model and the server's limits")
    async def info():
        return {"model_id": predictor.model_dir, "task": predictor.task, "version": _kbert_version(),
                "dimensions": embedder.dimensions if embedder else None,
                "tasks": (list(embedder.adapter_models) or [embedder.adapter]) if embedder and embedder.adapter
                else None,
                "max_input_length": embedder.maxlen if embedder else predictor.maxlen,
                "max_client_batch_size": limits.max_texts, "max_batch_texts": limits.max_batch,
                "max_batch_tokens": limits.max_batch_tokens, "max_queue_texts": limits.max_queue,
                "max_text_chars": limits.max_text_chars, "max_body_bytes": limits.max_body_bytes,
                **_dtype_of(predictor)}

    started = int(time.time())

    @app.get("/v1/models", summary="OpenAI's model list: the one model this server answers with")
    async def models():
        return {"object": "list", "data": [{"id": predictor.model_dir, "object": "model", "created": started,
                                            "owned_by": "kbert"}]}

    @app.get("/metrics", summary="Prometheus's text format")
    async def prometheus_metrics():
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


def _add_predict_route(app, predictor, service, batcher: Batcher, limits: ServerLimits) -> None:
    """`POST /v1/predict`: a row per text, what `kbert predict --json` prints for it."""
    from fastapi import Request
    from fastapi.responses import JSONResponse
    from kbert.tasks.predictors import rerank_rows
    from pydantic import BaseModel, Field, ValidationError

    embedder, reranker = getattr(predictor, "embedder", None), getattr(predictor, "reranker", None)

    class PredictRequest(BaseModel):
        texts: List[str] = Field(description="the texts to predict, one row of the answer each")
        text_pairs: Optional[List[Optional[str]]] = Field(
            None, description="a classifier of text pairs: the second text of each (or null)")

    class PredictResponse(BaseModel):
        predictions: List[dict] = Field(description="a row per text: what `kbert predict --json` prints")

    def problem(status: int, message: str, **headers) -> JSONResponse:
        return JSONResponse({"detail": message}, status_code=status, headers=headers)

    async def rows_of(body) -> list:
        if embedder is not None:  # as `kbert predict`'s rows (a multi-vector encoder's texts as documents)
            results = await service.predicted(batcher, body.texts)
            if not finite_rows(embedder.output.values(results)):
                raise KbertError("the model gave NaN or infinite values for this input")
            return embedder.output.rows(body.texts, results)
        if reranker is not None:
            predictor.check_pairs(body.text_pairs)
            logits, _ = await service.logits(batcher, body.texts, body.text_pairs, truncate=True)
            return rerank_rows(reranker, body.texts, body.text_pairs, logits)
        # The texts go to the predictor, which tokenizes its batch in the model thread (a classifier served the
        # embedding model's way measured slower, docs/deployment.md); the budget's count runs off the event loop.
        tokens = await batcher.prepare(len(body.texts), count_tokens, predictor.tokenizer, body.texts,
                                       body.text_pairs) if limits.max_batch_tokens else None
        return await batcher.predict(body.texts, body.text_pairs, tokens=tokens)

    # The body is read and checked here rather than by FastAPI's parameter, so that any content type
    # is read as JSON and each error says which field was wrong and how.
    @app.post("/v1/predict", response_model=PredictResponse,
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": PredictRequest.model_json_schema()}}}},
              responses={400: {"description": "a body that is not JSON"},
                         413: {"description": "a body, request or text over the server's limits"},
                         422: {"description": "a field of the wrong type, a blank text, or a request the model "
                                              "cannot take"},
                         503: {"description": "the queue is full: retry later"}})
    async def predict(request: Request):
        try:
            body = PredictRequest.model_validate(read_json(await request.body()))
        except ValidationError as error:
            return problem(422, validation_message(error) + ' (expected {"texts": ["...", ...]})')
        except ValueError as error:
            return problem(400, f'{error}; expected {{"texts": ["...", ...]}}')
        request.state.texts = len(body.texts)
        refused = refusal(body.texts, body.text_pairs, limits, predictor.task)
        if refused:
            return problem(refused.status, refused.message)
        try:
            return {"predictions": await rows_of(body)}
        except QueueFull as error:
            return problem(503, str(error), **{"Retry-After": "1"})
        except KbertError as error:
            return problem(422, str(error))


class _BodyLimit:
    """Answers 413 to a body over `max_bytes`, by its Content-Length or as it streams in."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        from starlette.requests import ClientDisconnect

        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await self._too_large(scope, send)
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise _TooLarge()
            return message

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            await self._too_large(scope, send)
        except ClientDisconnect:  # the client went mid-body: nobody to answer, and nothing worth a traceback
            logger.info("%s %s: the client disconnected before sending its whole body", scope["method"],
                        scope["path"])

    async def _too_large(self, scope, send):
        """A 413 in the error form of the API the path belongs to, counted under its route."""
        from kbert.serving.refusals import Refusal, error_response

        route = _route_of(scope)
        if route is not None:
            scope["route"] = route  # the request log's and metrics' label
        refused = Refusal(413, f"the request body is over this server's limit of {self.max_bytes} bytes "
                               "(--max-body-bytes)")
        await error_response(scope["path"], refused)(scope, None, send)

class _TooLarge(Exception):
    pass


def _route_of(scope):
    """The app's route that `scope`'s method and path match, if any (before the router has run)."""
    from starlette.routing import Match

    app = scope.get("app")
    for route in getattr(app, "routes", []):
        if route.matches(scope)[0] == Match.FULL:
            return route
    return None

class RequestLog:
    """An ASGI middleware: a log line per request (client, method, path, status, texts, milliseconds) and,
    given `metrics`, its count and latency, labelled by the route's template.

    Plain ASGI rather than Starlette's `BaseHTTPMiddleware`, which runs every request in a task group of
    its own: under load that was a tenth of the server's event-loop time (docs/deployment.md).

    Args:
        app: the ASGI app it wraps.
        metrics: the server's `ServerMetrics` (None: the log line only).
    """

    def __init__(self, app, metrics: Optional[ServerMetrics] = None):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), 500  # what the client gets if the app fails before answering

        async def send_and_note(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            self._record(scope, status, start)

    def _record(self, scope, status: int, start: float) -> None:
        if self.metrics is not None:
            self.metrics.observe_request(getattr(scope.get("route"), "path", "unmatched"), status, start)
        client = scope["client"][0] if scope.get("client") else "-"
        texts = scope.get("state", {}).get("texts", "-")  # what a handler put in `request.state`
        logger.info("%s %s %s %d texts=%s %.1fms", client, scope["method"], scope["path"], status, texts,
                    (time.perf_counter() - start) * 1000)


def count_tokens(tokenizer, texts: List[str], pairs: Optional[List[Optional[str]]]) -> int:
    """The tokens of texts (and pairs) as the tokenizer gives them, for a batch's budget."""
    return sum(len(ids) for ids, _ in tokenizer.encode_all(texts, pairs))


def serve(predictor, host: str = "127.0.0.1", port: int = 8000, limits: Optional[ServerLimits] = None,
          ready=print) -> None:
    """Serves `predictor` until SIGINT or SIGTERM; `ready(url)` is called once it listens (port 0: any free one)."""
    limits = limits or ServerLimits()
    run_app(create_app(predictor, limits), host, port, ready, limits)


def _kbert_version() -> str:
    """The installed kbert's version (the package root is the command line's to import)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kbert")
    except PackageNotFoundError:
        return "unknown"


def check_listen_address(host: str, port: int) -> None:
    """Refuses an address the server could not listen on, before anything is loaded: an empty host (which
    socket libraries read as every interface), a port out of range, a host name that does not resolve."""
    if not host or not host.strip():
        raise KbertError("the host to listen on is empty; give an address (127.0.0.1: this machine only; "
                         "0.0.0.0: every interface, said explicitly)")
    if not 0 <= port <= 65535:
        raise KbertError(f"port {port}: expected 0 (any free one) to 65535")
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise KbertError(f"cannot listen on {host!r}: the name does not resolve ({error}); give an address of this "
                         "machine (127.0.0.1, 0.0.0.0 for every interface) or a name that resolves to one") from None


def run_app(app, host: str, port: int, ready=print, limits: Optional[ServerLimits] = None) -> None:
    """Runs an ASGI app on uvicorn at host:port until SIGINT or SIGTERM, which let the requests in flight
    finish; `ready(url)` is called once it listens (port 0: any free one). `limits`: its connections at once,
    and the time a request has to arrive."""
    import errno

    import uvicorn

    from kbert.serving.connections import request_deadline_protocol

    limits = limits or ServerLimits()

    check_listen_address(host, port)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as error:
        listener.close()
        advice = ("choose another port (0: any free one)" if error.errno in (errno.EADDRINUSE, errno.EACCES)
                  else "give an address of this machine (127.0.0.1; 0.0.0.0 for every interface)")
        raise KbertError(f"cannot listen on {host}:{port}: {error.strerror}; {advice}") from None
    bound = listener.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=30,
                            lifespan="on", limit_concurrency=limits.max_connections,
                            http=request_deadline_protocol(limits.request_timeout_s))
    host_in_url = f"[{host}]" if family == socket.AF_INET6 else host

    class Server(uvicorn.Server):
        async def startup(self, sockets=None):
            await super().startup(sockets)
            ready(f"http://{host_in_url}:{bound}")

    Server(config).run(sockets=[listener])
