"""`kbert embed` against sentence-transformers' `encode`, each in its own process, in alternating rounds.

    python -m benchmarks.embedding --model PATH/TO/all-MiniLM-L6-v2 \\
        --data ../shared/data/sentiment/sentiment.test.data --st-python PYTHON_WITH_SENTENCE_TRANSFORMERS

Each engine is a worker process that loads the model and encodes the texts
once to warm up (one worker after the other, so that neither's load overlaps the
other's); then each round asks every worker in turn to encode all the
texts (`--count` of the file's lines, of mixed length, `--batch-size` a call)
and reports its seconds. Prints sentences/s per engine and round, the median
per-round ratio kbert / sentence-transformers with its range, and the largest
difference between the two engines' vectors. sentence-transformers needs
PyTorch: `--st-python` is the interpreter of an environment that has it
(kbert's own need not); kbert runs on the Keras backend `KERAS_BACKEND` names.

`--dtype bfloat16` holds both engines' weights in bfloat16 (`kbert embed --dtype bfloat16`;
sentence-transformers' `model_kwargs={"dtype": torch.bfloat16}`): worth it where the CPU has
bfloat16 units (`amx_bf16`), and on kbert's side on the PyTorch backend (`KERAS_BACKEND=torch`).

A sparse encoder's folder (sentence-transformers' `SparseEncoder`, SPLADE) is timed as `kbert embed` encodes
it (`Embedder.encode_sparse`: each text's ids and weights) against `SparseEncoder.encode` (its sparse tensor);
the vectors are compared densified, and the mean of each text's non-zero weights is printed. A multi-vector
encoder's (`MultiVectorEncoder`, ColBERT) as documents: `Embedder.encode_multi_vector(texts, "document")` against
`MultiVectorEncoder.encode_document`, every token's vector compared.

For a dense folder it also prints the tokens kbert's model calls compute against the texts' own tokens: the
padding share, the most that unpadded calls (a batch's texts packed without padding) could save.

`--one-batch` times the model call alone instead, on one fixed batch of
`--batch-size` × 128 token ids (no tokenizing, no batching by length): where a
gap between the engines lies, in the encoder or around it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import List, Sequence

import numpy as np

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_texts(path: str, count: int) -> List[str]:
    """The first `count` texts of a file of `text<TAB>label` or plain lines (the labels left out)."""
    with open(path, encoding="utf-8") as handle:
        texts = [line.rstrip("\n").split("\t")[0] for line in handle if line.strip()]
    return texts[:count]


def kind(model: str) -> str:
    """The folder's `model_type`: `SentenceTransformer` (also where none is named), `SparseEncoder` or
    `MultiVectorEncoder`."""
    from kbert.embeddings.folders import model_type

    return model_type(model) or "SentenceTransformer"


def is_sparse(model: str) -> bool:
    return kind(model) == "SparseEncoder"


def _load(engine: str, model: str, dtype: str, runtime: str = "keras", texts: Sequence[str] = ()):
    """The engine's loaded model: a kbert `Embedder` (its model on `runtime`: keras; onnxruntime float32 or int8;
    OpenVINO in `dtype` or static int8 calibrated on a sample of `texts`, as `kbert embed` does), or a
    `SentenceTransformer` on the CPU (`runtime` torch in `dtype`, or openvino: its OpenVINO backend)."""
    if engine == "kbert":
        from kbert.embeddings.embedder import Embedder
        from kbert.serving.runtimes import Runtime, onnx_embedder
        from kbert.serving.openvino import calibration_sample

        if runtime == "auto":  # what `kbert embed --runtime auto` (its default) picks here
            runtime = _auto_runtime(dtype)
        if runtime == "keras":
            return Embedder.load(model, dtype=dtype)
        embedder = Embedder.load(model, dtype="float32")  # every export is made from float32
        name, _, quantize = runtime.partition("-")
        calibration = calibration_sample(texts, "the texts") if name == "openvino" and quantize else None
        embedder.model = onnx_embedder(embedder, Runtime(name, quantize or None, dtype if name == "openvino"
                                                         else "float32", calibration))
        return embedder
    import sentence_transformers
    import torch

    if runtime == "openvino":
        return getattr(sentence_transformers, kind(model))(model, device="cpu", backend="openvino")
    return getattr(sentence_transformers, kind(model))(model, device="cpu", model_kwargs={"dtype": getattr(
        torch, "float32" if dtype == "auto" else dtype)})


def _auto_runtime(dtype: str) -> str:
    """The runtime `kbert embed --runtime auto --dtype DTYPE` runs, by its rule, on this machine (its size limit,
    `kbert.cli.embed.AUTO_EXPORT_BYTES`, left out: the models benchmarked here are under it)."""
    import keras

    from kbert.cli.arguments import auto_runtime

    options = argparse.Namespace(quantize=None, dtype=dtype, mixed_precision=None, ray=None)
    name, reason = auto_runtime(options, keras.backend.backend())
    print(f"kbert --runtime auto: {name} ({reason})", file=sys.stderr)
    return name


RUNTIMES = ("auto", "keras", "onnxruntime", "onnxruntime-int8", "openvino", "openvino-int8")


def _one_batch(engine: str, model: str, batch_size: int, dtype: str, runtime: str):
    """A call of the engine's model on one fixed batch of `batch_size` × 128 token ids."""
    ids = np.random.default_rng(0).integers(1000, 20000, size=(batch_size, 128)).astype("int32")
    ids[:, 0], ids[:, -1] = 101, 102  # [CLS] ... [SEP] of a BERT vocabulary
    loaded = _load(engine, model, dtype, runtime)
    if engine == "kbert":
        return lambda: loaded.model.predict_on_batch([ids, np.zeros_like(ids)])
    import torch

    features = {"input_ids": torch.tensor(ids, dtype=torch.long), "token_type_ids": torch.zeros_like(
        torch.tensor(ids, dtype=torch.long)), "attention_mask": torch.ones(ids.shape, dtype=torch.long)}

    def call():
        with torch.inference_mode():
            return loaded(features)["sentence_embedding"].float().numpy()

    return call


def _encoder(engine: str, loaded, texts: List[str], batch_size: int, model_type: str):
    """One encoding of the texts as the engine's users call it: dense vectors, a sparse encoder's own form
    (kbert's ids and weights per text; sentence-transformers' sparse tensor), or a multi-vector encoder's token
    vectors of each text as a document."""
    if model_type == "MultiVectorEncoder":
        if engine == "kbert":
            return lambda: loaded.encode_multi_vector(texts, "document", batch_size)
        return lambda: [tokens.numpy() for tokens in loaded.encode_document(texts, batch_size=batch_size)]
    if model_type == "SparseEncoder" and engine == "kbert":
        return lambda: loaded.encode_sparse(texts, batch_size)
    return lambda: loaded.encode(texts, batch_size=batch_size)


def _dense(vectors, width: int = 0) -> np.ndarray:
    """An engine's vectors as one float32 array: kbert's `(ids, weights)` per text (`width` ids) and a torch
    sparse tensor densified, each text's token vectors one after another."""
    if isinstance(vectors, list) and vectors and isinstance(vectors[0], np.ndarray):
        return np.concatenate(vectors).astype(np.float32)
    if isinstance(vectors, list):
        dense = np.zeros((len(vectors), width), np.float32)
        for row, (ids, weights) in zip(dense, vectors):
            row[ids] = weights
        return dense
    if hasattr(vectors, "to_dense"):
        return vectors.to_dense().float().numpy()
    return np.asarray(vectors, np.float32)


def tokens_computed(embedder, texts: List[str], batch_size: int) -> List[int]:
    """The texts' own tokens and the tokens kbert's model calls compute over them (the padding counted), as
    `Embedder.encode` batches them: how much unpadded calls could save at most."""
    from kbert.training.pipeline import batches_by_length

    encoded = embedder.prompted_rows(texts, embedder.prompt_text())
    computed = sum(int(features[0].size) for _, features in batches_by_length(
        encoded, batch_size, True, maxlen=embedder.maxlen, pad_id=embedder.tokenizer.pad_id))
    return [sum(len(row[0]) for row in encoded), computed]


def worker(engine: str, model: str, data: str, count: int, batch_size: int, one_batch: bool = False,
           dtype: str = "float32", runtime: str = "keras", warm_up: int = 0) -> None:
    """Loads `engine`, warms it up on the first `warm_up` texts (0: all), then answers each line on stdin with the
    seconds one encoding of the texts took (and, where the line names a file, saves that encoding's vectors
    there)."""
    texts = read_texts(data, count)
    loaded = None
    if one_batch:
        encode = warm = _one_batch(engine, model, batch_size, dtype, runtime)
    else:
        loaded = _load(engine, model, dtype, runtime, texts)
        encode = _encoder(engine, loaded, texts, batch_size, kind(model))
        warm = _encoder(engine, loaded, texts[:warm_up], batch_size, kind(model)) if warm_up else encode
    warm()  # a compiled graph, the thread pools
    ready = {"ready": True}
    if engine == "kbert" and not one_batch and kind(model) == "SentenceTransformer":
        ready["tokens"] = tokens_computed(loaded, texts, batch_size)
    print(json.dumps(ready), flush=True)
    for line in sys.stdin:
        start = time.perf_counter()
        vectors = encode()
        answer = {"seconds": time.perf_counter() - start}
        if line.strip():  # a path: where the vectors go, for the comparison
            np.save(line.strip(), _dense(vectors, getattr(loaded, "dimensions", 0)))
        print(json.dumps(answer), flush=True)


def engine_arguments(parser: argparse.ArgumentParser, count: int) -> None:
    """What every engine of a run shares: the folder, the texts (`count` of them a round), the batch, the rounds and
    the Python of sentence-transformers."""
    parser.add_argument("--model", required=True, help="a sentence-transformers folder")
    parser.add_argument("--data", required=True, help="texts, one a line (text<TAB>label lines: the text)")
    parser.add_argument("--count", type=int, default=count, help=f"texts encoded per round (default: {count})")
    parser.add_argument("--batch-size", type=int, default=32, help="texts a call, every engine (default: 32)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default: 5)")
    parser.add_argument("--st-python", default=sys.executable,
                        help="the Python that runs sentence-transformers (default: this one)")


def timed_rounds(workers: dict, count: int) -> tuple:
    """Each worker's seconds in each of `count` alternating rounds, and its vectors (saved in the first round)."""
    seconds = {name: [] for name in workers}
    vectors = {}
    for number in range(count):
        for name, process in workers.items():
            target = os.path.abspath(f".embedding-{name.replace(' ', '-')}.npy") if number == 0 else ""
            process.stdin.write(target + "\n")
            process.stdin.flush()
            answer = process.stdout.readline()
            if not answer:
                raise SystemExit(f"the {name} worker stopped (run it alone to see why: python -m benchmarks.embedding "
                                 "--worker ...)")
            seconds[name].append(json.loads(answer)["seconds"])
            if target:
                vectors[name] = np.load(target)
                os.remove(target)
    return seconds, vectors


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    engine_arguments(parser, count=2000)
    parser.add_argument("--one-batch", action="store_true", help="time the model call alone on one fixed batch of "
                                                                 "--batch-size x 128 token ids")
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="float32",
                        help="both engines' weights (and compute) in this dtype (default: float32; auto: kbert's "
                             "rule, sentence-transformers' float32)")
    parser.add_argument("--runtime", choices=RUNTIMES, default="keras",
                        help="what runs kbert's model: Keras, or its ONNX export in onnxruntime (`kbert embed "
                             "--runtime onnxruntime`, `--quantize int8`) or OpenVINO (`--runtime openvino`, its "
                             "static int8 calibrated on the texts); sentence-transformers stays PyTorch (a worker "
                             "of `benchmarks.cpu_engines` may run its OpenVINO backend: openvino)")
    parser.add_argument("--warm-up", type=int, default=0, metavar="N",
                        help="warm each engine up on the first N texts (default: all of them; fewer for a large "
                             "model on PyTorch, which compiles no graph per shape)")
    parser.add_argument("--worker", choices=("kbert", "sentence-transformers"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.model, args.data, args.count, args.batch_size, args.one_batch, args.dtype,
               args.runtime, args.warm_up)
        return 0
    common = ["-m", "benchmarks.embedding", "--model", args.model, "--data", args.data, "--count", str(args.count),
              "--batch-size", str(args.batch_size), "--dtype", args.dtype, "--runtime", args.runtime,
              "--warm-up", str(args.warm_up),
              *(["--one-batch"] if args.one_batch else []),
              "--worker"]
    workers, tokens = {}, None
    for name, python in (("kbert", sys.executable), ("sentence-transformers", args.st_python)):
        # one after the other: a load and warm-up (an ONNX export, whose conversion peaks at gigabytes) never
        # overlaps the other engine's
        workers[name] = subprocess.Popen([python, *common, name], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, text=True, cwd=REPOSITORY)
        ready = workers[name].stdout.readline()
        if not ready:
            raise SystemExit(f"the {name} worker stopped while loading (run it alone to see why: python -m "
                             f"benchmarks.embedding --worker {name} ...)")
        tokens = json.loads(ready).get("tokens", tokens)
    try:
        seconds, vectors = timed_rounds(workers, args.rounds)
    finally:
        for process in workers.values():
            process.stdin.close()
            process.wait(timeout=60)
    texts = read_texts(args.data, args.count)
    if args.one_batch:
        print(f"one batch of {args.batch_size} x 128 token ids, {args.rounds} alternating rounds")
        for name, values in seconds.items():
            print(f"{name:<24} ms per call by round: {' '.join(f'{1000 * value:7.1f}' for value in values)}   "
                  f"median {1000 * np.median(values):7.1f}")
        ratios = [other / mine for mine, other in zip(seconds["kbert"], seconds["sentence-transformers"])]
        print(f"kbert / sentence-transformers (speed): {np.median(ratios):.2f}x (rounds {min(ratios):.2f}-"
              f"{max(ratios):.2f}x)")
        return 0
    print(f"{len(texts)} texts of {min(map(len, texts))} to {max(map(len, texts))} characters, batch "
          f"{args.batch_size}, {args.rounds} alternating rounds")
    print(f"{'engine':<24} {'sentences/s by round':<48} median")
    for name, values in seconds.items():
        rates = [len(texts) / value for value in values]
        print(f"{name:<24} {' '.join(f'{rate:7.1f}' for rate in rates):<48} {np.median(rates):7.1f}")
    ratios = [other / mine for mine, other in zip(seconds["kbert"], seconds["sentence-transformers"])]
    print(f"kbert / sentence-transformers: {np.median(ratios):.2f}x (rounds {min(ratios):.2f}-{max(ratios):.2f}x)")
    mine, theirs = vectors["kbert"], vectors["sentence-transformers"]
    if mine.shape != theirs.shape:
        raise SystemExit(f"the engines' vectors differ in shape: kbert {mine.shape}, sentence-transformers "
                         f"{theirs.shape}")
    print(f"largest difference between the engines' vectors: {np.abs(mine - theirs).max():.2e}")
    if tokens:
        print(f"kbert's model calls compute {tokens[1]:,} tokens for the texts' {tokens[0]:,}: padding is "
              f"{1 - tokens[0] / tokens[1]:.1%} of them, what unpadded calls could save at most")
    if kind(args.model) == "MultiVectorEncoder":
        print(f"token vectors a text: {len(mine) / len(texts):.1f}")
    if is_sparse(args.model):
        print(f"non-zero weights a text: kbert {np.mean((mine > 0).sum(1)):.1f}, sentence-transformers "
              f"{np.mean((theirs > 0).sum(1)):.1f}")
    cosines = np.sum(mine * theirs, 1) / np.maximum(np.linalg.norm(mine, axis=1) * np.linalg.norm(theirs, axis=1),
                                                    1e-12)
    unit = "token" if kind(args.model) == "MultiVectorEncoder" else "text"  # a multi-vector encoder's rows: tokens'
    print(f"cosine of the engines' vectors of a {unit}: lowest {cosines.min():.5f}, median {np.median(cosines):.5f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
