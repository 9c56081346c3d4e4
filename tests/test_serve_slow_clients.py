"""`kbert serve` under slow, stalled and departing clients, and work refused before it is done (round 5 of
docs/reliability.md): half-sent requests are closed, a client gone mid-body costs one log line, the queue is
checked before a request is tokenized, a request nobody waits for is never run, and each refusal has its
API's shape."""

import asyncio
import json
import socket
import time
import urllib.parse

import pytest

from conftest import minilm_dir
from test_serve import running_server
from test_serve_embeddings import call

pytest.importorskip("fastapi", reason="pip install 'kbert[serve]'")


# --- the batcher: refuse first, drop what nobody waits for, count a batch once -----------------------

def test_a_full_queue_is_refused_before_the_request_is_tokenized():
    """Before the fix, each request was tokenized on the default thread pool (no bound) and only then refused."""
    from kbert.serving.batcher import Batcher, QueueFull

    tokenized = []

    async def main():
        batcher = Batcher(lambda texts, pairs=None: texts, max_batch=4, max_wait_ms=1, max_queue=4)
        batcher.waiting = 4  # as if four texts were queued
        with pytest.raises(QueueFull, match="4 texts are waiting, and 2 more would pass the server's queue of 4"):
            await batcher.prepare(2, tokenized.append, "tokenized")
        batcher.waiting = 0
        assert await batcher.prepare(2, lambda text: text.upper(), "ok") == "OK"
        assert batcher.preparing == 0
        await batcher.close()

    asyncio.run(main())
    assert tokenized == []


def test_a_request_that_timed_out_is_never_run():
    """Before the fix, a request whose client had been answered 503 (timed out) still ran with a later batch."""
    from kbert.serving.batcher import Batcher, QueueFull

    ran = []

    def slow(texts, pairs=None):
        ran.extend(texts)
        time.sleep(0.3)
        return texts

    async def main():
        batcher = Batcher(slow, max_batch=1, max_wait_ms=0, max_queue=8, timeout_s=0.1, instances=1)
        first = asyncio.ensure_future(batcher.predict(["first"]))
        await asyncio.sleep(0.01)  # the first runs; the second waits behind it, and times out
        with pytest.raises(QueueFull, match="no answer within 0.1 s"):
            await batcher.predict(["second"])
        assert batcher.waiting == 0 and not batcher.queue
        with pytest.raises(QueueFull):
            await first
        await batcher.close()

    asyncio.run(main())
    assert ran == ["first"]


def test_a_failed_batch_run_again_request_by_request_is_counted_once():
    """Before the fix, each request of a failed batch was counted again in the metrics when re-run alone."""
    from kbert.errors import KbertError
    from kbert.serving.batcher import Batcher

    observed = []

    def predictor(texts, pairs=None):
        if "bad" in texts:
            raise KbertError("a bad text")
        return texts

    async def main():
        batcher = Batcher(predictor, max_batch=8, max_wait_ms=50, max_queue=16, observe=lambda *args: observed.append(args))
        answers = await asyncio.gather(batcher.predict(["a"]), batcher.predict(["bad"]), batcher.predict(["b", "c"]),
                                       return_exceptions=True)
        await batcher.close()
        return answers, batcher.batches

    answers, batches = asyncio.run(main())
    assert answers[0] == ["a"] and answers[2] == ["b", "c"] and isinstance(answers[1], KbertError)
    assert observed == [(4, 4)] and batches == 1


# --- request checks in the API's own terms --------------------------------------------------------

@pytest.fixture(scope="module")
def test_client():
    from starlette.testclient import TestClient

    from kbert.serving import ServerLimits, create_app
    from kbert.embeddings.embedder import Embedder
    from kbert.tasks.predictors import PredictionSettings, embedding_predictor

    embedder = Embedder.load(minilm_dir())
    app = create_app(embedding_predictor("minilm", PredictionSettings(), embedder),
                     ServerLimits(max_wait_ms=1, max_body_bytes=600_000))
    with TestClient(app) as client:
        yield client


@pytest.mark.parametrize("dimensions", ["8", True, 8.5])
def test_dimensions_must_be_a_number(test_client, dimensions):
    """Before the fix, "8" was taken as 8 and true as 1."""
    answer = test_client.post("/v1/embeddings", json={"input": "a text", "dimensions": dimensions})
    assert answer.status_code == 422 and answer.json()["error"]["param"] == "dimensions"


def test_an_unknown_prompt_name_is_not_echoed_whole(test_client):
    answer = test_client.post("/embed", json={"inputs": "a text", "prompt_name": "q" * 500_000})
    assert answer.status_code == 422 and len(answer.json()["error"]) < 400
    assert "(500000 characters)" in answer.json()["error"]


def test_zero_width_characters_alone_are_refused_as_blank(test_client):
    answer = test_client.post("/embed", json={"inputs": ["a text", "\u200b\u200d\ufeff"]})
    assert answer.status_code == 422 and answer.json()["error"].startswith("inputs[1]: blank")


@pytest.mark.parametrize("path, shape", [("/v1/embeddings", "openai"), ("/embed", "tei"), ("/v1/predict", "kbert")])
def test_an_oversized_body_is_refused_in_the_routes_error_shape_and_counted_under_it(test_client, path, shape):
    """Before the fix, the 413 was `{"detail"}` on every route, and counted under the route `unmatched`."""
    answer = test_client.post(path, content=b"x" * 700_000, headers={"Content-Type": "application/json"})
    assert answer.status_code == 413
    body = answer.json()
    message = {"openai": lambda: body["error"]["message"], "tei": lambda: body["error"],
               "kbert": lambda: body["detail"]}[shape]()
    assert "over this server's limit of 600000 bytes" in message
    metrics = test_client.get("/metrics").text
    assert f'kbert_requests_total{{route="{path}",status="413"}}' in metrics


# --- slow and departing clients, on a real server --------------------------------------------------

@pytest.fixture(scope="module")
def server():
    with running_server(minilm_dir(), "--request-timeout-s", "2", "--max-wait-ms", "1") as (url, process):
        yield url, process


def connect(url: str) -> socket.socket:
    address = urllib.parse.urlsplit(url)
    return socket.create_connection((address.hostname, address.port), timeout=10)


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes `sock` (or answers and closes) within `seconds`."""
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
        return True
    except (socket.timeout, TimeoutError):
        return False
    except ConnectionResetError:
        return True


def test_half_sent_requests_are_closed_after_the_request_timeout(server):
    """Before the fix, 100 connections with partial headers or a short body were all still open after 150 s."""
    url, _ = server
    silent = [connect(url) for _ in range(3)]
    partial_headers = [connect(url) for _ in range(3)]
    short_bodies = [connect(url) for _ in range(3)]
    for sock in partial_headers:
        sock.sendall(b"POST /embed HTTP/1.1\r\nHost: kbert\r\nContent-Ty")
    for sock in short_bodies:
        sock.sendall(b"POST /embed HTTP/1.1\r\nHost: kbert\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"inputs\": ")
    started = time.perf_counter()
    assert all(closed_within(sock, 8) for sock in silent + partial_headers + short_bodies)
    assert time.perf_counter() - started < 8
    assert call(url, "/embed", {"inputs": "still serving"})[0] == 200  # a whole request is still answered


def test_a_request_sent_slowly_but_within_the_timeout_is_answered(server):
    url, _ = server
    sock = connect(url)
    body = json.dumps({"inputs": "slow but on time"}).encode()
    request = (b"POST /embed HTTP/1.1\r\nHost: kbert\r\nContent-Type: application/json\r\nConnection: close\r\n"
               b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    for start in range(0, len(request), 20):
        sock.sendall(request[start:start + 20])
        time.sleep(0.02)
    sock.settimeout(30)
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 200")


def test_a_client_gone_mid_body_leaves_no_traceback(server):
    """Before the fix, each such client logged a 60-line ClientDisconnect traceback."""
    url, process = server
    for _ in range(5):
        sock = connect(url)
        sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: kbert\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"input\": ")
        time.sleep(0.1)
        sock.close()
    assert call(url, "/embed", {"inputs": "still serving"})[0] == 200
    process.terminate()
    process.wait(timeout=60)
    log = process.stderr.read()
    assert "Traceback" not in log and "ClientDisconnect" not in log, log[-3000:]
