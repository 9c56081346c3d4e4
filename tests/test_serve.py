"""`kbert serve`: a real server on an ephemeral loopback port, real HTTP requests.

Each task's server answers what `kbert predict --json` prints; bad requests
get a 4xx that says what was wrong; a full queue answers 503; a client that
goes away, and SIGTERM under load, lose no accepted request.
"""

import asyncio
import concurrent.futures
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from conftest import CONFIGS, REPO, count_opens, shared_path, write_task_data
from kbert.cli.main import main

pytest.importorskip("fastapi", reason="kbert serve needs FastAPI and uvicorn: pip install 'kbert[serve]'")

TEXTS = ["这家酒店很好，下次还来", "张三去北京大学看望李四", "房间太小了", "[MASK]天天气很好"]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    """A tiny model directory of each task kbert trains, and the texts it is asked about."""
    root = tmp_path_factory.mktemp("served")
    write_task_data(root)
    common = ["--config", str(CONFIGS / "bert_tiny.json"), "--vocab", str(shared_path("vocab", "chinese_vocab.txt")),
              "--epochs", "1", "--batch-size", "16", "--maxlen", "32"]
    for task, data, extra in (("classify", "reviews.tsv", []), ("ner", "tagged.bmes", ["--head", "crf"]),
                              ("seq2seq", "pairs.tsv", [])):
        assert main(["train", "--task", task, "--train", str(root / data), "--out", str(root / task),
                     *common, *extra]) == 0
    assert main(["pretrain", "--train", str(root / "corpus.txt"), "--out", str(root / "mlm"), *common]) == 0
    return root


@contextlib.contextmanager
def running_server(model_dir, *flags):
    """`kbert serve MODEL_DIR --port 0 ...` in its own process; yields (url, process)."""
    process = subprocess.Popen([sys.executable, "-m", "kbert", "serve", str(model_dir), "--port", "0", *flags],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO),
                               env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        line = process.stdout.readline()  # the server prints its address once it listens
        match = re.search(r"on (http://[\d.]+:\d+) ", line)
        assert match, f"no address in {line!r}; stderr: {process.stderr.read()[-3000:] if process.poll() is not None else ''}"
        yield match.group(1), process
    finally:
        if process.poll() is None:
            process.terminate()
        process.wait(timeout=60)
        process.stdout.close()
        process.stderr.close()


def post(url, body, raw: bool = False, path: str = "/v1/predict"):
    """`(status, answer)` of a POST of `body` (JSON, or bytes as they are with `raw`) to `path`."""
    data = body if raw else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def predicted_by_cli(model_dir, texts, capsys, *options) -> list:
    capsys.readouterr()
    source = model_dir.parent / f"{model_dir.name}-texts.txt"
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    assert main(["predict", "--json", "--model", str(model_dir), str(source), *options]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def assert_same_rows(served, printed):
    """Equal rows; probabilities to float32's noise (a batch of other texts pads otherwise)."""
    assert len(served) == len(printed)
    for mine, theirs in zip(served, printed):
        assert sorted(mine) == sorted(theirs)
        for key, value in mine.items():
            if isinstance(value, (float, dict)):  # a classifier's probabilities: a float, and each label's
                assert value == pytest.approx(theirs[key], abs=1e-5)
            elif key != "masks":
                assert value == theirs[key], key
        if "masks" in mine:
            assert [[c["token"] for c in m["candidates"]] for m in mine["masks"]] == \
                [[c["token"] for c in m["candidates"]] for m in theirs["masks"]]


@pytest.mark.parametrize("task", ["classify", "ner", "seq2seq", "mlm"])
def test_a_model_directory_is_read_once_to_serve_it(model_dirs, task, monkeypatch):
    """What the server loads (`load_predictor`): each file of a `kbert train` directory opened once (before issue
    86, `training.json` twice: once to learn the task, once to load the model)."""
    from kbert.tasks.predictors import load_predictor

    opened = count_opens(monkeypatch, model_dirs / task)
    assert load_predictor(str(model_dirs / task)).task == task
    assert "training.json" in opened and set(opened.values()) == {1}, dict(opened)


@pytest.mark.parametrize("task", ["classify", "ner", "seq2seq", "mlm"])
def test_each_task_answers_what_predict_prints(model_dirs, task, capsys):
    texts = [text for text in TEXTS if ("[MASK]" in text) == (task == "mlm")]
    with running_server(model_dirs / task) as (url, process):
        with urllib.request.urlopen(url + "/health", timeout=30) as response:
            assert response.status == 200 and json.loads(response.read())["task"] == task
        # Each text in a request of its own, all at once: the batcher gathers them.
        with concurrent.futures.ThreadPoolExecutor(len(texts)) as pool:
            answers = list(pool.map(lambda text: post(url, {"texts": [text]}), texts))
        assert all(status == 200 for status, _ in answers), answers
        served = [answer["predictions"][0] for _, answer in answers]
        schema = json.loads(urllib.request.urlopen(url + "/openapi.json", timeout=30).read())
        assert {"/health", "/v1/predict"} <= set(schema["paths"])
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        log = process.stderr.read()
    assert_same_rows(served, predicted_by_cli(model_dirs / task, texts, capsys))
    # Two batches at once (--instances' default), each on its share of the cores; seq2seq and JAX one at a time.
    one_at_a_time = task == "seq2seq" or os.environ.get("KERAS_BACKEND") == "jax"
    assert re.search(r"1 batch at once, on the backend's threads \(" if one_at_a_time
                     else r"2 batches at once, on \d+ threads each", log), log[-2000:]


def test_an_int8_classifier_answers_close_to_float32(model_dirs, capsys):
    pytest.importorskip("tf2onnx", reason="--quantize int8 serves an ONNX file: pip install 'kbert[onnx]'")
    texts = [text for text in TEXTS if "[MASK]" not in text]
    with running_server(model_dirs / "classify", "--quantize", "int8") as (url, process):
        status, answer = post(url, {"texts": texts})
        process.terminate()
        process.wait(timeout=60)
        assert "Quantization parameters" not in process.stderr.read()  # the quantizer's lines, one per weight
    assert status == 200
    expected = predicted_by_cli(model_dirs / "classify", texts, capsys)
    labels = sorted({row["label"] for row in expected} | {row["label"] for row in answer["predictions"]})

    def first_label_probability(row):  # a two-label classifier: the first label's probability
        return row["probability"] if row["label"] == labels[0] else 1 - row["probability"]

    assert [row["text"] for row in answer["predictions"]] == texts
    np.testing.assert_allclose([first_label_probability(row) for row in answer["predictions"]],
                               [first_label_probability(row) for row in expected], atol=0.05)
    for task in ("ner", "seq2seq"):
        for command in (["serve", str(model_dirs / task)], ["predict", "--model", str(model_dirs / task), "-"]):
            assert main([*command, "--quantize", "int8"]) == 2
            assert (f"--quantize int8 runs classifiers, embedding models and rerankers (an ONNX file); "
                    f"{model_dirs / task} is a {task} model") in capsys.readouterr().err


def test_onnxruntime_serves_a_classifier_as_keras_predicts_it(model_dirs, capsys):
    """`--runtime onnxruntime`: the float32 ONNX export answers what `kbert predict` prints (probabilities
    within 1e-5), served and printed by `kbert predict --runtime onnxruntime`; with --dtype bfloat16 it is refused
    before anything loads."""
    pytest.importorskip("tf2onnx", reason="--runtime onnxruntime serves an ONNX file: pip install 'kbert[onnx]'")
    texts = [text for text in TEXTS if "[MASK]" not in text]
    with running_server(model_dirs / "classify", "--runtime", "onnxruntime") as (url, _):
        with concurrent.futures.ThreadPoolExecutor(len(texts)) as pool:  # gathered into batches, as under load
            answers = list(pool.map(lambda text: post(url, {"texts": [text]}), texts))
    assert all(status == 200 for status, _ in answers), answers
    served = [answer["predictions"][0] for _, answer in answers]
    expected = predicted_by_cli(model_dirs / "classify", texts, capsys)
    assert [(row["text"], row["label"]) for row in served] == [(row["text"], row["label"]) for row in expected]
    np.testing.assert_allclose([row["probability"] for row in served], [row["probability"] for row in expected],
                               atol=1e-5)
    printed = predicted_by_cli(model_dirs / "classify", texts, capsys, "--runtime", "onnxruntime")
    assert [row["label"] for row in printed] == [row["label"] for row in expected]
    np.testing.assert_allclose([row["probability"] for row in printed], [row["probability"] for row in expected],
                               atol=1e-5)
    assert main(["serve", str(model_dirs / "classify"), "--runtime", "onnxruntime", "--dtype", "bfloat16"]) == 2
    assert "--runtime onnxruntime with --dtype bfloat16: the ONNX file is made from the float32 model" in capsys.readouterr().err


def test_bad_requests_get_4xx_that_say_what_was_wrong(model_dirs):
    with running_server(model_dirs / "classify", "--max-texts", "4", "--max-text-chars", "50",
                        "--max-body-bytes", "2000") as (url, process):
        cases = [
            (b"not json", 400, "the body is not JSON"),
            ({"texts": "a text"}, 422, "texts: Input should be a valid list"),
            ({"text": ["a"]}, 422, "texts: Field required"),
            ({"texts": []}, 422, "expected at least one text"),
            ({"texts": ["好", "  "]}, 422, "texts[1]: blank"),
            ({"texts": ["好"] * 5}, 413, "5 texts, more than this server's limit of 4 (--max-texts)"),
            ({"texts": ["好" * 51]}, 413, "texts[0]: 51 characters, more than this server's limit of 50"),
            ({"texts": ["好" * 40] * 4 + ["x" * 2000]}, 413, "over this server's limit of 2000 bytes"),
            ({"texts": ["好"], "text_pairs": ["a", "b"]}, 422, "text_pairs: one per text"),
            ({"texts": ["好"], "text_pairs": [" "]}, 422, "text_pairs[0]: blank"),
            (b'{"texts": ["\\ud800abc"]}', 422, "texts[0]: a lone surrogate at character 0 is not text"),
            (b'{"texts": ["ok"], "text_pairs": ["a\\udfff"]}', 422, "text_pairs[0]: a lone surrogate at character 1"),
            (b"[" * 1900, 400, "the body is JSON nested too deeply"),
        ]
        for body, status, message in cases:
            got, answer = post(url, body, raw=isinstance(body, bytes))
            assert got == status and message in answer["detail"], (body, got, answer)
        assert post(url, {"texts": ["好"]})[0] == 200  # still serving
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        log = process.stderr.read()
    assert len(re.findall(r"POST /v1/predict (\d+)", log)) == len(cases) + 1  # a log line a request
    assert "Traceback" not in log


def test_a_full_queue_answers_503_and_the_accepted_request_is_answered(model_dirs):
    # A batch waits 1.5 s for company: the first request fills the queue of 2 texts meanwhile.
    with running_server(model_dirs / "classify", "--max-queue", "2", "--max-wait-ms", "1500") as (url, _):
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            first = pool.submit(post, url, {"texts": ["好", "差"]})
            time.sleep(0.5)
            status, answer = post(url, {"texts": ["还行"]})
            assert status == 503 and "--max-queue" in answer["detail"]
            assert first.result()[0] == 200 and len(first.result()[1]["predictions"]) == 2


def test_a_client_gone_mid_request_and_sigterm_under_load_lose_nothing(model_dirs):
    with running_server(model_dirs / "classify", "--max-wait-ms", "300") as (url, process):
        host, port = url[len("http://"):].split(":")
        body = json.dumps({"texts": ["好"] * 8}).encode()
        with socket.create_connection((host, int(port))) as gone:  # sends its request and leaves
            gone.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        assert post(url, {"texts": ["好"]})[0] == 200
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            answers = [pool.submit(post, url, {"texts": [TEXTS[index % 3]] * (1 + index % 3)}) for index in range(12)]
            time.sleep(0.15)  # accepted, and waiting for their batches
            process.send_signal(signal.SIGTERM)
            results = [answer.result() for answer in answers]
        assert [status for status, _ in results] == [200] * 12
        assert [len(answer["predictions"]) for _, answer in results] == [1 + index % 3 for index in range(12)]
        process.wait(timeout=60)
        assert "stopped: every accepted request was answered" in process.stderr.read()


def test_the_batcher_gathers_concurrent_requests_and_isolates_a_bad_one():
    from kbert.errors import KbertError
    from kbert.serving import Batcher

    calls = []

    def predictor(texts, pairs=None):
        calls.append(list(texts))
        if "bad" in texts:
            raise KbertError("a text the model cannot take")
        return [text.upper() for text in texts]

    async def scenario():
        batcher = Batcher(predictor, max_batch=4, max_wait_ms=50, max_queue=8)
        batcher.start()
        answers = await asyncio.gather(batcher.predict(["a"]), batcher.predict(["b", "c"]),
                                       batcher.predict(["bad"]), batcher.predict(["d", "e"]),
                                       return_exceptions=True)
        await batcher.close()
        return answers

    answers = asyncio.run(scenario())
    assert answers[0] == ["A"] and answers[1] == ["B", "C"] and answers[3] == ["D", "E"]
    assert isinstance(answers[2], KbertError)
    # a, b c, bad: one batch of 4 (which fails), then each of its requests alone; d e the next batch.
    assert calls == [["a", "b", "c", "bad"], ["a"], ["b", "c"], ["bad"], ["d", "e"]]


def _two_batches(instances: int, wait_s: float):
    """The answers to two requests of one batch each, whose calls wait (up to `wait_s`) for each other."""
    import threading

    from kbert.serving import Batcher

    both_running = threading.Barrier(2, timeout=wait_s)

    def predictor(texts, pairs=None):
        both_running.wait()  # broken (an error for the batch) unless the other call runs meanwhile
        return [len(text) for text in texts]

    async def scenario():
        batcher = Batcher(predictor, max_batch=2, max_wait_ms=1, max_queue=8, instances=instances)
        batcher.start()
        requests = [asyncio.ensure_future(batcher.predict(texts)) for texts in (["a", "bb"], ["ccc", "dddd"])]
        await asyncio.sleep(0.05)  # both batches gathered
        await batcher.close()  # answers every accepted request before it returns
        assert all(request.done() for request in requests)
        return [request.result() if not request.exception() else type(request.exception()) for request in requests]

    return asyncio.run(scenario())


def test_two_instances_run_two_batches_at_once_and_close_waits_for_both():
    import threading

    assert _two_batches(instances=2, wait_s=10) == [[1, 2], [3, 4]]
    # One instance: the first batch waits alone until the barrier breaks, and so fails.
    assert _two_batches(instances=1, wait_s=0.5) == [threading.BrokenBarrierError] * 2


def test_a_seq2seq_model_and_keras_on_jax_run_their_batches_one_at_a_time():
    import keras

    from kbert.serving.instances import serial_reason

    assert "seq2seq" in serial_reason("seq2seq")
    if keras.backend.backend() == "jax":  # Keras's predict_on_batch donates the weights to its call
        assert "JAX" in serial_reason("classify")
    else:
        assert serial_reason("classify") is None and serial_reason("embed") is None


def test_a_token_budget_ends_a_batch_before_the_texts_limit():
    from kbert.serving import Batcher

    calls, observed = [], []

    async def scenario():
        batcher = Batcher(lambda texts, pairs=None: calls.append(list(texts)) or texts, max_batch=8, max_wait_ms=50,
                          max_batch_tokens=10, observe=lambda texts, tokens: observed.append((texts, tokens)))
        batcher.start()
        await asyncio.gather(batcher.predict(["a"], tokens=6), batcher.predict(["b"], tokens=3),
                             batcher.predict(["c"], tokens=4), batcher.predict(["d"], tokens=12))
        await batcher.close()

    asyncio.run(scenario())
    # a + b fit 10 tokens, c would pass them; c waits for d, whose 12 tokens are over the budget alone.
    assert calls == [["a", "b"], ["c"], ["d"]]
    assert observed == [(2, 9), (1, 4), (1, 12)]


def test_tei_predict_gives_every_labels_probability_most_probable_first(model_dirs, capsys):
    expected = predicted_by_cli(model_dirs / "classify", TEXTS[:2], capsys)
    with running_server(model_dirs / "classify") as (url, _):
        status, single = post(url, {"inputs": TEXTS[0]}, path="/predict")
        assert status == 200 and [entry["label"] for entry in single] == sorted(
            expected[0]["probabilities"], key=lambda label: -expected[0]["probabilities"][label])
        assert {entry["label"]: entry["score"] for entry in single} == pytest.approx(expected[0]["probabilities"],
                                                                                     abs=1e-5)
        status, batch = post(url, {"inputs": [[TEXTS[0]], [TEXTS[1]]]}, path="/predict")
        assert status == 200 and len(batch) == 2 and batch[1][0]["label"] == expected[1]["label"]
        assert batch[1][0]["score"] == pytest.approx(expected[1]["probability"], abs=1e-5)
        for body, code, message in [
                ({"inputs": "好" * 40}, 413, "inputs[0]: 42 tokens, more than the model's 32"),
                ({"inputs": [TEXTS[0], TEXTS[1]]}, 422, "text pairs given to a classifier trained on single texts"),
                ({"inputs": [["a", "b", "c"]]}, 422, "a pair is [text, text_pair]"),
                ({"inputs": TEXTS[0], "raw_scores": True}, 422, "raw_scores: this classifier's graph ends in its "
                                                                 "softmax"),
                # before: coerced to true and false (the embedding routes' dimensions was already strict)
                ({"inputs": TEXTS[0], "raw_scores": "yes"}, 422, "raw_scores: Input should be a valid boolean"),
                ({"inputs": TEXTS[0], "truncate": "no"}, 422, "truncate: Input should be a valid boolean"),
                ({"inputs": 3}, 422, "inputs")]:
            status, answer = post(url, body, path="/predict")
            assert (status, answer["error_type"]) == (code, "Validation") and message in answer["error"], answer
        assert post(url, {"inputs": "好" * 40, "truncate": True}, path="/predict")[0] == 200


def test_a_classifier_server_reports_info_and_metrics(model_dirs):
    from prometheus_client.parser import text_string_to_metric_families

    with running_server(model_dirs / "classify", "--max-batch-tokens", "64") as (url, _):
        assert post(url, {"texts": TEXTS[:2]})[0] == 200
        assert post(url, {"texts": []})[0] == 422
        with urllib.request.urlopen(url + "/info", timeout=60) as response:
            info = json.loads(response.read())
        with urllib.request.urlopen(url + "/metrics", timeout=60) as response:
            metrics = response.read().decode()
    assert (info["task"], info["max_input_length"], info["max_batch_tokens"], info["dimensions"]) == (
        "classify", 32, 64, None)
    samples = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
               for family in text_string_to_metric_families(metrics) for sample in family.samples}
    assert samples[("kbert_requests_total", (("route", "/v1/predict"), ("status", "200")))] >= 1
    assert samples[("kbert_requests_total", (("route", "/v1/predict"), ("status", "422")))] == 1
    assert samples[("kbert_texts_total", ())] >= 2
    assert samples[("kbert_tokens_total", ())] >= sum(len(text) + 2 for text in TEXTS[:2])  # one a character


def test_an_app_whose_lifespan_never_ran_still_answers():
    """Mounted in another app (Starlette runs no mounted app's lifespan), the first request starts the batches."""
    from starlette.applications import Starlette
    from starlette.routing import Mount
    from starlette.testclient import TestClient

    from kbert.serving import ServerLimits, create_app
    from kbert.tasks.predictors import Predictor

    predictor = Predictor("classify", "a-model", lambda texts, pairs=None: [{"text": t, "label": "1"} for t in texts])
    outer = Starlette(routes=[Mount("/model", app=create_app(predictor, ServerLimits(max_wait_ms=1)))])
    with TestClient(outer) as client:  # runs the outer app's lifespan only
        response = client.post("/model/v1/predict", json={"texts": ["好", "差"]})
    assert response.status_code == 200
    assert [row["text"] for row in response.json()["predictions"]] == ["好", "差"]


def test_a_request_waits_at_most_its_timeout():
    from kbert.serving import Batcher, QueueFull

    async def scenario():
        batcher = Batcher(lambda texts, pairs=None: time.sleep(0.5) or texts, max_wait_ms=0, timeout_s=0.1)
        with pytest.raises(QueueFull, match=r"no answer within 0.1 s"):
            await batcher.predict(["slow"])
        await batcher.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("flags, message", [
    (["--port", "70000"], "expected a port from 0 (any free one) to 65535, got '70000'"),
    (["--port", "-5"], "expected a non-negative integer, got '-5'"),
    (["--host", ""], "expected an address (127.0.0.1: this machine only; 0.0.0.0: every interface, said explicitly)"),
    (["--host", "nosuch.invalid"], "cannot listen on 'nosuch.invalid': the name does not resolve"),
])
def test_serve_refuses_an_address_it_cannot_listen_on_before_loading(model_dirs, flags, message, capsys):
    started = time.perf_counter()
    try:
        code = main(["serve", str(model_dirs / "classify"), *flags])
    except SystemExit as usage:  # argparse's refusal of the option's value
        code = usage.code
    error = capsys.readouterr().err
    assert code == 2 and message in error and "Traceback" not in error, error
    assert time.perf_counter() - started < 30  # refused before the model loads


def test_serve_names_a_missing_model_directory(tmp_path, capsys):
    assert main(["serve", str(tmp_path / "nothing"), "--port", "0"]) == 2
    assert f"{tmp_path / 'nothing'}: no such directory; expected a model directory" in capsys.readouterr().err


WEB_SERVING_SCRIPT = """
from kbert.compat.snippets import WebServing

def gen_synonyms(text, n=1):
    if n > 5:
        raise ValueError("n: at most 5")
    return [text] * n

arguments = {"text": (None, True), "n": (int, False)}
web = WebServing(host="127.0.0.1", port=0)
web.route("/gen_synonyms", gen_synonyms, arguments)
web.route("/gen_synonyms", gen_synonyms, arguments, method="POST")
web.start()
"""


def test_bert4keras_web_serving_answers_as_it_did(tmp_path):
    """bert4keras's WebServing contract: code 0 with the data, 1 for a missing argument, 2 for an error."""
    script = tmp_path / "web.py"
    script.write_text(WEB_SERVING_SCRIPT, encoding="utf-8")
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        url = re.search(r"(http://[\d.]+:\d+)", process.stdout.readline()).group(1)

        def get(query):
            with urllib.request.urlopen(url + "/gen_synonyms?" + query, timeout=60) as response:
                return json.loads(response.read())

        assert get("text=%E8%8B%B9%E6%9E%9C&n=2") == {"code": 0, "desc": "succeeded", "data": ["苹果", "苹果"]}
        assert get("n=2") == {"code": 1, "desc": 'lack of "text" argument', "data": {}}
        assert get("text=a&n=x")["code"] == 2 and "invalid literal" in get("text=a&n=x")["desc"]
        assert get("text=a&n=9") == {"code": 2, "desc": "n: at most 5", "data": {}}
        request = urllib.request.Request(url + "/gen_synonyms", data=b"text=b&n=3", method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            assert json.loads(response.read())["data"] == ["b", "b", "b"]
        host, port = url[len("http://"):].split(":")
        with socket.create_connection((host, int(port)), timeout=60) as client:  # a body over the limit, declared
            client.sendall(b"POST /gen_synonyms HTTP/1.1\r\nHost: x\r\nContent-Length: 1000001\r\n"
                           b"Content-Type: application/x-www-form-urlencoded\r\nConnection: close\r\n\r\n")
            reply = b"".join(iter(lambda: client.recv(65536), b""))  # answered before a byte of it is sent
        answer = json.loads(reply.split(b"\r\n\r\n", 1)[1])
        assert answer["code"] == 2 and "over this server's limit of 1,000,000 bytes" in answer["desc"], answer
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    assert len(re.findall(r"GET /gen_synonyms 200", process.stderr.read())) == 5
