"""A reranker's routes, in the forms search systems call them.

- `POST /rerank`, Text Embeddings Inference's: `{"query", "texts", "raw_scores": false,
  "return_text": false, "truncate": false}` gives `[{"index", "score"(, "text")}]`, most relevant
  first; a pair longer than the model takes is refused (413) unless `"truncate": true`.
- `POST /v1/rerank`, Cohere's and Jina's: `{"query", "documents": [str | {"text"}], "top_n",
  "return_documents"}` gives `{"model", "results": [{"index", "relevance_score"(, "document":
  {"text"})}], "usage": {"total_tokens"}}`; long pairs are cut, as those services cut them.

Scores are the model's logit through its activation (the CrossEncoder's `activation_fn`: the sigmoid, 0 to 1,
or none); `raw_scores` gives the logit. Each pair is
tokenized once, on a worker thread (to count its tokens and check its length before a batch is
formed); the model then runs the ids.
"""

from typing import List, Optional, Tuple, Union

import numpy as np

from kbert.serving.refusals import openai_error, served, tei_error
from kbert.serving.requests import refusal
from kbert.serving.routes import batched_route
from kbert.serving.services import TokenizedService


class RerankService(TokenizedService):
    """A `Reranker` behind a server's batcher: (query, passage) pairs in, logits and their token counts out.

    Args:
        model: a `kbert.tasks.reranking.Reranker`.
        batch_size: pairs in one model call at most (the server's `--max-batch`).
    """

    def __call__(self, encoded, pairs=None) -> np.ndarray:
        """The batcher's model call: logits of tokenized pairs (`Reranker.logits_of_tokens`)."""
        return self.model.logits_of_tokens(encoded, self.batch_size)

    def too_long(self, tokens: int) -> str:
        return f"the query and it are {super().too_long(tokens)}"

    async def logits(self, batcher, queries: List[str], passages: List[str], truncate: bool) -> Tuple[np.ndarray, int]:
        """Each pair's logit and the tokens they took."""
        logits, tokens = await self.run(batcher, queries, passages, truncate)
        return np.asarray(logits, np.float64), tokens


def add_rerank_routes(app, service: RerankService, batcher, limits, model_name: str) -> None:
    """`POST /rerank` (TEI's form) and `POST /v1/rerank` (Cohere's and Jina's) on `app`, through `batcher`."""
    from pydantic import BaseModel, Field

    class TEIRequest(BaseModel):
        query: str = Field(description="what the texts are ranked for")
        texts: List[str] = Field(description="the passages to rank")
        raw_scores: bool = Field(False, strict=True, description="the model's logits instead of scores from 0 to 1")
        return_text: bool = Field(False, strict=True, description="each result carries its text")
        truncate: bool = Field(False, strict=True, description="cut a pair longer than the model takes (else 413)")

    class Document(BaseModel):
        text: str

    class CohereRequest(BaseModel):
        query: str = Field(description="what the documents are ranked for")
        documents: List[Union[str, Document]] = Field(description="the passages: strings or {\"text\": ...}")
        top_n: Optional[int] = Field(None, strict=True, ge=1, description="the most relevant n only")
        return_documents: bool = Field(False, strict=True, description="each result carries its document")
        model: Optional[str] = None

    async def scored(query: str, texts: List[str], truncate: bool, field: str):
        """`(logits, tokens)`, or `(None, Refusal)`."""
        refused = refusal([query], None, limits, "rerank", "query", truncate)
        if refused:
            return None, refused
        return await served(service.logits(batcher, [query] * len(texts), texts, truncate), field)

    def ranked(logits: np.ndarray, raw: bool, top_n: Optional[int] = None):
        scores = logits if raw else service.model.scores(logits)
        return [(int(index), float(scores[index])) for index in np.argsort(-scores, kind="stable")[:top_n]]

    def tei_answer(body, texts, logits, tokens):
        return [{"index": index, "score": score, **({"text": texts[index]} if body.return_text else {})}
                for index, score in ranked(logits, body.raw_scores)]

    def cohere_answer(body, texts, logits, tokens):
        return {"model": model_name, "usage": {"total_tokens": tokens},
                "results": [{"index": index, "relevance_score": score,
                             **({"document": {"text": texts[index]}} if body.return_documents else {})}
                            for index, score in ranked(logits, False, body.top_n)]}

    batched_route(app, "/rerank", TEIRequest, "texts", limits, "rerank", tei_error,
                  lambda body, texts: scored(body.query, texts, body.truncate, "texts"), tei_answer,
                  "Text Embeddings Inference's rerank API: the texts by relevance to the query")
    batched_route(app, "/v1/rerank", CohereRequest, "documents", limits, "rerank", openai_error,
                  lambda body, texts: scored(body.query, texts, True, "documents"), cohere_answer,
                  "Cohere's and Jina's rerank API: the documents by relevance to the query")
