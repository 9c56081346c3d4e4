"""A classifier exported to ONNX and LiteRT, float32 and int8, against Keras: speed, size and accuracy.

    python -m benchmarks.export --model runs/base-classifier [--batch 8] [--length 128] [--rounds 5]
    python -m benchmarks.export --model runs/sentiment --data ../shared/data/sentiment/sentiment.test.data

The model directory is exported four times (`kbert export ... x.onnx` and
`x.tflite`, each also with `--quantize int8`) into a temporary folder.
Speed: one batch of `--batch` x `--length` token ids, timed in alternating
rounds (Keras's `predict_on_batch`, onnxruntime and the LiteRT interpreter
on each file; `--calls` calls each per round); tokens a second as the median
over rounds, and each engine's median ratio to Keras with the range. Size:
the bytes of each file (Keras: model.weights.h5). With `--data` (a labelled
file), the accuracy of Keras and of each exported file on it, and how often
each int8 file's label equals its float32 file's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

import numpy as np

from benchmarks.alternating import alternate, describe, median_ratio


def accuracies(classifier, runners: dict, data: str) -> dict:
    """Accuracy on `data` of Keras and of each exported file, texts in batches of 64 sorted by length."""
    from kbert.tokenizers import pad_batch
    from kbert.training.data import encode_examples, read_examples

    examples, _ = read_examples(data)
    truth = classifier.labels.ids(examples, data)
    encoded = encode_examples(classifier.tokenizer, examples, classifier.maxlen)
    order = np.argsort([len(ids) for ids, _ in encoded], kind="stable")
    predicted = {name: np.empty(len(examples), dtype=np.int64) for name in ["keras", *runners]}
    for start in range(0, len(order), 64):
        rows = order[start:start + 64]
        tokens, segments = (array.astype(np.int32) for array in pad_batch([encoded[row] for row in rows]))
        predicted["keras"][rows] = np.asarray(classifier.model.predict_on_batch([tokens, segments])).argmax(-1)
        for name, run in runners.items():
            predicted[name][rows] = np.asarray(run(tokens, segments)).argmax(-1)
    result = {name: float(np.mean(labels == truth)) for name, labels in predicted.items()}
    for runtime in ("onnx", "litert"):
        result[f"{runtime} int8 equals float32"] = float(np.mean(predicted[f"{runtime} int8"]
                                                                 == predicted[f"{runtime} float32"]))
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a classifier's model directory (kbert train)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--data", help="a labelled file: accuracy of each engine on it")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args(argv)

    from kbert.serving.export import export_model, litert_runner, onnx_runner
    from kbert.tasks.classification import load_classifier

    classifier = load_classifier(args.model)
    with tempfile.TemporaryDirectory() as directory:
        paths = {f"{runtime} {precision}": os.path.join(directory, f"model.{precision}.{suffix}")
                 for runtime, suffix in (("onnx", "onnx"), ("litert", "tflite")) for precision in ("float32", "int8")}
        for name, path in paths.items():
            export_model(args.model, path, quantize="int8" if name.endswith("int8") else None)
        sizes = {"keras": os.path.getsize(os.path.join(args.model, "model.weights.h5")),
                 **{name: os.path.getsize(path) for name, path in paths.items()}}
        runners = {name: (onnx_runner if name.startswith("onnx") else litert_runner)(path)
                   for name, path in paths.items()}
    rng = np.random.default_rng(0)
    tokens = rng.integers(1000, classifier.tokenizer.vocab_size, (args.batch, args.length)).astype(np.int32)
    segments = np.zeros_like(tokens)
    engines = {"keras": lambda: classifier.model.predict_on_batch([tokens, segments]),
               **{name: (lambda run=run: run(tokens, segments)) for name, run in runners.items()}}
    for engine in engines.values():  # compiled, warmed
        engine()
    seconds = alternate(engines, args.rounds, args.calls)
    tokens_per_call = args.batch * args.length
    result = {"batch": args.batch, "length": args.length, "rounds": args.rounds, "engines": {}}
    print("| engine | tokens/s | speed against Keras float32 | size (MB) | size against Keras |\n|---|---|---|---|---|")
    for name, times in seconds.items():
        ratio = median_ratio(seconds["keras"], times)
        result["engines"][name] = {"tokens_per_second": tokens_per_call / statistics.median(times),
                                   "against_keras": ratio, "bytes": sizes[name]}
        print(f"| {name} | {tokens_per_call / statistics.median(times):.0f} | {describe(ratio)} | "
              f"{sizes[name] / 1e6:.1f} | {sizes[name] / sizes['keras']:.2f}x |")
    if args.data:
        result["accuracy"] = accuracies(classifier, runners, args.data)
        print("accuracy on", args.data, json.dumps(result["accuracy"]))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
