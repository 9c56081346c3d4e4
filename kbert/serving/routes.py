"""One shape for every batched route of the embedding and rerank APIs: the body parsed and its texts checked,
the model service run through the batcher, the answer built; a refusal at any step answered in the route's own
API's error form (OpenAI's, Text Embeddings Inference's)."""

from typing import Awaitable, Callable

import numpy as np

from kbert.serving.refusals import Refusal
from kbert.serving.requests import body_schema, parse_request


def finite_rows(rows) -> bool:
    """Whether every value of the rows is finite: an array, or a list of arrays of unlike shapes (a multi-vector
    encoder's token vectors)."""
    if isinstance(rows, list):
        return all(np.isfinite(row).all() for row in rows)
    return bool(np.isfinite(rows).all())


def batched_route(app, path: str, schema, field: str, limits, task: str, error: Callable,
                  serve: Callable[..., Awaitable], answer: Callable, summary: str, texts_of=None) -> None:
    """`POST path` on `app`: a `schema` body whose texts are `field` (or `texts_of(body)`), checked against
    `limits`; `serve(body,
    texts)` gives `(rows, tokens)` or `(None, Refusal)`; `answer(body, texts, rows, tokens)` the response.
    `error` writes a `Refusal` in the API's form. Rows that are not all finite (a model that overflowed) are a
    500 in that form, never NaN in JSON or in base64 bytes. The answer (JSON's own types: lists, dicts,
    numbers, strings) is written as it is, without FastAPI's `jsonable_encoder`, which walks every value (1.5 ms
    of a server's thread for a SPLADE text's 289 terms, 0.3 ms for json.dumps)."""
    from fastapi import Request
    from fastapi.responses import JSONResponse

    async def route(request: Request):
        body, texts = await parse_request(request, schema, field, limits, task, texts_of)
        if body is None:
            return error(texts)
        rows, tokens = await serve(body, texts)
        if rows is None:
            return error(tokens)
        if not finite_rows(rows):
            return error(Refusal(500, "the model gave NaN or infinite values for this input (its weights, or an "
                                      "overflow in its precision); nothing can be answered for it"))
        return JSONResponse(answer(body, texts, rows, tokens))

    route.__name__ = path.strip("/").replace("/", "_")  # the OpenAPI operation's name
    app.post(path, openapi_extra=body_schema(schema), summary=summary)(route)
