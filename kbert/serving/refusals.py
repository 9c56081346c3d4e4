"""A request the server does not take, and how each API says so: OpenAI's `{"error": {...}}`, Text Embeddings
Inference's `{"error", "error_type"}`, kbert's own `{"detail"}`; the statuses of a model service's refusals."""

from typing import Awaitable, NamedTuple, Optional

from kbert.errors import KbertError
from kbert.serving.batcher import QueueFull
from kbert.serving.services import TooLong


class Refusal(NamedTuple):
    """A request the server does not take: the HTTP status, the message, and the field at fault (OpenAI's
    `param`; None for the body as a whole)."""

    status: int
    message: str
    field: Optional[str] = None


def openai_error(refused: Refusal):
    """A refusal as OpenAI's API (and Cohere- and Jina-style `/v1/` routes) gives one:
    `{"error": {"message", "type", "param", "code"}}`, which OpenAI's client raises by status."""
    from fastapi.responses import JSONResponse

    kind = "server_error" if refused.status >= 500 else "invalid_request_error"
    return JSONResponse({"error": {"message": refused.message, "type": kind, "param": refused.field, "code": None}},
                        status_code=refused.status, headers={"Retry-After": "1"} if refused.status == 503 else None)


def tei_error(refused: Refusal):
    """A refusal as Text Embeddings Inference gives one: `{"error", "error_type"}`."""
    from fastapi.responses import JSONResponse

    kind = "Overloaded" if refused.status == 503 else "Validation" if refused.status < 500 else "Backend"
    return JSONResponse({"error": refused.message, "error_type": kind}, status_code=refused.status,
                        headers={"Retry-After": "1"} if refused.status == 503 else None)


# The routes that answer in Text Embeddings Inference's error form; other `/v1/` routes answer in OpenAI's
TEI_ROUTES = ("/embed", "/embed_sparse", "/embed_all", "/predict", "/rerank", "/similarity", "/tokenize", "/decode")


def error_response(path: str, refused: Refusal):
    """A refusal in the error form of the API `path` belongs to: TEI's, OpenAI's (`/v1/` routes but kbert's own
    `/v1/predict`), else kbert's `{"detail"}`."""
    from fastapi.responses import JSONResponse

    if path in TEI_ROUTES:
        return tei_error(refused)
    if path.startswith("/v1/") and path != "/v1/predict":
        return openai_error(refused)
    return JSONResponse({"detail": refused.message}, status_code=refused.status)


async def served(call: Awaitable, field: str):
    """What `call` (a model service's batched call) gives, or `(None, Refusal)` where it refuses: 413 for an input
    longer than the model takes (`field` names it), 503 when the server is too busy, 422 for any other refusal."""
    try:
        return await call
    except TooLong as error:
        return None, Refusal(413, f"{field}{error}", field)
    except QueueFull as error:
        return None, Refusal(503, str(error))
    except KbertError as error:
        return None, Refusal(422, str(error), field)
