"""A classifier's route in Text Embeddings Inference's form: `POST /predict`.

`{"inputs": str | [str, str] | [[str] | [str, str], ...], "truncate": false, "raw_scores": false}`: a text,
a pair of texts, or a batch of both (a list of lists), as TEI reads them. The answer is each input's labels
with their probabilities, most probable first, `[{"score", "label"}, ...]` (a batch: a list of those). A text
longer than the model takes is refused with 413 unless `truncate` asks to cut it; `raw_scores` (logits) is
refused, as a kbert classifier's graph ends in its softmax. Errors are TEI's `{"error", "error_type"}`.
"""

from typing import List, Optional, Tuple, Union

from kbert.errors import KbertError
from kbert.serving.batcher import QueueFull
from kbert.serving.refusals import Refusal, tei_error
from kbert.serving.requests import body_schema, read_json, refusal, validation_message


def add_classifier_routes(app, predictor, batcher, limits) -> None:
    """`POST /predict` on `app` for the classifier `predictor` (`kbert.tasks.predictors.Predictor`), run through
    `batcher`."""
    from fastapi import Request
    from pydantic import BaseModel, Field, ValidationError

    class PredictRequest(BaseModel):
        inputs: Union[str, List[str], List[List[str]]] = Field(
            description="a text, a pair [text, text_pair], or a batch of them (a list of lists)")
        truncate: bool = Field(False, strict=True, description="cut an input longer than the model takes (else 413)")
        truncation_direction: str = Field("Right", pattern="^(Right|right)$",
                                          description="where an input is cut: its end (Right) only")
        raw_scores: bool = Field(False, strict=True, description="logits instead of probabilities (not served: the "
                                                                 "model's graph ends in its softmax)")

    async def predict(request: Request):
        try:
            body = PredictRequest.model_validate(read_json(await request.body()))
        except ValueError as error:  # pydantic's ValidationError is a ValueError too
            status = 422 if isinstance(error, ValidationError) else 400
            return tei_error(Refusal(status, validation_message(error) if status == 422 else str(error), "inputs"))
        single, texts, pairs = _inputs(body.inputs)
        request.state.texts = len(texts or ())
        refused = _refused(body, texts, pairs, limits, predictor.task)
        if refused:
            return tei_error(refused)
        try:
            if not body.truncate:
                refused = await batcher.prepare(len(texts), _too_long, predictor, texts, pairs)
                if refused:
                    return tei_error(refused)
            rows = await batcher.predict(texts, pairs)
        except QueueFull as error:
            return tei_error(Refusal(503, str(error)))
        except KbertError as error:
            return tei_error(Refusal(422, str(error), "inputs"))
        answer = [sorted(({"score": score, "label": label} for label, score in row["probabilities"].items()),
                         key=lambda entry: -entry["score"]) for row in rows]
        return answer[0] if single else answer

    app.post("/predict", openapi_extra=body_schema(PredictRequest),
             summary="Text Embeddings Inference's predict API: each input's labels, most probable first")(predict)


def _inputs(inputs) -> Tuple[bool, Optional[List[str]], Optional[List[Optional[str]]]]:
    """`(single, texts, pairs)` of TEI's `inputs`: one text, one pair, or a batch of texts and pairs; texts None
    for a list TEI does not read (three texts in a pair)."""
    if isinstance(inputs, str):
        return True, [inputs], None
    single = all(isinstance(item, str) for item in inputs)
    sequences = [inputs] if single else inputs
    if not sequences or any(not 1 <= len(sequence) <= 2 for sequence in sequences):
        return single, None, None
    pairs = [sequence[1] if len(sequence) == 2 else None for sequence in sequences]
    return single, [sequence[0] for sequence in sequences], pairs if any(pair is not None for pair in pairs) else None


def _refused(body, texts: Optional[List[str]], pairs, limits, task: str) -> Optional[Refusal]:
    """The 422 of inputs TEI does not read or of `raw_scores`, else the server's checks of the texts
    (`kbert.serving.requests.refusal`)."""
    if texts is None:
        return Refusal(422, "inputs: a pair is [text, text_pair]; a batch is a list of lists of one or two texts",
                       "inputs")
    if body.raw_scores:
        return Refusal(422, "raw_scores: this classifier's graph ends in its softmax, so it gives probabilities "
                            "only; ask with raw_scores false", "raw_scores")
    return refusal(texts, pairs, limits, task, "inputs", body.truncate)


def _too_long(predictor, texts: List[str], pairs: Optional[List[Optional[str]]]) -> Optional[Refusal]:
    """The 413 of the first input whose tokens are more than the model takes, else None."""
    for index, (ids, _) in enumerate(predictor.tokenizer.encode_all(texts, pairs)):
        if len(ids) > predictor.maxlen:
            return Refusal(413, f"inputs[{index}]: {len(ids)} tokens, more than the model's {predictor.maxlen}; ask "
                                "with \"truncate\": true to cut it", "inputs")
    return None
