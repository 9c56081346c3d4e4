"""`kbert serve` under load against `kbert predict` on the same texts.

    python -m benchmarks.serving --model runs/sentiment [--clients 16] [--requests 256] [--rounds 3] [--json OUT]
    python -m benchmarks.serving --model runs/sentiment --runtime onnxruntime  # the server on its float32 ONNX file
    python -m benchmarks.serving --model runs/sentiment --quantize int8   # the server on its int8 ONNX file
    python -m benchmarks.serving --model MINILM_FOLDER --route embeddings  # OpenAI's /v1/embeddings
    python -m benchmarks.serving --model SPLADE_FOLDER --route embed_sparse  # TEI's /embed_sparse, texts cut
    python -m benchmarks.serving --model runs/sentiment --instances 1  # the server's batches one at a time

The server runs in its own process (`kbert serve MODEL --port 0`); this
process holds the offline engine (the predictor `kbert predict` uses, its
default batch of 64) and the load: `--clients` threads, each sending one
text a request (real reviews of the sentiment test split) until
`--requests` have been answered. The rounds alternate, offline then served,
so both see the same machine. The table gives texts a second (median over
rounds), the served/offline ratio per round (median and range), the
latency percentiles of the served requests over all rounds, and the failed
requests (anything but 200) by status: on `--route embeddings`, 413 is a text
longer than the model takes, which OpenAI's form refuses where the offline
engine cuts it (8 of the 256 reviews for all-MiniLM-L6-v2's 256 tokens).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import List, Tuple

from benchmarks.alternating import describe, median_ratio

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REVIEWS = os.path.join(REPO, "..", "shared", "data", "sentiment", "sentiment.test.data")


def review_texts(count: int) -> List[str]:
    with open(REVIEWS, encoding="utf-8") as handle:
        texts = [line.rsplit("\t", 1)[0] for line in handle if line.strip()]
    return (texts * (count // len(texts) + 1))[:count]


def start_server(model: str, max_batch: int, max_wait_ms: float, quantize: "str | None" = None,
                 runtime: str = "keras", instances: int = 2) -> Tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, "-m", "kbert", "serve", model, "--port", "0", "--max-batch",
                                str(max_batch), "--max-wait-ms", str(max_wait_ms), "--max-queue", "4096",
                                "--instances", str(instances),
                                "--runtime", runtime, *(["--quantize", quantize] if quantize else [])],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = process.stdout.readline()
    match = re.search(r"on (http://[\d.]+:\d+) ", line)
    if not match:
        process.kill()
        raise SystemExit(f"the server did not start: {line!r}")
    return process, match.group(1)


# route -> (path, the texts' field, the rest of the body): TEI's sparse route cuts long texts as the offline engine
ROUTES = {"predict": ("/v1/predict", "texts", {}), "embeddings": ("/v1/embeddings", "input", {}),
          "embed_sparse": ("/embed_sparse", "inputs", {"truncate": True})}


def one_request(url: str, text: str, route: str = "predict") -> Tuple[int, float]:
    path, field, rest = ROUTES[route]
    request = urllib.request.Request(url + path, data=json.dumps({field: [text], **rest}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        status = error.code
    except OSError:
        status = 0
    return status, time.perf_counter() - start


def served_round(url: str, texts: List[str], clients: int,
                 route: str = "predict") -> Tuple[float, List[float], collections.Counter]:
    """Seconds for all texts, each request's latency, and the requests not answered 200, by status (0: no
    answer)."""
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda text: one_request(url, text, route), texts))
    return time.perf_counter() - start, [latency for _, latency in results], \
        collections.Counter(status for status, _ in results if status != 200)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a classifier's model directory (kbert train), or an "
                                                       "embedding model with --route embeddings")
    parser.add_argument("--route", choices=sorted(ROUTES), default="predict",
                        help="predict: POST /v1/predict; embeddings: POST /v1/embeddings (OpenAI's form); "
                             "embed_sparse: a sparse encoder's POST /embed_sparse (TEI's form, truncate true)")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    parser.add_argument("--quantize", choices=["int8"], help="serve the classifier's int8 ONNX file (the offline "
                                                             "engine stays float32 Keras)")
    parser.add_argument("--runtime", choices=["keras", "onnxruntime"], default="keras",
                        help="what runs the server's batches (the offline engine stays Keras)")
    parser.add_argument("--instances", type=int, default=2, help="the server's batches run at once (kbert serve "
                                                                     "--instances)")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args(argv)

    from kbert.tasks.predictors import PredictionSettings, load_predictor

    texts = review_texts(args.requests)
    predictor = load_predictor(args.model, PredictionSettings(batch_size=64))
    predictor(texts[:64])  # compiled for the shapes it will see
    server, url = start_server(args.model, args.max_batch, args.max_wait_ms, args.quantize, args.runtime,
                               args.instances)
    try:
        served_round(url, texts[:args.clients * 2], args.clients, args.route)  # warm-up
        offline, served, latencies, failed = [], [], [], collections.Counter()
        for _ in range(args.rounds):
            start = time.perf_counter()
            predictor(texts)
            offline.append(time.perf_counter() - start)
            seconds, round_latencies, round_failed = served_round(url, texts, args.clients, args.route)
            served.append(seconds)
            latencies += round_latencies
            failed += round_failed
    finally:
        server.terminate()
        server.wait(timeout=60)
    latencies.sort()
    result = {
        "route": ROUTES[args.route][0], "runtime": "onnxruntime" if args.quantize else args.runtime,
        "texts": len(texts), "clients": args.clients, "rounds": args.rounds, "max_batch": args.max_batch,
        "instances": args.instances,
        "offline_texts_per_second": len(texts) / statistics.median(offline),
        "served_texts_per_second": len(texts) / statistics.median(served),
        "served_over_offline": median_ratio(offline, served),  # a ratio of speeds: offline seconds / served
        "p50_ms": 1000 * latencies[len(latencies) // 2], "p99_ms": 1000 * latencies[int(len(latencies) * 0.99)],
        "failed": {str(status): count for status, count in sorted(failed.items())},
    }
    # 413: a text longer than the model takes, which OpenAI's form refuses (the offline engine cuts it).
    statuses = f" ({', '.join(f'{status}: {count}' for status, count in sorted(failed.items()))})" if failed else ""
    print(f"| engine | texts/s | p50 ms | p99 ms | failed |\n|---|---|---|---|---|\n"
          f"| kbert predict (batch 64) | {result['offline_texts_per_second']:.1f} | — | — | — |\n"
          f"| kbert serve{' --quantize ' + args.quantize if args.quantize else ''}"
          f"{' --runtime onnxruntime' if args.runtime == 'onnxruntime' else ''} --instances {args.instances} "
          f"{ROUTES[args.route][0]}, "
          f"{args.clients} clients, a text a request | {result['served_texts_per_second']:.1f} | "
          f"{result['p50_ms']:.0f} | {result['p99_ms']:.0f} | "
          f"{sum(failed.values())} of {len(texts) * args.rounds}{statuses} |")
    print(f"served / offline throughput: {describe(result['served_over_offline'])}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
