"""An embedding model's routes, in the forms search systems and their clients speak.

- `POST /v1/embeddings`, OpenAI's: `{"input": str | [str], "model", "encoding_format": "float" |
  "base64", "dimensions"}` gives `{"object": "list", "data": [{"object": "embedding", "index",
  "embedding"}], "model", "usage": {"prompt_tokens", "total_tokens"}}`; errors as OpenAI gives them,
  `{"error": {"message", "type", "param", "code"}}`, which its client raises as `BadRequestError` and
  the like. `dimensions` keeps a vector's first n values (Matryoshka models are trained for it),
  scaled back to unit length when the model's vectors are. `base64`: little-endian float32 bytes
  (what the `openai` package asks for and decodes by default). kbert's own `embedding_type` (`float`, `int8`,
  `uint8`, `binary`, `ubinary`, as Cohere's `embedding_types`) gives the values in fewer bits: lists of integers,
  or with `base64` one byte each (binary: eight signs to a byte).
- `POST /embed`, Text Embeddings Inference's: `{"inputs": str | [str], "normalize": true,
  "truncate": false, "prompt_name": null}` gives one list of floats per input; errors `{"error",
  "error_type"}`.
- `POST /v1/embed`, Cohere's: `{"texts": [str], "model", "input_type", "embedding_types": ["float", "int8",
  "uint8", "binary", "ubinary"], "truncate": "NONE" | "END"}` gives `{"id", "embeddings": {type: [[...]]},
  "texts", "meta": {"billed_units": {"input_tokens"}}, "response_type": "embeddings_by_type"}` (without
  `embedding_types`: `"embeddings": [[floats]]`, `"embeddings_floats"`). `input_type` `search_query` and
  `search_document` take the model's query and document prompts; int8 and uint8 take the calibration ranges the
  server was started with (`--ranges`, else the model folder's `calibration_ranges.json`), else are refused;
  errors in OpenAI's form, as `/v1/rerank`'s.
- `POST /similarity`, TEI's: `{"inputs": {"source_sentence": str, "sentences": [str]}, "parameters":
  {"prompt_name", "truncate"}}` gives the cosine of each sentence's vector with the source sentence's.
- A sparse encoder (SPLADE) answers `POST /embed_sparse`, TEI's: `{"inputs", "truncate", "prompt_name"}` gives
  each text's non-zero weights, `[[{"index", "value"}, ...], ...]` (ascending ids); the dense routes above
  refuse it with 400 naming `/embed_sparse`, and a dense model's server refuses `/embed_sparse` alike.
- A multi-vector encoder (ColBERT) answers `POST /embed_all`, TEI's: `{"inputs", "truncate", "prompt_name"}`
  gives each text's scored token vectors, `[[[floats], ...], ...]`; `prompt_name` `query` or `document` embeds
  the texts in that role (`encode_query`: expanded, the query length; `encode_document`), as `kbert embed`
  does. The other routes refuse it with 400 naming `/embed_all`, and the other models' servers refuse
  `/embed_all` alike.

Both put the model's default prompt (`default_prompt_name` of its `config_sentence_transformers.json`)
before each text, as sentence-transformers' `encode` does; TEI's `prompt_name` picks another of its
prompts.

A model with task LoRA adapters (jina-embeddings-v3) served with several (`kbert serve --adapter TASK` once per
task, or `all`) computes each from one set of weights: `task` on `/v1/embeddings` (as Jina's own API names it),
`/embed` and `/similarity`'s parameters chooses one, with its prompt of that name; Cohere's `input_type` chooses
`retrieval.query`, `retrieval.passage`, `classification` or `separation` where the server has it. A batch holds
the rows of several tasks, each task's run through its graph; a task the server lacks is a 422 naming `task`
and those it has.

A text longer than the model's `max_seq_length` is refused with 413 (naming it, its tokens and the
limit) unless the request asks to cut it (`"truncate": true` in TEI's form); OpenAI's API refuses
over-long input too. Texts are tokenized on worker threads, to count the tokens (the usage, the
batch's token budget) before a batch is formed; the model then runs the ids.
"""

import base64
import functools
import uuid
from typing import List, Optional, Tuple, Union

import numpy as np

from kbert.errors import KbertError
from kbert.serving.refusals import Refusal, openai_error, served, tei_error
from kbert.serving.routes import batched_route
from kbert.serving.services import TokenizedService, TooLong
from kbert.embeddings.embedder import ADAPTER_FOR
from kbert.embeddings.kinds import DenseOutput, unit_length
from kbert.embeddings.multi_vector import ROLES, MultiVectorOutput, expanded_queries
from kbert.embeddings.precision import CALIBRATED, PRECISIONS, RANGES_FILE, quantized
from kbert.embeddings.sparse import SparseOutput


class EmbeddingService(TokenizedService):
    """An `Embedder` behind a server's batcher: texts in, vectors and their token counts out.

    Args:
        model: a `kbert.embeddings.embedder.Embedder`.
        batch_size: texts in one model call at most (the server's `--max-batch`).
    """

    def __call__(self, encoded, pairs=None) -> "np.ndarray | list":
        """The batcher's model call: what the model's kind gives a batch (`Embedder.batch_rows`): vectors (a
        model of several task adapters takes `(adapter, row)` rows), a sparse encoder's non-zero weights, a
        multi-vector encoder's every token's vectors."""
        return self.model.batch_rows(encoded, self.batch_size)

    async def predicted(self, batcher, texts: List[str]) -> list:
        """What the model gives each text, cut where too long, as `kbert predict` computes it: a multi-vector
        encoder's texts as documents (`embed_all`), a sparse encoder's non-zero weights (`embed_sparse`), else
        vectors (`embed`)."""
        embed = {MultiVectorOutput.route: functools.partial(self.embed_all, prompt_name="document"),
                 SparseOutput.route: self.embed_sparse}.get(self.model.output.route, self.embed)
        results, _ = await embed(batcher, texts, truncate=True)
        return results

    def too_long(self, tokens: int) -> str:
        return f"{super().too_long(tokens)} (its max_seq_length)"

    async def embed(self, batcher, texts: List[str], truncate: bool, prompt_name: Optional[str] = None,
                    task: Optional[str] = None) -> Tuple[np.ndarray, int]:
        """`[len(texts), dimensions]` vectors (as the model gives them) of the texts after their prompt
        (`Embedder.prompted`; a pooling that leaves it out is told its tokens, `Embedder.pooled_rows`), and the
        tokens they took; `task`: the task adapter that computes them (`Embedder.for_adapter`; None: the
        default)."""
        model = self.model.for_adapter(task)
        prompt = model.prompt_text(prompt_name)
        leading = model.prompt_tokens(prompt)

        def rows(encoded):
            pooled = model.pooled_rows(encoded, leading)
            return [(model.adapter, row) for row in pooled] if self.model.adapter_models else pooled

        vectors, tokens = await self.run(batcher, model.prompted(texts, prompt=prompt), None, truncate, rows)
        return np.asarray(vectors, np.float32), tokens

    def unknown_task(self, task: Optional[str]) -> Optional[Refusal]:
        """The 422 of a request's `task` the server does not compute, naming those it does; None for one it
        does (or none asked)."""
        try:
            self.model.for_adapter(task)
        except KbertError as error:
            return Refusal(422, str(error), "task")
        return None

    async def embed_sparse(self, batcher, texts: List[str], truncate: bool,
                           prompt_name: Optional[str] = None) -> Tuple[List[Tuple[np.ndarray, np.ndarray]], int]:
        """A sparse encoder's non-zero weights of each text (`Embedder.encode_sparse`), and the tokens they took;
        `prompt_name` `query` or `document` is the texts' role (an inference-free encoder's queries are read by
        its weight table, on the tokenizing threads: no batch)."""
        role = prompt_name if prompt_name in ROLES else None
        prompted = self.model.role_prompted(texts, role, None if role else prompt_name)
        static = self.model.static_query
        if static is not None and static.takes(role):
            terms, counts = await batcher.prepare(len(texts), self._static_terms, prompted, truncate)
            return terms, sum(counts)
        return await self.run(batcher, prompted, None, truncate)

    def _static_terms(self, texts: List[str], truncate: bool) -> Tuple[list, List[int]]:
        """Queries' weights from the table, a query longer than its tokenizer takes a `TooLong` unless `truncate`."""
        static = self.model.static_query
        ids = static.tokens(texts, cut=False)
        longest = static.max_length
        for index, tokens in enumerate(ids):
            if longest is not None and len(tokens) > longest and not truncate:
                raise TooLong(f"[{index}]: {len(tokens)} tokens, more than the {longest} the model's query "
                              "tokenizer takes; shorten it, or ask for it to be cut")
        ids = [tokens[:longest] for tokens in ids]
        return [static.terms(tokens) for tokens in ids], [len(tokens) for tokens in ids]

    async def embed_all(self, batcher, texts: List[str], truncate: bool,
                        prompt_name: Optional[str] = None) -> Tuple[List[np.ndarray], int]:
        """A multi-vector encoder's scored token vectors of each text (`Embedder.encode_multi_vector`), and the
        tokens they took; `prompt_name` `query` or `document` is the texts' role."""
        role = prompt_name if prompt_name in ROLES else None
        prompted = self.model.role_prompted(texts, role, None if role else prompt_name)
        encoded, counts = await batcher.prepare(len(texts), self._role_tokenize, prompted, role, truncate)
        vectors = await batcher.predict(encoded, tokens=sum(counts))
        return self.model.scored(vectors, encoded, role), sum(counts)

    def _role_tokenize(self, texts: List[str], role: Optional[str], truncate: bool) -> Tuple[list, List[int]]:
        """`tokenize` within the role's length (`Embedder.role_length`), a longer text a `TooLong` unless
        `truncate`, then each query filled up to its expansion (`multi_vector.expanded_queries`)."""
        length = self.model.role_length(role)
        encoded, _ = self.tokenize(texts, None, truncate, length,
                                   lambda tokens: f"{tokens} tokens, more than the model's {length} for a "
                                                  f"{role or 'text'}")
        encoded = expanded_queries(self.model.output, self.model.tokenizer, encoded, role)
        return encoded, [len(ids) for ids, _ in encoded]


async def _refused(refusal: Refusal):
    """A route's `serve` step that refuses before the model runs: `(None, refusal)`, as `served` gives it."""
    return None, refusal


#: The request field that chooses a task LoRA adapter (Jina's API's `task`).
TASK_FIELD = ("the task adapter that computes the vectors (jina-embeddings-v3's retrieval.query, "
              "retrieval.passage, separation, classification, text-matching), among those the server was started "
              "with (kbert serve --adapter); its prompt of that name comes with it; null: the server's first")

#: Cohere's `input_type` as the task adapter of jina-embeddings-v3 that does that work, where the server has it.
COHERE_TASKS = {input_type: ADAPTER_FOR[work] for input_type, work in (
    ("search_query", "query"), ("search_document", "document"), ("classification", "classification"),
    ("clustering", "clustering"))}


#: The routes of each kind of embedding model (by the route of its vectors, `OutputKind.route`; beside
#: `/v1/predict`) and their error forms: another kind's server refuses them.
KIND_ROUTES = {DenseOutput.route: {"/v1/embeddings": openai_error, "/embed": tei_error, "/v1/embed": openai_error,
                                   "/similarity": tei_error},
               SparseOutput.route: {"/embed_sparse": tei_error}, MultiVectorOutput.route: {"/embed_all": tei_error}}

#: How a refusal names each kind, by its route.
KIND_NAMES = {kind.route: kind.described for kind in (DenseOutput, SparseOutput, MultiVectorOutput)}


def add_embedding_routes(app, service: EmbeddingService, batcher, limits, model_name: str) -> None:
    """`POST /v1/embeddings` (OpenAI's form), `POST /embed` (TEI's), `/v1/embed` (Cohere's) and `/similarity`
    on `app`, run through `batcher`; a sparse encoder's `POST /embed_sparse` instead, a multi-vector encoder's
    `POST /embed_all` (the model's kind's `route`). The other kinds' routes answer 400, naming the route that
    serves this model."""
    output = service.model.output
    for route, paths in KIND_ROUTES.items():
        for path, error in paths.items() if route != output.route else ():
            _refusing_route(app, path, error, f"{path} gives {KIND_NAMES[route]}'s vectors, and this model is "
                                              f"{output.described}: POST {output.route} gives its vectors")
    add_routes = {DenseOutput.route: functools.partial(_add_dense_routes, model_name=model_name),
                  SparseOutput.route: _add_sparse_route, MultiVectorOutput.route: _add_multi_vector_route}
    add_routes[output.route](app, service, batcher, limits)


def _refusing_route(app, path: str, error, message: str) -> None:
    """`POST path` answering 400 with `message` in the route's API's error form."""
    async def route():
        return error(Refusal(400, message))

    route.__name__ = path.strip("/").replace("/", "_")
    app.post(path, summary="not served for this kind of model", include_in_schema=False)(route)


def _tei_texts_request():
    """The body TEI's `/embed` and `/embed_sparse` share: the texts, whether to cut them, the prompt's name
    (a pydantic model, made when a server starts: pydantic is the serving extra's)."""
    from pydantic import BaseModel, Field

    class TEITextsRequest(BaseModel):
        inputs: Union[str, List[str]] = Field(description="a text or a list of texts")
        truncate: bool = Field(False, strict=True, description="cut a text longer than the model takes (else 413)")
        truncation_direction: str = Field("Right", pattern="^(Right|right)$",
                                          description="where a text is cut: its end (Right) only")
        prompt_name: Optional[str] = Field(None, description="the model's prompt to put before each text "
                                           "(config_sentence_transformers.json); null: its default one")

    return TEITextsRequest


def _add_sparse_route(app, service: EmbeddingService, batcher, limits) -> None:
    """`POST /embed_sparse`, Text Embeddings Inference's: each text's non-zero vocabulary weights."""
    SparseRequest = _tei_texts_request()

    def sparse_answer(body, texts, terms, tokens):
        return [[{"index": int(index), "value": float(value)} for index, value in zip(*text_terms)]
                for text_terms in terms]

    batched_route(app, "/embed_sparse", SparseRequest, "inputs", limits, "embed", tei_error,
                  lambda body, texts: served(service.embed_sparse(batcher, texts, body.truncate, body.prompt_name),
                                             "inputs"),
                  sparse_answer, "Text Embeddings Inference's embed_sparse API: each text's non-zero weights "
                                 "(prompt_name query or document: the role)")


def _add_multi_vector_route(app, service: EmbeddingService, batcher, limits) -> None:
    """`POST /embed_all`, Text Embeddings Inference's: each text's token vectors (a multi-vector encoder's scored
    ones)."""
    TokensRequest = _tei_texts_request()

    def tokens_answer(body, texts, vectors, tokens):
        return [tokens_of_text.tolist() for tokens_of_text in vectors]

    batched_route(app, "/embed_all", TokensRequest, "inputs", limits, "embed", tei_error,
                  lambda body, texts: served(service.embed_all(batcher, texts, body.truncate, body.prompt_name),
                                             "inputs"),
                  tokens_answer, "Text Embeddings Inference's embed_all API: each text's token vectors (prompt_name "
                                 "query or document: the role)")


def _add_dense_routes(app, service: EmbeddingService, batcher, limits, model_name: str) -> None:
    from pydantic import BaseModel, Field

    width = service.model.dimensions  # not `dimensions`: a class body below has a field of that name

    class OpenAIRequest(BaseModel):
        input: Union[str, List[str]] = Field(description="a text or a list of texts")
        model: Optional[str] = Field(None, description="accepted for OpenAI's clients; the served model answers")
        encoding_format: str = Field("float", pattern="^(float|base64)$",
                                     description="float: lists of numbers; base64: little-endian float32 bytes")
        dimensions: Optional[int] = Field(None, ge=1, le=width, strict=True,  # "8" and true are not numbers
                                          description=f"keep the first n of the {width} values")
        task: Optional[str] = Field(None, description=TASK_FIELD)
        embedding_type: str = Field("float", pattern=f"^({'|'.join(PRECISIONS)})$",
                                    description="kbert's own: the values in fewer bits (int8 and uint8 by the "
                                                "model's calibration ranges; binary and ubinary: eight signs to a "
                                                "byte); with base64, one byte each")
        user: Optional[str] = None

    class TEIRequest(_tei_texts_request()):
        normalize: bool = Field(True, strict=True, description="scale each vector to unit length")
        task: Optional[str] = Field(None, description=TASK_FIELD)

    class SimilarityInput(BaseModel):
        source_sentence: str = Field(description="the text the others are compared with")
        sentences: List[str] = Field(description="the texts compared with it")

    class SimilarityParameters(BaseModel):
        prompt_name: Optional[str] = Field(None, description="the model's prompt to put before each text")
        truncate: bool = Field(False, strict=True, description="cut a text longer than the model takes (else 413)")
        task: Optional[str] = Field(None, description=TASK_FIELD)

    class SimilarityRequest(BaseModel):
        inputs: SimilarityInput
        parameters: Optional[SimilarityParameters] = None

    class CohereRequest(BaseModel):
        texts: List[str] = Field(description="the texts")
        model: Optional[str] = Field(None, description="accepted for Cohere's clients; the served model answers")
        input_type: Optional[str] = Field(None, pattern="^(search_query|search_document|classification|clustering)$",
                                          description="search_query and search_document take the model's query "
                                                      "and document prompts")
        embedding_types: Optional[List[str]] = Field(None, description="float, int8, uint8, binary, ubinary")
        truncate: str = Field("END", pattern="^(NONE|END)$", description="END: cut a text longer than the model "
                                                                         "takes; NONE: refuse it (413)")

    def task_vectors(texts, truncate: bool, prompt_name: Optional[str], task: Optional[str], field: str):
        """The route's `serve` step: the texts' vectors by `task`'s adapter, or the 422 of a task not served."""
        refusal = service.unknown_task(task)
        if refusal:
            return _refused(refusal)
        return served(service.embed(batcher, texts, truncate, prompt_name, task), field)

    def without_ranges(kinds, field: str) -> Optional[Refusal]:
        """int8 or uint8 among `kinds` where the server has no calibration ranges: the refusal naming `field`."""
        missing = [kind for kind in kinds if kind in CALIBRATED and service.model.ranges is None]
        return Refusal(422, f"{field}: {missing[0]} needs each dimension's calibration range, which this server "
                            f"was not given (kbert serve --ranges FILE, or {RANGES_FILE} in the model's folder)",
                       field) if missing else None

    def openai_vectors(body, texts):
        refusal = without_ranges([body.embedding_type], "embedding_type")
        if not refusal and body.embedding_type in CALIBRATED and body.dimensions not in (None, width):
            refusal = Refusal(422, f"dimensions: {body.dimensions} values are scaled anew, and the calibration "
                                   f"ranges are the {width} dimensions' own; ask {body.embedding_type} vectors "
                                   "without dimensions, or binary ones", "dimensions")
        if refusal:
            return _refused(refusal)
        return task_vectors(texts, False, None, body.task, "input")

    def cohere_vectors(body, texts):
        wrong = [kind for kind in body.embedding_types or [] if kind not in PRECISIONS]
        refusal = (Refusal(422, f"embedding_types: {wrong[0]!r} is not one of {', '.join(PRECISIONS)}",
                           "embedding_types") if wrong else without_ranges(body.embedding_types or [],
                                                                              "embedding_types"))
        if refusal:
            return _refused(refusal)
        task = COHERE_TASKS.get(body.input_type)
        if task in service.model.adapter_models:  # a served task adapter of the input type: its own prompt
            return task_vectors(texts, body.truncate == "END", None, task, "texts")
        role = {"search_query": "query", "search_document": "document"}.get(body.input_type)
        prompt_name = service.model.prompt_name_for(role) if role else None
        return served(service.embed(batcher, texts, body.truncate == "END", prompt_name), "texts")

    def cohere_answer(body, texts, vectors, tokens):
        meta = {"api_version": {"version": "1"}, "billed_units": {"input_tokens": tokens}}
        if body.embedding_types is None:
            return {"id": str(uuid.uuid4()), "embeddings": vectors.tolist(), "texts": texts, "meta": meta,
                    "response_type": "embeddings_floats"}
        return {"id": str(uuid.uuid4()), "texts": texts, "meta": meta, "response_type": "embeddings_by_type",
                "embeddings": {kind: quantized(vectors, kind, service.model.ranges).tolist()
                               for kind in dict.fromkeys(body.embedding_types)}}

    def openai_answer(body, texts, vectors, tokens):
        vectors = service.model.truncated(vectors, body.dimensions)  # within 1..width: the request's schema
        vectors = quantized(vectors, body.embedding_type, service.model.ranges)
        # base64's bytes are little-endian wherever the server runs (a one-byte type has no order to change)
        vectors = vectors.astype(vectors.dtype.newbyteorder("<"), copy=False)
        encode = ((lambda vector: base64.b64encode(vector.tobytes()).decode("ascii"))
                  if body.encoding_format == "base64" else (lambda vector: vector.tolist()))
        return {"object": "list", "model": model_name,
                "data": [{"object": "embedding", "index": index, "embedding": encode(vector)}
                         for index, vector in enumerate(vectors)],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    batched_route(app, "/v1/embeddings", OpenAIRequest, "input", limits, "embed", openai_error, openai_vectors,
                  openai_answer,
                  "OpenAI's embeddings API: a vector per text, with the tokens used")
    batched_route(app, "/embed", TEIRequest, "inputs", limits, "embed", tei_error,
                  lambda body, texts: task_vectors(texts, body.truncate, body.prompt_name, body.task, "inputs"),
                  lambda body, texts, vectors, tokens: (unit_length(vectors) if body.normalize else vectors).tolist(),
                  "Text Embeddings Inference's embed API: a list of floats per input")

    batched_route(app, "/v1/embed", CohereRequest, "texts", limits, "embed", openai_error, cohere_vectors,
                  cohere_answer, "Cohere's embed API: vectors by type (float, int8, uint8, binary, ubinary)")

    def similarity_vectors(body, texts):
        parameters = body.parameters or SimilarityParameters()
        return task_vectors(texts, parameters.truncate, parameters.prompt_name, parameters.task, "inputs")

    def cosines(body, texts, vectors, tokens):
        vectors = unit_length(vectors)
        return (vectors[1:] @ vectors[0]).tolist()

    batched_route(app, "/similarity", SimilarityRequest, "inputs", limits, "embed", tei_error, similarity_vectors,
                  cosines, "Text Embeddings Inference's similarity API: each sentence's cosine with the source's",
                  texts_of=lambda body: [body.inputs.source_sentence, *body.inputs.sentences])
