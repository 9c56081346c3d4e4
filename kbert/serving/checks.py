"""What every route checks of a request before the model sees it: the body is JSON, the texts are
within the server's limits, not blank, and real text."""

import json
from typing import Awaitable, List, Optional, Tuple

from kbert.errors import KbertError
from kbert.serving.batcher import QueueFull, TooLong


def read_json(body: bytes):
    """A request body as JSON; `ValueError` that says why not (not JSON, not UTF-8, nested too deeply)."""
    try:
        return json.loads(body)
    except RecursionError:  # e.g. 100,000 "[": Python's parser gives up; the client's fault, not the server's
        raise ValueError("the body is JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"the body is not JSON ({error})") from None


def unencodable_at(text: str) -> Optional[int]:
    """Where `text` holds a lone surrogate (JSON's "\\ud800" escapes can carry one), which no tokenizer reads."""
    try:
        text.encode("utf-8")
        return None
    except UnicodeEncodeError as error:
        return error.start


def refusal(texts: List[str], pairs, limits, task: str, field: str = "texts") -> Optional[Tuple[int, str]]:
    """`(status, message)` for a request the server does not take (`limits`: a `ServerLimits`), else None;
    `field`: the texts' name in the request (`input` in OpenAI's API, `inputs` in TEI's)."""
    if not texts:
        return 422, f"{field}: expected at least one text"
    if len(texts) > limits.max_texts:
        return 413, f"{field}: {len(texts)} texts, more than this server's limit of {limits.max_texts} (--max-texts)"
    if pairs is not None and (task not in ("classify", "rerank") or len(pairs) != len(texts)):
        return 422, ("text_pairs: one per text (or null)" if task in ("classify", "rerank")
                     else f"text_pairs: a {task} model takes single texts")
    for name, column in ((field, texts), ("text_pairs", pairs or [])):
        for index, text in enumerate(column):
            if text is None and name == "text_pairs":
                continue
            if len(text) > limits.max_text_chars:
                return 413, (f"{name}[{index}]: {len(text)} characters, more than this server's limit of "
                             f"{limits.max_text_chars} (--max-text-chars)")
            if not text.strip():
                return 422, (f"{name}[{index}]: blank; every text must hold something to predict"
                             + (" (null: no second text)" if name == "text_pairs" else ""))
            if unencodable_at(text) is not None:
                return 422, (f"{name}[{index}]: a lone surrogate at character {unencodable_at(text)} is not text "
                             "(an unpaired \\ud800-\\udfff escape); send valid UTF-16 pairs or UTF-8")
    return None


def openai_error(status: int, message: str, param: Optional[str] = None):
    """An error as OpenAI's API (and Cohere- and Jina-style `/v1/` routes) gives one:
    `{"error": {"message", "type", "param", "code"}}`, which OpenAI's client raises by status."""
    from fastapi.responses import JSONResponse

    kind = "server_error" if status >= 500 else "invalid_request_error"
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": None}},
                        status_code=status, headers={"Retry-After": "1"} if status == 503 else None)


def tei_error(status: int, message: str):
    """An error as Text Embeddings Inference gives one: `{"error", "error_type"}`."""
    from fastapi.responses import JSONResponse

    kind = "Overloaded" if status == 503 else "Validation" if status < 500 else "Backend"
    return JSONResponse({"error": message, "error_type": kind}, status_code=status,
                        headers={"Retry-After": "1"} if status == 503 else None)


def body_schema(schema) -> dict:
    """The OpenAPI entry of a body read by hand (so that any content type is read as JSON)."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema.model_json_schema()}}}}


async def parse_request(request, schema, field: str, limits, task: str):
    """`(body, texts)` of a valid request (`schema`, a pydantic model; `field`, its texts: a string, or a list of
    strings or of objects with a `text`), else `(None, (status, message))`."""
    from pydantic import ValidationError

    try:
        raw = read_json(await request.body())
    except ValueError as error:
        return None, (400, str(error))
    if isinstance(raw, dict) and token_arrays(raw.get(field)):
        return None, (422, f"{field}: token ids are not taken here; send the texts themselves")
    try:
        body = schema.model_validate(raw)
    except ValidationError as error:
        return None, (422, "; ".join(f"{'.'.join(map(str, item['loc'])) or 'body'}: {item['msg']}"
                                     for item in error.errors()))
    texts = getattr(body, field)
    texts = [texts] if isinstance(texts, str) else [getattr(text, "text", text) for text in texts]
    request.state.texts = len(texts)
    refused = refusal(texts, None, limits, task, field)
    return (None, refused) if refused else (body, texts)


async def served(call: Awaitable, field: str):
    """What `call` (a model service's batched call) gives, or `(None, (status, message))` where it refuses:
    413 for an input longer than the model takes (`field` names it), 503 when the server is too busy, 422 for
    any other refusal."""
    try:
        return await call
    except TooLong as error:
        return None, (413, f"{field}{error}")
    except QueueFull as error:
        return None, (503, str(error))
    except KbertError as error:
        return None, (422, str(error))


def token_arrays(value) -> bool:
    """Whether an input is OpenAI's other form, token ids (a list of ints, or of lists of them)."""
    return isinstance(value, list) and any(isinstance(item, (int, list)) and not isinstance(item, bool)
                                           for item in value)
