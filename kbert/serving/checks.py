"""What every route checks of a request before the model sees it: the body is JSON, the texts are
within the server's limits, not blank, and real text."""

import json
from typing import List, Optional, Tuple


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
    if pairs is not None and (task != "classify" or len(pairs) != len(texts)):
        return 422, ("text_pairs: one per text (or null)" if task == "classify"
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
