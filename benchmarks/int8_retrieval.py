"""What int8 costs in retrieval: one embedding model's nDCG@10 in float32 (Keras), onnxruntime's dynamic int8 and
OpenVINO's static int8, and each text's cosine with the float32 vector.

    python -m benchmarks.int8_retrieval --model PATH/TO/all-MiniLM-L6-v2 [--count 2000]

The retrieval set is `benchmarks.retrieval_quality`'s: each of the first `--count` test reviews' first half (the
query) finding its own second half among all of them (exact search, `kbert.embeddings.evaluation.retrieval`).
OpenVINO's int8 is calibrated on 300 validation reviews (`--calibration`'s rule: other texts of the same kind).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from benchmarks.embedding_quality import read_reviews
from benchmarks.retrieval_quality import retrieval_set

RUNTIMES = {"float32 (Keras)": None, "onnxruntime int8 (dynamic)": ("onnxruntime", "int8"),
            "OpenVINO int8 (static)": ("openvino", "int8")}


def main(argv=None) -> int:
    from kbert.embeddings.embedder import Embedder
    from kbert.embeddings.evaluation import retrieval
    from kbert.serving.runtimes import Runtime, onnx_embedder
    from kbert.serving.openvino import calibration_sample

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a sentence-transformers folder")
    parser.add_argument("--count", type=int, default=2000, help="test reviews in the retrieval set (default: 2000)")
    args = parser.parse_args(argv)
    corpus, queries, judged = retrieval_set(read_reviews("test")[:args.count])
    calibration = calibration_sample([text for text, _ in read_reviews("valid")], "the validation reviews")
    texts = list(corpus.values()) + list(queries.values())
    print(f"{len(queries)} queries, {len(corpus)} documents; OpenVINO calibrated on {len(calibration)} validation "
          "reviews\n")
    print("| runtime | nDCG@10 | MRR@10 | cosine to float32 (median, lowest) |")
    print("|---|---:|---:|---:|")
    reference = None
    for name, runtime in RUNTIMES.items():
        embedder = Embedder.load(args.model, dtype="float32")
        if runtime:
            embedder.model = onnx_embedder(embedder, Runtime(*runtime, calibration=calibration))
        scores = retrieval(embedder, corpus, queries, judged)
        vectors = embedder.encode(texts)
        reference = vectors if reference is None else reference
        cosines = (vectors * reference).sum(1) / np.linalg.norm(vectors, axis=1) / np.linalg.norm(reference, axis=1)
        print(f"| {name} | {scores['ndcg@10']:.4f} | {scores['mrr@10']:.4f} | {np.median(cosines):.5f}, "
              f"{cosines.min():.5f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
