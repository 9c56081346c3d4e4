"""`kbert serve MODEL`: any model directory of `kbert train` or `kbert pretrain`, or an embedding model
(a sentence-transformers folder or a name of one), over HTTP."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kbert.cli.arguments import (adapter_names, embedding_head_argument, host_name, exported_runtime, runtime_option,
                                 port_number, positive_float, positive_int, precision_option, ray_address, ray_option,
                                 runtime_options)
from kbert.errors import KbertError
from kbert.serving.app import ServerLimits, check_listen_address

if TYPE_CHECKING:
    from kbert.serving.served_model import ServedModel

DEFAULTS = ServerLimits()
LIMITS = {  # ServerLimits' fields, as options
    "max_batch": (positive_int, "texts of concurrent requests predicted together"),
    "max_wait_ms": (float, "how long a batch waits for more requests"),
    "max_queue": (positive_int, "texts waiting at most; a request beyond is answered 503"),
    "max_texts": (positive_int, "texts in one request at most (413 beyond)"),
    "max_text_chars": (positive_int, "characters in one text at most (413 beyond, unless the request asks to "
                                     "truncate); default: 50 per token of the model's input"),
    "max_body_bytes": (positive_int, "bytes in one request body at most (413 beyond)"),
    "max_batch_tokens": (positive_int, "tokens a batch gathers at most, besides --max-batch (default: no budget)"),
    "max_connections": (positive_int, "connections open at once; more are answered 503 (uvicorn's "
                                      "limit_concurrency)"),
    "request_timeout_s": (positive_float, "seconds a request has to arrive whole, headers and body, from its "
                                          "first byte; a connection whose request has not is closed"),
    "instances": (positive_int, "batches run at once, each on an equal share of the CPU cores: a small batch "
                                "leaves cores idle (on JAX and for seq2seq, one at a time)"),
}


def add_commands(command) -> None:
    serve = command("serve", "serve a model over HTTP: POST /v1/predict {\"texts\": [...]} answers what "
                             "kbert predict --json prints; an embedding model also answers POST /v1/embeddings "
                             "(OpenAI's API) and POST /embed (Text Embeddings Inference's), a reranker POST "
                             "/rerank (TEI's) and POST /v1/rerank (Cohere's and Jina's); GET /health, /info, "
                             "/metrics (Prometheus); the OpenAPI schema at /docs")
    serve.add_argument("model", metavar="MODEL", help="model directory from kbert train or kbert pretrain, a "
                                                      "sentence-transformers or CrossEncoder folder, or a name")
    serve.add_argument("--host", type=host_name, default="127.0.0.1",
                       help="address to listen on (0.0.0.0: every interface, said explicitly)")
    serve.add_argument("--port", type=port_number, default=8000, help="port to listen on (0: any free one)")
    for field, (kind, help) in LIMITS.items():
        serve.add_argument("--" + field.replace("_", "-"), type=kind, default=getattr(DEFAULTS, field), help=help)
    serve.add_argument("--beam-size", type=positive_int, default=1, help="seq2seq: beams (1: greedy)")
    serve.add_argument("--max-new-tokens", type=positive_int,
                       help="seq2seq: the longest target (default: the room --maxlen of training leaves)")
    serve.add_argument("--top-k", type=positive_int, default=5,
                       help="a pre-trained model: the tokens given for each [MASK]")
    serve.add_argument("--adapter", metavar="TASK", action="append",
                       help="an embedding model with task LoRA adapters (jina-embeddings-v3): the task's "
                            "(retrieval.query, ...), merged in; given once per task (or 'all'), every one from "
                            "one set of weights, a request's 'task' choosing (default: the first); "
                            "default: the base weights")
    serve.add_argument("--ranges", metavar="FILE", help="an embedding model's calibration ranges (kbert embed "
                                                        "--calibrate wrote them): int8 and uint8 vectors on "
                                                        "POST /v1/embed and /v1/embeddings; default: the model "
                                                        "folder's calibration_ranges.json, if any")
    embedding_head_argument(serve)
    runtime_options(serve, "a classifier, an embedding model or a reranker",
                    "whose small batches cost about half Keras's on TensorFlow")
    precision_option(serve, weights=True)
    ray_option(serve, "serve from Ray Serve replicas (the same routes, limits and metrics in each)")
    serve.add_argument("--replicas", type=positive_int, default=2, help="--ray: replicas, each loading the model")
    serve.add_argument("--replica-cpus", type=positive_float, default=1,
                       help="--ray: CPUs each replica takes, shared among its --instances")
    serve.set_defaults(run=run_serve)


def run_serve(args) -> int:
    try:
        from kbert.serving.app import serve
        import fastapi  # noqa: F401  (the extra's packages, checked before the model is loaded)
        import prometheus_client  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as error:
        raise KbertError(f"kbert serve needs {error.name}: pip install 'kbert[serve]' (FastAPI, uvicorn and "
                         "prometheus_client)") \
            from None
    from kbert.serving.instances import serial_reason, share_cores
    from kbert.serving.runtimes import check_exported_task
    from kbert.serving.served_model import ServedModel
    from kbert.io import ModelFolder
    from kbert.tasks.predictors import PredictionSettings, check_settings, model_task, resolved

    if args.max_wait_ms < 0:
        raise KbertError(f"--max-wait-ms: expected 0 or more, got {args.max_wait_ms}")
    runtime = exported_runtime(args)  # OpenVINO's int8 is calibrated on --calibration's texts
    onnx = runtime is not None
    if onnx and runtime.static_int8 and not runtime.calibration:  # a server has no input of its own to sample
        raise KbertError("--quantize int8 with --runtime openvino is static int8, calibrated on texts like those the "
                         "server will see: give --calibration FILE (one text a line)")
    check_listen_address(args.host, args.port)  # before the model loads: a typo costs no start-up
    if args.ray and args.port == 0:
        raise KbertError("--ray with --port 0: Ray Serve's proxy listens on the port it is given; name one")
    limits = ServerLimits(**{field: getattr(args, field) for field in LIMITS})
    folder = ModelFolder(resolved(args.model))  # read once, for its task and its model
    task = model_task(folder)
    settings = PredictionSettings(batch_size=args.max_batch, beam_size=args.beam_size,
                                  max_new_tokens=args.max_new_tokens, top_k=args.top_k,
                                  adapter=_adapters(args.adapter, onnx),
                                  ranges=args.ranges, head=args.head)
    check_settings(settings, task, args.model)  # before the model loads (the ONNX path skips load_predictor)
    check_exported_task(task, runtime, args.model, runtime_option(args))
    serial = serial_reason(task)
    if serial:
        limits.instances = 1
    served = ServedModel(folder, task, settings, runtime, limits)
    if args.ray:
        return _serve_on_ray(args, served)
    # Before the model loads: TensorFlow's pool of threads is fixed once it runs an operation.
    threads = share_cores(limits.instances)
    predictor = served.load(threads)

    def ready(url: str) -> None:
        from kbert.embeddings.kinds import DenseOutput

        route = predictor.embedder.output.route if predictor.embedder is not None else DenseOutput.route
        own = f"POST {url}/v1/embeddings, {url}/embed, " if route == DenseOutput.route else f"POST {url}{route}, "
        routes = {"embed": own,
                  "rerank": f"POST {url}/rerank, {url}/v1/rerank, "}.get(predictor.task, "POST ")
        through = f" through {runtime}" if onnx else ""
        print(f"kbert: serving the {predictor.task} model {args.model}{through} on {url} ({routes}{url}/v1/predict, "
              f"GET {url}/health, {url}/metrics, schema at {url}/docs)", flush=True)
        batches = f"{limits.instances} batch{'es' if limits.instances > 1 else ''} at once"
        on = f"{threads} threads each" if threads else "the backend's threads"
        logging.getLogger("kbert.serve").info("%s, on %s%s", batches, on, f" ({serial})" if serial else "")

    serve(predictor, args.host, args.port, limits, ready=ready)
    return 0


def _serve_on_ray(args, served: "ServedModel") -> int:
    """`kbert serve --ray`: `served` from Ray Serve replicas (`kbert.serving.server_on_ray`)."""
    from kbert.serving.server_on_ray import serve_on_ray

    address = ray_address(args)

    def ready(url: str) -> None:
        print(f"kbert: serving the {served.task} model {args.model} on {url} from {args.replicas} Ray Serve "
              f"replica{'s' if args.replicas > 1 else ''} of {args.replica_cpus:g} CPU each (the routes of kbert "
              f"serve; GET {url}/health, {url}/metrics: one replica's)", flush=True)

    serve_on_ray(served, args.host, args.port, args.replicas, args.replica_cpus, address, ready)
    return 0


def _adapters(names: "list | None", onnx: bool) -> "str | list | None":
    """`--adapter`'s tasks (`adapter_names`), several refused for an ONNX model (one task's weights a file)."""
    adapters = adapter_names(names)
    if isinstance(adapters, list) and onnx:
        raise KbertError(f"--adapter {' --adapter '.join(names)}: an ONNX model computes one task's weights; serve "
                         "it with one --adapter (or without --runtime onnxruntime and --quantize)")
    return adapters
