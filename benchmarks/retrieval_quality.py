"""One vector, sparse vectors or a vector per token? Dense, SPLADE and ColBERT retrieval trained from the same
backbone on the same pairs, beside a lexical baseline (BM25) and the hybrid of dense and SPLADE.

    python -m benchmarks.retrieval_quality --work /tmp/retrieval [--backbone PRETRAINED_DIR] [--pairs 16883]

The backbone is `kbert pretrain`'s BERT-small on the training reviews' text, as `benchmarks.embedding_quality`
makes it (or `--backbone`, a directory `kbert pretrain` wrote: its masked-LM head is what SPLADE starts from).
Each model trains on the same `--pairs` training pairs (each review's first half and its second half), with the
same epochs, batch, length and learning rate: `kbert train --task embed` (in-batch negatives), `--task sparse`
(SPLADE's loss and FLOPS) and `--task colbert` (MaxSim in-batch). Each is scored on the same retrieval set as
`benchmarks.embedding_quality`'s: each test review's first half (the query) finding its own second half among all
of them (nDCG@10, MRR@10, recall@100, by exact search). BM25 (k1 1.2, b 0.75) ranks the same documents by the
tokenizer's word pieces (the reviews' characters); the hybrid fuses the dense and the SPLADE rankings by
reciprocal ranks (`kbert evaluate --fuse`). Prints a table; `--json` writes the numbers.
"""

from __future__ import annotations

import os
import sys
from typing import Dict

import numpy as np

from benchmarks.embedding_quality import (SHARED, common_arguments, halves, kbert, read_reviews,
                                          write_results, write_training_files)

TRAINED = {"dense (in-batch)": ("embed", "--loss", "in_batch"), "SPLADE": ("sparse",), "ColBERT": ("colbert",)}


def retrieval_set(test) -> tuple:
    """The BEIR-style set: documents, queries and judgements (query i's relevant document is document i)."""
    texts = [text for text, _ in test]
    corpus = {f"d{i}": halves(text)[1] for i, text in enumerate(texts)}
    queries = {f"q{i}": halves(text)[0] for i, text in enumerate(texts)}
    return corpus, queries, {f"q{i}": {f"d{i}": 1} for i in range(len(texts))}


def bm25(tokenizer, corpus: Dict[str, str], queries: Dict[str, str], judged, k1: float = 1.2,
         b: float = 0.75) -> dict:
    """BM25's scores of the set, each text read as the tokenizer's ids (no [CLS] or [SEP]): a document's score is
    the sum, over the distinct terms of the query, of the term's idf times its saturated count in the document."""
    from scipy import sparse

    from kbert.embeddings.ranking_metrics import RANK_DEPTH, ranking_scores

    documents = [ids for ids, _ in tokenizer.ids_and_offsets(list(corpus.values()))]
    rows = np.repeat(np.arange(len(documents)), [len(ids) for ids in documents])
    counts = sparse.csr_matrix((np.ones(len(rows)), (rows, np.concatenate(documents))),
                               shape=(len(documents), tokenizer.vocab_size))  # duplicates summed: term counts
    lengths = np.asarray(counts.sum(axis=1)).ravel()
    seen = np.bincount(counts.indices, minlength=tokenizer.vocab_size)
    idf = np.log(1 + (len(documents) - seen + 0.5) / (seen + 0.5))
    norms = np.repeat(k1 * (1 - b + b * lengths / lengths.mean()), np.diff(counts.indptr))
    weights = counts.copy()
    weights.data = idf[counts.indices] * counts.data * (k1 + 1) / (counts.data + norms)
    ids, scores = list(corpus), {"ndcg@10": [], "mrr@10": [], "recall@100": []}
    for key, (query, _) in zip(queries, tokenizer.ids_and_offsets(list(queries.values()))):
        present = np.zeros(tokenizer.vocab_size)
        present[np.unique(query)] = 1
        ranking = np.argsort(-(weights @ present), kind="stable")[:RANK_DEPTH]
        for name, value in ranking_scores([judged[key].get(ids[i], 0) for i in ranking], judged[key]).items():
            scores[name].append(value)
    return {name: float(np.mean(values)) for name, values in scores.items()}


def main() -> int:
    parser = common_arguments(__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=None, help="training pairs (default: all 16,883 reviews')")
    parser.add_argument("--test", type=int, default=None, help="test reviews scored (default: all 2,079)")
    parser.add_argument("--config", default="configs/bert_small_chinese.json", help="the backbone pre-trained")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--maxlen", type=int, default=64)
    parser.add_argument("--lr", default="1e-4")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    train, test = read_reviews("train"), read_reviews("test")[:args.test]
    files = write_training_files(args.work, train[:args.pairs] if args.pairs else train)
    seconds: Dict[str, float] = {}
    backbone = args.backbone or os.path.join(args.work, "backbone")
    if not args.backbone:
        seconds["pretrain"] = kbert("pretrain", "--config", args.config, "--vocab",
                                    os.path.join(SHARED, "vocab", "chinese_vocab.txt"), "--train", files["corpus"],
                                    "--epochs", str(args.pretrain_epochs), "--maxlen", str(args.maxlen),
                                    "--batch-size", "64", "--out", backbone)
    from kbert.embeddings.embedder import Embedder
    from kbert.embeddings.evaluation import retrieval

    corpus, queries, judged = retrieval_set(test)
    models: Dict[str, Embedder] = {}
    results: Dict[str, dict] = {}
    for name, (task, *options) in TRAINED.items():
        out = os.path.join(args.work, task)
        seconds[name] = kbert("train", "--task", task, *options, "--checkpoint", backbone, "--train",
                              files["in_batch"], "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
                              "--maxlen", str(args.maxlen), "--lr", args.lr, "--out", out)
        models[name] = Embedder.load(out)
        results[name] = retrieval(models[name], corpus, queries, judged)
    results["BM25 (word pieces)"] = bm25(models["SPLADE"].tokenizer, corpus, queries, judged)
    fused = retrieval(models["dense (in-batch)"], corpus, queries, judged, fuse=models["SPLADE"])
    results["hybrid: dense + SPLADE (RRF)"] = {key: value for key, value in fused.items() if key != "models"}
    columns = ("ndcg@10", "mrr@10", "recall@100")
    print("\n| model | " + " | ".join(columns) + " | query terms or vectors | document terms or vectors | train s |")
    print("|---|" + "---:|" * (len(columns) + 3))
    for name, result in results.items():
        query = result.get("query_terms", result.get("query_vectors"))
        document = result.get("document_terms", result.get("document_vectors"))
        print(f"| {name} | " + " | ".join(f"{result[column]:.4f}" for column in columns)
              + f" | {'' if query is None else f'{query:.1f}'} | {'' if document is None else f'{document:.1f}'} "
              f"| {seconds.get(name, 0):.0f} |")
    write_results(args, results, seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
