"""`kbert serve` of an embedding model: the real all-MiniLM-L6-v2 on a loopback port, asked by the real
`openai` client and by raw HTTP in Text Embeddings Inference's form; `/info` and `/metrics`.

The vectors served are compared with `Embedder.encode` in this process (itself within 1e-5 of
sentence-transformers, tests/test_embeddings.py).
"""

import asyncio
import base64
import concurrent.futures
import json
import urllib.error
import urllib.request

import numpy as np
import pytest

from conftest import minilm_dir
from test_serve import running_server

pytest.importorskip("fastapi", reason="kbert serve needs FastAPI and uvicorn: pip install 'kbert[serve]'")
openai = pytest.importorskip("openai", reason="the OpenAI client is a test extra: pip install -e '.[test]'")
prometheus_parser = pytest.importorskip("prometheus_client.parser", reason="pip install 'kbert[serve]'")

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
             "Someone in a gorilla costume is playing a set of drums.", "好"]
LONG = "word " * 400  # 400 word pieces and two special tokens: more than MiniLM's max_seq_length of 256


@pytest.mark.parametrize("name, status, message, field", [("TooLong", 413, "input[0]: 300 tokens", "input"),
                                                           ("QueueFull", 503, "[0]: 300 tokens", None),
                                                           ("KbertError", 422, "[0]: 300 tokens", "input")])
def test_a_refused_batch_call_is_answered_with_its_status(name, status, message, field):
    from kbert import errors
    from kbert.serving import batcher, services
    from kbert.serving.refusals import Refusal, served

    kinds = {"TooLong": services.TooLong, "QueueFull": batcher.QueueFull, "KbertError": errors.KbertError}

    async def refused():
        raise kinds[name]("[0]: 300 tokens")

    async def answered():
        return "rows", 3

    assert asyncio.run(served(refused(), "input")) == (None, Refusal(status, message, field))
    assert asyncio.run(served(answered(), "input")) == ("rows", 3)


@pytest.fixture(scope="module")
def embedder():
    from kbert.embeddings.embedder import Embedder

    return Embedder.load(minilm_dir())


@pytest.fixture(scope="module")
def ranges(tmp_path_factory):
    """Calibration ranges over SENTENCES, as `kbert embed --calibrate` writes them."""
    from kbert.cli.main import main

    folder = tmp_path_factory.mktemp("calibration")
    (folder / "texts.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    assert main(["embed", "--model", str(minilm_dir()), str(folder / "texts.txt"), "--calibrate",
                 str(folder / "ranges.json")]) == 0
    return folder / "ranges.json"


@pytest.fixture(scope="module")
def server(ranges):
    with running_server(minilm_dir(), "--max-batch", "8", "--max-batch-tokens", "512", "--max-wait-ms", "20",
                        "--ranges", str(ranges)) as (url, _):
        yield url


def call(url: str, path: str, body=None, raw: bool = False):
    """`(status, answer)` of a GET (no body) or a POST of `body` (JSON, or bytes as they are with `raw`)."""
    data = None if body is None else body if raw else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method="GET" if body is None else "POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            text = response.read().decode()
            return response.status, text if path == "/metrics" else json.loads(text)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def client(url: str):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def test_the_openai_client_gets_the_models_vectors_and_usage(server, embedder):
    expected = embedder.encode(SENTENCES)
    answer = client(server).embeddings.create(model="all-MiniLM-L6-v2", input=SENTENCES)  # base64, by default
    served = np.array([item.embedding for item in answer.data], np.float32)
    assert [item.index for item in answer.data] == list(range(len(SENTENCES)))
    np.testing.assert_allclose(served, expected, atol=1e-5)
    tokens = sum(len(ids) for ids, _ in embedder.tokenizer.encode_all(SENTENCES))
    assert answer.usage.prompt_tokens == answer.usage.total_tokens == tokens
    as_floats = client(server).embeddings.create(model="m", input=SENTENCES[0], encoding_format="float")
    np.testing.assert_allclose(as_floats.data[0].embedding, expected[0], atol=1e-5)


def test_dimensions_keep_the_first_values_at_unit_length(server, embedder):
    answer = client(server).embeddings.create(model="m", input=SENTENCES[:2], dimensions=128, encoding_format="float")
    vectors = np.array([item.embedding for item in answer.data])
    assert vectors.shape == (2, 128)
    head = embedder.encode(SENTENCES[:2])[:, :128]
    np.testing.assert_allclose(vectors, head / np.linalg.norm(head, axis=1, keepdims=True), atol=1e-5)


def test_base64_is_little_endian_float32(server, embedder):
    status, answer = call(server, "/v1/embeddings", {"input": "好", "encoding_format": "base64"})
    assert status == 200 and answer["object"] == "list" and answer["data"][0]["object"] == "embedding"
    vector = np.frombuffer(base64.b64decode(answer["data"][0]["embedding"]), "<f4")
    np.testing.assert_allclose(vector, embedder.encode(["好"])[0], atol=1e-5)


@pytest.mark.parametrize("body, status, message, param", [
    ({"input": []}, 422, "input: expected at least one text", "input"),
    ({"input": ["fine", "  "]}, 422, "input[1]: blank", "input"),
    ({"input": [[101, 102]]}, 422, "token ids are not taken here", "input"),
    ({"input": "x", "dimensions": 0}, 422, "dimensions", "dimensions"),
    ({"input": "x", "dimensions": 385}, 422, "dimensions", "dimensions"),
    ({"input": "x", "encoding_format": "int8"}, 422, "encoding_format", "encoding_format"),
    ({"input": LONG}, 413, "input[0]: 402 tokens, more than the model's 256", "input"),
    ({"text": "x"}, 422, "input: Field required", "input"),
    (["x"], 422, "body: Input should be a valid dictionary", None),
])
def test_bad_openai_requests_get_openais_error_shape(server, body, status, message, param):
    answer_status, answer = call(server, "/v1/embeddings", body)
    assert answer_status == status
    assert message in answer["error"]["message"] and answer["error"]["type"] == "invalid_request_error"
    assert answer["error"]["param"] == param  # the field at fault, as OpenAI's API names it


def test_the_openai_client_raises_on_a_refusal(server):
    with pytest.raises(openai.UnprocessableEntityError, match="blank"):
        client(server).embeddings.create(model="m", input=[" "])


def test_tei_embed_normalizes_and_truncates_on_request(server, embedder):
    status, vectors = call(server, "/embed", {"inputs": SENTENCES})
    assert status == 200
    np.testing.assert_allclose(np.array(vectors), embedder.encode(SENTENCES), atol=1e-5)
    status, answer = call(server, "/embed", {"inputs": LONG})
    assert status == 413 and "inputs[0]: 402 tokens" in answer["error"] and answer["error_type"] == "Validation"
    status, vectors = call(server, "/embed", {"inputs": LONG, "truncate": True})
    assert status == 200
    np.testing.assert_allclose(vectors[0], embedder.encode([LONG])[0], atol=1e-5)  # cut as encode cuts it
    assert call(server, "/embed", b"{not json", raw=True)[0] == 400
    # The character cap is the model's: 50 per token of its input; past it a text asked to be cut is cut, as TEI's
    cap = call(server, "/info", None)[1]["max_text_chars"]
    assert cap == 50 * embedder.maxlen
    huge = "word " * (cap // 5 + 100)
    status, answer = call(server, "/embed", {"inputs": huge})
    assert status == 413 and f"more than this server's limit of {cap} (--max-text-chars)" in answer["error"]
    status, vectors = call(server, "/embed", {"inputs": huge, "truncate": True})
    assert status == 200
    np.testing.assert_allclose(vectors[0], embedder.encode([huge])[0], atol=1e-5)


def test_cohere_embed_gives_each_type_with_the_servers_calibration(server, embedder, ranges):
    from kbert.embeddings.precision import load_ranges, quantized

    types = ["float", "int8", "uint8", "binary", "ubinary"]
    status, answer = call(server, "/v1/embed", {"texts": SENTENCES, "model": "m", "embedding_types": types})
    vectors = embedder.encode(SENTENCES)
    bounds = load_ranges(ranges, 384)
    assert status == 200 and answer["response_type"] == "embeddings_by_type" and answer["texts"] == SENTENCES
    assert answer["meta"]["billed_units"]["input_tokens"] == sum(len(ids) for ids, _ in
                                                                 embedder.tokenizer.encode_all(SENTENCES))
    served = np.array(answer["embeddings"]["float"], np.float32)  # float32 survives JSON exactly
    np.testing.assert_allclose(served, vectors, atol=1e-5)
    for kind in types[1:]:
        np.testing.assert_array_equal(answer["embeddings"][kind], quantized(served, kind, bounds))
    status, answer = call(server, "/v1/embed", {"texts": SENTENCES[:1]})
    assert status == 200 and answer["response_type"] == "embeddings_floats"
    np.testing.assert_allclose(answer["embeddings"], vectors[:1], atol=1e-5)
    status, answer = call(server, "/v1/embed", {"texts": [LONG], "truncate": "NONE"})
    assert status == 413 and answer["error"]["param"] == "texts"
    status, answer = call(server, "/v1/embed", {"texts": ["a"], "embedding_types": ["int4"]})
    assert status == 422 and answer["error"]["message"].startswith("embedding_types: 'int4' is not one of float, ")


def test_openai_embedding_type_gives_the_quantized_values_as_numbers_or_bytes(server, embedder, ranges):
    """kbert's `embedding_type` on OpenAI's route: Cohere's precisions, as integers with `float` and one byte each
    with `base64`; int8 and uint8 by the server's calibration, binary of shortened vectors too."""
    from kbert.embeddings.precision import load_ranges, quantized

    vectors = embedder.encode(SENTENCES)
    for kind, dtype in (("int8", np.int8), ("uint8", np.uint8), ("binary", np.int8), ("ubinary", np.uint8)):
        expected = quantized(vectors, kind, load_ranges(ranges, 384))
        numbers = client(server).embeddings.create(model="m", input=SENTENCES, encoding_format="float",
                                                   extra_body={"embedding_type": kind})
        np.testing.assert_array_equal([item.embedding for item in numbers.data], expected)
        status, answer = call(server, "/v1/embeddings", {"input": SENTENCES, "encoding_format": "base64",
                                                         "embedding_type": kind})
        assert status == 200
        np.testing.assert_array_equal([np.frombuffer(base64.b64decode(item["embedding"]), dtype)
                                       for item in answer["data"]], expected)
    status, answer = call(server, "/v1/embeddings", {"input": SENTENCES, "embedding_type": "ubinary",
                                                     "dimensions": 128, "encoding_format": "float"})
    np.testing.assert_array_equal([item["embedding"] for item in answer["data"]],
                                  np.packbits(vectors[:, :128] > 0, axis=1))
    for body, param in (({"embedding_type": "int4"}, "embedding_type"),
                        ({"embedding_type": "int8", "dimensions": 128}, "dimensions")):
        status, answer = call(server, "/v1/embeddings", {"input": "x", **body})
        assert status == 422 and answer["error"]["param"] == param, answer


def test_tei_similarity_is_each_sentences_cosine_with_the_source(server, embedder):
    status, scores = call(server, "/similarity", {"inputs": {"source_sentence": SENTENCES[0],
                                                              "sentences": SENTENCES[1:]}})
    vectors = embedder.encode(SENTENCES)
    assert status == 200 and len(scores) == len(SENTENCES) - 1
    np.testing.assert_allclose(scores, vectors[1:] @ vectors[0], atol=1e-5)
    status, answer = call(server, "/similarity", {"inputs": {"source_sentence": SENTENCES[0], "sentences": [LONG]}})
    assert status == 413 and "inputs[1]: 402 tokens" in answer["error"] and answer["error_type"] == "Validation"
    status, answer = call(server, "/similarity", {"inputs": {"sentences": SENTENCES}})
    assert status == 422 and "inputs.source_sentence: Field required" in answer["error"]


def test_tei_tokenize_gives_the_tokenizer_files_tokens_and_byte_spans(server):
    """Against the `tokenizers` library on the folder's own tokenizer.json: the ids with [CLS] and [SEP], each
    content token's UTF-8 byte span (TEI's offsets), its text, and the special tokens' names."""
    from tokenizers import Tokenizer as Backend

    texts = ["Café naïve 语言 test.", "A man is eating food."]
    status, rows = call(server, "/tokenize", {"inputs": texts})
    assert status == 200 and len(rows) == 2
    reference = Backend.from_file(str(minilm_dir() / "tokenizer.json"))
    reference.no_padding()  # the file pads to 128
    for text, tokens in zip(texts, rows):
        encoding = reference.encode(text)
        assert [token["id"] for token in tokens] == encoding.ids
        assert [token["special"] for token in tokens] == [bool(mask) for mask in encoding.special_tokens_mask]
        data = text.encode("utf-8")
        for token in tokens:
            if token["special"]:
                assert token["start"] is None and token["text"] in ("[CLS]", "[SEP]")
            else:
                assert data[token["start"]:token["stop"]].decode() == token["text"]
    assert rows[0][1] == {"id": reference.token_to_id("cafe"), "text": "Café", "special": False, "start": 0,
                          "stop": 5}
    status, rows = call(server, "/tokenize", {"inputs": "a b", "add_special_tokens": False})
    assert status == 200 and [token["special"] for token in rows[0]] == [False, False]
    status, answer = call(server, "/tokenize", {"inputs": "a", "prompt_name": "query"})
    assert status == 422 and "prompt_name 'query'" in answer["error"] and "no prompts" in answer["error"]


def test_tei_decode_gives_the_text_of_ids_and_names_a_wrong_id(server, embedder):
    ids = [embedder.tokenizer.encode_all(SENTENCES[:2])[index][0] for index in range(2)]
    status, texts = call(server, "/decode", {"ids": ids})
    assert status == 200 and texts == ["a man is eating food.", "a man is eating a piece of bread."]
    status, texts = call(server, "/decode", {"ids": ids[0], "skip_special_tokens": False})
    assert status == 200 and texts == ["[CLS] a man is eating food. [SEP]"]
    status, answer = call(server, "/decode", {"ids": [[101, 30522]]})
    assert status == 422 and answer["error"].startswith("ids[0][1]: 30522 is not a token id of this model (0 to")
    status, answer = call(server, "/decode", {"ids": [101, True]})
    assert status == 422 and answer["error_type"] == "Validation"
    assert call(server, "/decode", {"ids": []})[0] == 422


def test_concurrent_clients_each_get_their_own_vectors(server, embedder):
    expected = embedder.encode(SENTENCES)

    def ask(index):
        answer = client(server).embeddings.create(model="m", input=[SENTENCES[index % len(SENTENCES)]])
        return index, np.array(answer.data[0].embedding)

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        for index, vector in pool.map(ask, range(48)):
            np.testing.assert_allclose(vector, expected[index % len(SENTENCES)], atol=1e-5)


def test_predict_rows_of_an_embedding_model(server, embedder):
    status, answer = call(server, "/v1/predict", {"texts": SENTENCES[:2]})
    assert status == 200 and [row["text"] for row in answer["predictions"]] == SENTENCES[:2]
    np.testing.assert_allclose([row["embedding"] for row in answer["predictions"]], embedder.encode(SENTENCES[:2]),
                               atol=1e-5)


def test_the_openai_client_lists_the_one_model_served(server):
    listed = client(server).models.list().data
    assert [(model.id, model.object, model.owned_by) for model in listed] == [(str(minilm_dir()), "model", "kbert")]


def test_info_describes_the_model_and_limits(server):
    status, info = call(server, "/info")
    assert status == 200
    assert (info["task"], info["dimensions"], info["max_input_length"]) == ("embed", 384, 256)
    assert (info["max_batch_texts"], info["max_batch_tokens"]) == (8, 512)


def test_metrics_count_requests_tokens_and_batches(server, embedder):
    def samples():
        text = call(server, "/metrics")[1]
        return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
                for family in prometheus_parser.text_string_to_metric_families(text) for sample in family.samples}

    before = samples()
    client(server).embeddings.create(model="m", input=SENTENCES)
    call(server, "/v1/embeddings", {"input": []})
    after = samples()

    def grew(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    assert grew("kbert_requests_total", route="/v1/embeddings", status="200") == 1
    assert grew("kbert_requests_total", route="/v1/embeddings", status="422") == 1
    assert grew("kbert_tokens_total") == sum(len(ids) for ids, _ in embedder.tokenizer.encode_all(SENTENCES))
    assert grew("kbert_texts_total") == len(SENTENCES)
    assert grew("kbert_batch_size_count") == 1
    assert after[("kbert_queue_texts", ())] == 0
    assert grew("kbert_request_duration_seconds_count", route="/v1/embeddings") == 2


def test_the_models_default_prompt_is_served_and_tei_picks_another_by_name(embedder):
    """A model with prompts (e5's kind), served in this process: both routes put its default prompt before
    each text, as `Embedder.encode` does; TEI's `prompt_name` picks another, and an unknown one is a 422."""
    import dataclasses

    from starlette.testclient import TestClient

    from kbert.serving import ServerLimits, create_app
    from kbert.tasks.predictors import PredictionSettings, embedding_predictor

    prompted = dataclasses.replace(embedder, prompts={"query": "query: ", "passage": "passage: "},
                                   default_prompt_name="query")
    app = create_app(embedding_predictor("e5-like", PredictionSettings(), prompted), ServerLimits(max_wait_ms=1))
    with TestClient(app) as test_client:
        openai_answer = test_client.post("/v1/embeddings", json={"input": SENTENCES, "encoding_format": "float"})
        tei_answer = test_client.post("/embed", json={"inputs": SENTENCES, "prompt_name": "passage"})
        unknown = test_client.post("/embed", json={"inputs": SENTENCES, "prompt_name": "document"})
        cohere = test_client.post("/v1/embed", json={"texts": SENTENCES[:2], "input_type": "search_document",
                                                     "embedding_types": ["float"]})
        uncalibrated = test_client.post("/v1/embed", json={"texts": SENTENCES[:1], "embedding_types": ["int8"]})
        uncalibrated_openai = test_client.post("/v1/embeddings", json={"input": "a", "embedding_type": "uint8"})
        tokenized = test_client.post("/tokenize", json={"inputs": "a", "prompt_name": "passage"})
    # Cohere's search_document takes the document prompt (sentence-transformers' encode_document: "passage");
    # a server started without --ranges has no int8; /tokenize places the tokens in the prompted text.
    np.testing.assert_allclose(cohere.json()["embeddings"]["float"],
                               embedder.encode(["passage: " + text for text in SENTENCES[:2]]), atol=1e-5)
    assert uncalibrated.status_code == 422 and "kbert serve --ranges FILE" in uncalibrated.json()["error"]["message"]
    assert uncalibrated_openai.status_code == 422 and uncalibrated_openai.json()["error"]["message"].startswith(
        "embedding_type: uint8 needs each dimension's calibration range")
    assert [(token["text"], token["start"]) for token in tokenized.json()[0][1:-1]] == [
        ("passage", 0), (":", 7), ("a", 9)]
    np.testing.assert_allclose([row["embedding"] for row in openai_answer.json()["data"]],
                               embedder.encode(["query: " + text for text in SENTENCES]), atol=1e-5)
    tokens = sum(len(ids) for ids, _ in embedder.tokenizer.encode_all(["query: " + text for text in SENTENCES]))
    assert openai_answer.json()["usage"]["prompt_tokens"] == tokens  # the prompt's tokens are read, so counted
    np.testing.assert_allclose(tei_answer.json(), embedder.encode(["passage: " + text for text in SENTENCES]),
                               atol=1e-5)
    assert unknown.status_code == 422 and "has the prompts 'query', 'passage'" \
        in unknown.json()["error"]
