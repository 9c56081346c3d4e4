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
- `GET /openapi.json`, `GET /docs`: the schema and its pages.
"""

import contextlib
import dataclasses
import json
import logging
import socket
import time
from typing import List, Optional

from kbert.errors import KbertError
from kbert.serving.batcher import Batcher, QueueFull

logger = logging.getLogger("kbert.serve")

@dataclasses.dataclass
class ServerLimits:
    """What one server takes: batching, its queue and the size of a request.

    Args:
        max_batch: texts a model call gathers from concurrent requests.
        max_wait_ms: how long a batch waits for more requests.
        max_queue: texts waiting at most; more is answered 503.
        max_texts: texts in one request at most (413 beyond).
        max_text_chars: characters in one text at most (413 beyond).
        max_body_bytes: bytes in a request body at most (413 beyond).
    """

    max_batch: int = 32
    max_wait_ms: float = 5.0
    max_queue: int = 256
    max_texts: int = 64
    max_text_chars: int = 2000
    max_body_bytes: int = 1_000_000

def create_app(predictor, limits: Optional[ServerLimits] = None):
    """The FastAPI app serving `predictor` (`kbert.tasks.predictors.load_predictor`).

    Example (a model directory `kbert train` wrote):
    >>> from kbert.tasks.predictors import load_predictor  # doctest: +SKIP
    >>> app = create_app(load_predictor("runs/sentiment"))  # doctest: +SKIP
    """
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from pydantic import BaseModel, Field, ValidationError

    limits = limits or ServerLimits()
    batcher = Batcher(predictor, limits.max_batch, limits.max_wait_ms, limits.max_queue)

    @contextlib.asynccontextmanager
    async def lifespan(app):  # not run when the app is mounted in another: the first request starts the loop
        batcher.start()
        yield
        await batcher.close()  # after uvicorn has let the requests in flight finish
        logger.info("stopped: every accepted request was answered (%d batches)", batcher.batches)

    app = FastAPI(title="kbert", summary=f"a kbert {predictor.task} model: {predictor.model_dir}", lifespan=lifespan)
    app.state.batcher = batcher

    class PredictRequest(BaseModel):
        texts: List[str] = Field(description="the texts to predict, one row of the answer each")
        text_pairs: Optional[List[Optional[str]]] = Field(
            None, description="a classifier of text pairs: the second text of each (or null)")

    class PredictResponse(BaseModel):
        predictions: List[dict] = Field(description="a row per text: what `kbert predict --json` prints")

    class Health(BaseModel):
        status: str
        task: str
        model: str

    def problem(status: int, message: str, **headers) -> JSONResponse:
        return JSONResponse({"detail": message}, status_code=status, headers=headers)

    @app.get("/health", response_model=Health)
    async def health():
        return {"status": "ok", "task": predictor.task, "model": predictor.model_dir}

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
            return problem(422, "; ".join(f"{'.'.join(map(str, item['loc'])) or 'body'}: {item['msg']}"
                                          for item in error.errors()) + ' (expected {"texts": ["...", ...]})')
        except ValueError as error:
            return problem(400, f'{error}; expected {{"texts": ["...", ...]}}')
        request.state.texts = len(body.texts)
        refused = _refusal(body.texts, body.text_pairs, limits, predictor.task)
        if refused:
            return problem(*refused)
        try:
            rows = await batcher.predict(body.texts, body.text_pairs)
        except QueueFull as error:
            return problem(503, str(error), **{"Retry-After": "1"})
        except KbertError as error:
            return problem(422, str(error))
        return {"predictions": rows}

    app.add_middleware(_BodyLimit, max_bytes=limits.max_body_bytes)
    app.middleware("http")(log_request)
    return app

def read_json(body: bytes):
    """A request body as JSON; `ValueError` that says why not (not JSON, not UTF-8, nested too deeply)."""
    try:
        return json.loads(body)
    except RecursionError:  # e.g. 100,000 "[": Python's parser gives up; the client's fault, not the server's
        raise ValueError("the body is JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"the body is not JSON ({error})") from None


def _unencodable(text: str) -> Optional[int]:
    """Where `text` holds a lone surrogate (JSON's "\\ud800" escapes can carry one), which no tokenizer reads."""
    try:
        text.encode("utf-8")
        return None
    except UnicodeEncodeError as error:
        return error.start


def _refusal(texts: List[str], pairs, limits: ServerLimits, task: str):
    """`(status, message)` for a request the server does not take, else None."""
    if not texts:
        return 422, "texts: expected at least one text"
    if len(texts) > limits.max_texts:
        return 413, f"texts: {len(texts)} texts, more than this server's limit of {limits.max_texts} (--max-texts)"
    if pairs is not None and (task != "classify" or len(pairs) != len(texts)):
        return 422, ("text_pairs: one per text (or null)" if task == "classify"
                     else f"text_pairs: a {task} model takes single texts")
    for field, column in (("texts", texts), ("text_pairs", pairs or [])):
        for index, text in enumerate(column):
            if text is None and field == "text_pairs":
                continue
            if len(text) > limits.max_text_chars:
                return 413, (f"{field}[{index}]: {len(text)} characters, more than this server's limit of "
                             f"{limits.max_text_chars} (--max-text-chars)")
            if not text.strip():
                return 422, (f"{field}[{index}]: blank; every text must hold something to predict"
                             + (" (null: no second text)" if field == "text_pairs" else ""))
            if _unencodable(text) is not None:
                return 422, (f"{field}[{index}]: a lone surrogate at character {_unencodable(text)} is not text "
                             "(an unpaired \\ud800-\\udfff escape); send valid UTF-16 pairs or UTF-8")
    return None

class _BodyLimit:
    """Answers 413 to a body over `max_bytes`, by its Content-Length or as it streams in."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
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

    async def _too_large(self, scope, send):
        from fastapi.responses import JSONResponse

        response = JSONResponse({"detail": f"the request body is over this server's limit of {self.max_bytes} "
                                           "bytes (--max-body-bytes)"}, status_code=413)
        await response(scope, None, send)

class _TooLarge(Exception):
    pass

async def log_request(request, call_next):
    """A log line per request: client, method, path, status, texts, milliseconds."""
    start = time.perf_counter()
    response = await call_next(request)
    texts = getattr(request.state, "texts", "-")
    client = request.client.host if request.client else "-"
    logger.info("%s %s %s %d texts=%s %.1fms", client, request.method, request.url.path, response.status_code,
                texts, (time.perf_counter() - start) * 1000)
    return response

def serve(predictor, host: str = "127.0.0.1", port: int = 8000, limits: Optional[ServerLimits] = None,
          ready=print) -> None:
    """Serves `predictor` until SIGINT or SIGTERM; `ready(url)` is called once it listens (port 0: any free one)."""
    run_app(create_app(predictor, limits), host, port, ready)


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


def run_app(app, host: str, port: int, ready=print) -> None:
    """Runs an ASGI app on uvicorn at host:port until SIGINT or SIGTERM, which let the requests in flight
    finish; `ready(url)` is called once it listens (port 0: any free one)."""
    import errno

    import uvicorn

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
                            lifespan="on")
    host_in_url = f"[{host}]" if family == socket.AF_INET6 else host

    class Server(uvicorn.Server):
        async def startup(self, sockets=None):
            await super().startup(sockets)
            ready(f"http://{host_in_url}:{bound}")

    Server(config).run(sockets=[listener])
