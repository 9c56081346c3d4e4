"""What every route checks of a request before the model sees it: the body is JSON of the route's schema, the
texts are within the server's limits, not blank, and real text."""

import json
from typing import List, Optional

from kbert.errors import is_blank
from kbert.serving.refusals import Refusal


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


def refusal(texts: List[str], pairs, limits, task: str, field: str = "texts",
            truncate: bool = False) -> Optional[Refusal]:
    """The `Refusal` of a request the server does not take (`limits`: a `ServerLimits`), else None;
    `field`: the texts' name in the request (`input` in OpenAI's API, `inputs` in TEI's). A request that asks to
    `truncate` is not refused for a text's characters: its tokens are cut to the model's input."""
    if not texts:
        return Refusal(422, f"{field}: expected at least one text", field)
    if len(texts) > limits.max_texts:
        return Refusal(413, f"{field}: {len(texts)} texts, more than this server's limit of {limits.max_texts} "
                       "(--max-texts)", field)
    if pairs is not None and (task not in ("classify", "rerank") or len(pairs) != len(texts)):
        return Refusal(422, "text_pairs: one per text (or null)" if task in ("classify", "rerank")
                       else f"text_pairs: a {task} model takes single texts", "text_pairs")
    for name, column in ((field, texts), ("text_pairs", pairs or [])):
        for index, text in enumerate(column):
            if text is None and name == "text_pairs":
                continue
            if len(text) > limits.max_text_chars and not truncate:
                return Refusal(413, f"{name}[{index}]: {len(text)} characters, more than this server's limit of "
                               f"{limits.max_text_chars} (--max-text-chars)", name)
            if is_blank(text):
                return Refusal(422, f"{name}[{index}]: blank (white space or invisible characters only); every text must hold something to predict"
                               + (" (null: no second text)" if name == "text_pairs" else ""), name)
            if unencodable_at(text) is not None:
                return Refusal(422, f"{name}[{index}]: a lone surrogate at character {unencodable_at(text)} is not "
                               "text (an unpaired \\ud800-\\udfff escape); send valid UTF-16 pairs or UTF-8", name)
    return None


def body_schema(schema) -> dict:
    """The OpenAPI entry of a body read by hand (so that any content type is read as JSON)."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema.model_json_schema()}}}}


def validation_message(error) -> str:
    """A pydantic `ValidationError` as one line: each wrong field's path and what was expected of it."""
    return "; ".join(f"{'.'.join(map(str, item['loc'])) or 'body'}: {item['msg']}" for item in error.errors())


async def parse_request(request, schema, field: str, limits, task: str, texts_of=None):
    """`(body, texts)` of a valid request (`schema`, a pydantic model; `field`, its texts: a string, or a list of
    strings or of objects with a `text`; or `texts_of(body)` where the texts lie deeper), else `(None, Refusal)`."""
    from pydantic import ValidationError

    try:
        raw = read_json(await request.body())
    except ValueError as error:
        return None, Refusal(400, str(error))
    if isinstance(raw, dict) and token_arrays(raw.get(field)):
        return None, Refusal(422, f"{field}: token ids are not taken here; send the texts themselves", field)
    try:
        body = schema.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]["loc"]
        return None, Refusal(422, validation_message(error), str(first[0]) if first else None)
    texts = getattr(body, field) if texts_of is None else texts_of(body)
    texts = [texts] if isinstance(texts, str) else [getattr(text, "text", text) for text in texts]
    request.state.texts = len(texts)
    refused = refusal(texts, None, limits, task, field, asks_truncation(body))
    return (None, refused) if refused else (body, texts)


def asks_truncation(body) -> bool:
    """Whether a request asks to cut a text longer than the model takes: TEI's `"truncate": true`, Cohere's
    `"truncate": "END"` (its schema takes no other cut)."""
    value = getattr(body, "truncate", False)
    return value is True or value == "END"


def token_arrays(value) -> bool:
    """Whether an input is OpenAI's other form, token ids (a list of ints, or of lists of them)."""
    return isinstance(value, list) and any(isinstance(item, (int, list)) and not isinstance(item, bool)
                                           for item in value)
