"""Text Embeddings Inference's tokenizer routes, for every model whose tokenizer gives each token's place in the
text (a `tokenizer.json`, or kbert's WordPiece on a `vocab.txt`).

- `POST /tokenize`: `{"inputs": str | [str], "add_special_tokens": true, "prompt_name": null}` gives, per text,
  its tokens `[{"id", "text", "special", "start", "stop"}]`: `start` and `stop` are UTF-8 byte offsets into the
  text after its prompt (TEI's), null for a special token, whose `text` is the token itself.
- `POST /decode`: `{"ids": [int] | [[int]], "skip_special_tokens": true}` gives a text per list of ids.

Errors as TEI gives them (`{"error", "error_type"}`): an id outside the vocabulary, or a `prompt_name` for a
model without prompts, is a 422 naming it.
"""

import asyncio
from typing import Callable, List, Optional, Union

from kbert.errors import KbertError
from kbert.serving.refusals import Refusal, tei_error
from kbert.serving.requests import body_schema, parse_request, read_json, validation_message


def simple_tokens(tokenizer, text: str, add_special_tokens: bool = True) -> List[dict]:
    """The tokens of `text` as TEI's `/tokenize` lists them: the ids the model reads, each content token with its
    UTF-8 byte span in `text` and that span's text, each special token (`[CLS]`, `<s>`, ...) with its own name.

    Example (a WordPiece vocabulary):
    >>> from kbert.tokenizers.wordpiece import Tokenizer
    >>> tokenizer = Tokenizer({"[CLS]": 0, "[SEP]": 1, "[UNK]": 2, "cafe": 3, "语": 4})
    >>> [(row["id"], row["text"], row["start"], row["stop"]) for row in simple_tokens(tokenizer, "Café 语")]
    [(0, '[CLS]', None, None), (3, 'Café', 0, 5), (4, '语', 6, 9), (1, '[SEP]', None, None)]
    """
    (content, spans), = tokenizer.ids_and_offsets([text])
    content = list(content)
    framed = list(tokenizer.encode_all([text])[0][0]) if add_special_tokens else content
    first = next((index for index in range(len(framed) - len(content) + 1)
                  if framed[index:index + len(content)] == content), None)
    if first is None:
        raise KbertError("the tokenizer's special tokens could not be told from the text's tokens")
    data = text.encode("utf-8")
    byte_at = [0]
    for character in text:
        byte_at.append(byte_at[-1] + len(character.encode("utf-8")))
    rows = []
    for position, index in enumerate(framed):
        if first <= position < first + len(content):
            start, stop = (byte_at[offset] for offset in spans[position - first])
            rows.append({"id": int(index), "text": data[start:stop].decode("utf-8", "replace"), "special": False,
                         "start": start, "stop": stop})
        else:
            rows.append({"id": int(index), "text": tokenizer.id_to_token(int(index)), "special": True,
                         "start": None, "stop": None})
    return rows


def add_tokenizer_routes(app, tokenizer, limits, task: str, prompted: Optional[Callable] = None) -> None:
    """`POST /tokenize` and `POST /decode` on `app` (`prompted(texts, prompt_name)`: an embedding model's
    prompts, `Embedder.prompted`; None: a model without prompts)."""
    from fastapi import Request
    from pydantic import BaseModel, Field, StrictInt

    class TokenizeRequest(BaseModel):
        inputs: Union[str, List[str]] = Field(description="a text or a list of texts")
        add_special_tokens: bool = Field(True, description="the model's special tokens around the text's")
        prompt_name: Optional[str] = Field(None, description="an embedding model's prompt to put before each text")

    class DecodeRequest(BaseModel):
        ids: Union[List[StrictInt], List[List[StrictInt]]] = Field(description="token ids, or a list of lists of them")
        skip_special_tokens: bool = Field(True, description="leave the special tokens out of the text")

    def prompted_texts(texts: List[str], prompt_name: Optional[str]) -> List[str]:
        if prompted is not None:
            return prompted(texts, prompt_name)
        if prompt_name is not None:
            raise KbertError(f"prompt_name {prompt_name!r}: this {task} model has no prompts")
        return texts

    async def tokenize(request: Request):
        body, texts = await parse_request(request, TokenizeRequest, "inputs", limits, task)
        if body is None:
            return tei_error(texts)
        try:
            texts = prompted_texts(texts, body.prompt_name)
            return await asyncio.to_thread(lambda: [simple_tokens(tokenizer, text, body.add_special_tokens)
                                                    for text in texts])
        except KbertError as error:
            return tei_error(Refusal(422, str(error), "prompt_name" if body.prompt_name else "inputs"))

    async def decode(request: Request):
        from pydantic import ValidationError

        try:
            body = DecodeRequest.model_validate(read_json(await request.body()))
        except ValueError as error:
            refused = Refusal(422, validation_message(error) if isinstance(error, ValidationError) else str(error),
                              "ids")
            return tei_error(refused if isinstance(error, ValidationError) else refused._replace(status=400))
        sequences = body.ids if body.ids and isinstance(body.ids[0], list) else [body.ids]
        refused = _decode_refusal(sequences, tokenizer.vocab_size, limits)
        if refused:
            return tei_error(refused)
        return [tokenizer.decode(ids, skip_special_tokens=body.skip_special_tokens) for ids in sequences]

    app.post("/tokenize", openapi_extra=body_schema(TokenizeRequest),
             summary="Text Embeddings Inference's tokenize API: each text's tokens and their places")(tokenize)
    app.post("/decode", openapi_extra=body_schema(DecodeRequest),
             summary="Text Embeddings Inference's decode API: the text of token ids")(decode)


def _decode_refusal(sequences: List[List[int]], vocab_size: int, limits) -> Optional[Refusal]:
    """Lists of ids `/decode` does not take: none, more than `--max-texts`, one longer than `--max-text-chars`
    ids, an id outside the vocabulary."""
    if not sequences or not any(sequences):
        return Refusal(422, "ids: expected at least one token id", "ids")
    if len(sequences) > limits.max_texts:
        return Refusal(413, f"ids: {len(sequences)} lists, more than this server's limit of {limits.max_texts} "
                       "(--max-texts)", "ids")
    for row, ids in enumerate(sequences):
        if len(ids) > limits.max_text_chars:
            return Refusal(413, f"ids[{row}]: {len(ids)} ids, more than this server's limit of "
                           f"{limits.max_text_chars} (--max-text-chars)", "ids")
        wrong = next((column for column, index in enumerate(ids) if not 0 <= index < vocab_size), None)
        if wrong is not None:
            return Refusal(422, f"ids[{row}][{wrong}]: {ids[wrong]} is not a token id of this model (0 to "
                           f"{vocab_size - 1})", "ids")
    return None
