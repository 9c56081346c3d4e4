"""Does contrastive training make better embeddings? MTEB-style scores of a backbone before and after
`kbert train --task embed` with each loss, on the shared sentiment corpus.

    python -m benchmarks.embedding_quality --work /tmp/quality [--backbone PRETRAINED_DIR]

The backbone is `kbert pretrain`'s BERT-small (configs/bert_small_chinese.json) on the training
reviews' text (or `--backbone`, a directory `kbert pretrain` wrote). Each model is trained on the
training split only (16,883 reviews):

- in_batch: each review's first half and its second half as a pair (no labels);
- simcse: each review alone, itself its positive through dropout (no labels);
- cosent: pairs of reviews scored 1 when their sentiment agrees, else 0 (the labels, as pair scores).

and scored on the 2,111 test reviews: classification (a logistic regression fitted on 2,000 training
reviews' vectors), clustering (k-means, k = 2, V-measure against the sentiment), STS (test pairs
scored by agreement, Spearman) and retrieval (each test review's first half finding its own second
half among all 2,111: nDCG@10, MRR@10). Prints a table; `--json` writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPOSITORY), "shared")
LOSSES = ("in_batch", "simcse", "cosent")


def read_reviews(split: str):
    path = os.path.join(SHARED, "data", "sentiment", f"sentiment.{split}.data")
    with open(path, encoding="utf-8") as handle:
        rows = [line.rstrip("\n").split("\t") for line in handle if line.strip()]
    return [(text, label) for text, label in rows if len(text) >= 8]


def halves(text: str):
    return text[:len(text) // 2], text[len(text) // 2:]


def write_training_files(work: str, train) -> dict:
    files = {"corpus": os.path.join(work, "corpus.txt"), "in_batch": os.path.join(work, "pairs.tsv"),
             "simcse": os.path.join(work, "single.txt"), "cosent": os.path.join(work, "scored.tsv")}
    clean = [(text.replace("\t", " "), label) for text, label in train]
    with open(files["corpus"], "w", encoding="utf-8") as handle:
        handle.writelines(f"{text}\n" for text, _ in clean)
    with open(files["simcse"], "w", encoding="utf-8") as handle:
        handle.writelines(f"{text}\n" for text, _ in clean)
    with open(files["in_batch"], "w", encoding="utf-8") as handle:
        handle.writelines("{}\t{}\n".format(*halves(text)) for text, _ in clean)
    with open(files["cosent"], "w", encoding="utf-8") as handle:
        handle.writelines(f"{a}\t{b}\t{int(la == lb)}\n" for (a, la), (b, lb) in zip(clean[::2], clean[1::2]))
    return files


def kbert(*arguments: str) -> float:
    """Runs a kbert command; its seconds."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kbert", *arguments], check=True, cwd=REPOSITORY)
    return time.perf_counter() - start


def raw_embedder(backbone: str, maxlen: int):
    """The pre-trained backbone, mean-pooled and normalised, untrained for embeddings."""
    from kbert.builder import build_transformer_model
    from kbert.embeddings.embedder import Embedder
    from kbert.embeddings.kinds import DenseOutput, embedding_model
    from kbert.tokenizers import load_tokenizer

    bert = build_transformer_model(os.path.join(backbone, "bert_config.json"), backbone)
    tokenizer = load_tokenizer(os.path.join(backbone, "vocab.txt"))
    modules = DenseOutput("mean").modules(int(bert.outputs[0].shape[-1]), normalize=True)  # pooled, normalised
    return Embedder(embedding_model(bert, "mean", modules), tokenizer, maxlen, True, backbone, bert, "mean")


def scores(embedder, train, test) -> dict:
    from kbert.tasks import embedding_evaluation as evaluation

    texts, labels = [text for text, _ in test], [label for _, label in test]
    fitted = train[:2000]
    result = {}
    result.update(evaluation.classification(embedder, [t for t, _ in fitted], [l for _, l in fitted], texts, labels))
    result.update(evaluation.clustering(embedder, texts, labels))
    pairs = list(zip(test[::2], test[1::2]))
    result.update(evaluation.sts(embedder, [a for (a, _), _ in pairs], [b for _, (b, _) in pairs],
                                 [float(la == lb) for (_, la), (_, lb) in pairs]))
    corpus = {f"d{i}": halves(text)[1] for i, text in enumerate(texts)}
    queries = {f"q{i}": halves(text)[0] for i, text in enumerate(texts)}
    judged = {f"q{i}": {f"d{i}": 1} for i in range(len(texts))}
    result.update(evaluation.retrieval(embedder, corpus, queries, judged))
    return result


def common_arguments(description: str) -> argparse.ArgumentParser:
    """The options the quality benchmarks share: the work folder, the backbone, the results file."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--work", required=True, help="a new folder for the data, models and results")
    parser.add_argument("--backbone", help="a kbert pretrain directory (default: pre-train BERT-small here)")
    parser.add_argument("--pretrain-epochs", type=int, default=3)
    parser.add_argument("--json", help="write the results here")
    return parser


def write_results(args, results: dict, seconds: dict) -> None:
    """The results, the seconds each model trained and the options, as JSON in `--json` (where given)."""
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"results": results, "seconds": seconds, "args": vars(args)}, handle, indent=1)


def main() -> int:
    parser = common_arguments(__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=1, help="contrastive training's epochs")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--maxlen", type=int, default=64)
    parser.add_argument("--lr", default="5e-5")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    train, test = read_reviews("train"), read_reviews("test")
    files = write_training_files(args.work, train)
    vocab = os.path.join(SHARED, "vocab", "chinese_vocab.txt")
    seconds = {}
    backbone = args.backbone or os.path.join(args.work, "backbone")
    if not args.backbone:
        seconds["pretrain"] = kbert("pretrain", "--config", "configs/bert_small_chinese.json", "--vocab", vocab,
                                    "--train", files["corpus"], "--epochs", str(args.pretrain_epochs),
                                    "--maxlen", str(args.maxlen), "--batch-size", "64", "--out", backbone)
    results = {"raw (mean-pooled backbone)": scores(raw_embedder(backbone, args.maxlen), train, test)}
    from kbert.embeddings.embedder import Embedder

    for loss in LOSSES:
        out = os.path.join(args.work, f"embed-{loss}")
        seconds[loss] = kbert("train", "--task", "embed", "--loss", loss, "--checkpoint", backbone, "--train",
                              files[loss], "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
                              "--maxlen", str(args.maxlen), "--lr", args.lr, "--out", out)
        results[loss] = scores(Embedder.load(out), train, test)
    columns = ("accuracy", "macro_f1", "v_measure", "spearman", "ndcg@10", "mrr@10")
    print(f"\n{'model':<28}" + "".join(f"{name:>11}" for name in columns) + f"{'train s':>10}")
    for name, result in results.items():
        print(f"{name:<28}" + "".join(f"{result[column]:>11.4f}" for column in columns)
              + f"{seconds.get(name, 0):>10.0f}")
    write_results(args, results, seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
