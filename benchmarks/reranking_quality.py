"""Does a trained reranker rank better than the first stage it reranks? nDCG@10, MRR@10 and pair accuracy of
`kbert train --task rerank` (pointwise and listwise) against lexical overlap, the raw backbone's cosines and
chance, on ranking sets made from the shared sentiment corpus's real reviews.

    python -m benchmarks.reranking_quality --work /tmp/rerank [--backbone PRETRAINED_DIR]

No real ranking set (queries with judged passages) can be had offline here, so the sets are made from real
text, as `benchmarks.embedding_quality`'s retrieval is: a review's first half is the query, its own second
half the relevant passage, and other reviews' second halves the irrelevant ones. The irrelevant ones are
the hardest a lexical first stage would return: of a pool of other second halves, those sharing the most
characters with the query. Training queries come from the training split only; the test sets from the
test split:

- ranking: each test query with its passage and the `--candidates - 1` others of the whole test split that
  share the most characters with it (a lexical first stage's top list), scored by nDCG@10 and MRR@10;
- pairs: each test query with its passage and its hardest other one, half relevant and half not, scored
  by pair accuracy (a score above 0.5 called relevant; chance is 0.5).

The backbone is `kbert pretrain`'s BERT-small (configs/bert_small_chinese.json) on the training reviews'
text, or `--backbone`. Prints a table; `--json` writes the numbers. `--quick` checks the script in a minute
(BERT-tiny pre-trained on 2,000 reviews, 200 training and 50 test queries): its figures mean nothing.
"""

from __future__ import annotations

import os
import sys
from typing import Dict, List, Sequence, Tuple

import numpy as np

from benchmarks.embedding_quality import (SHARED, common_arguments, halves, kbert, raw_embedder, read_reviews,
                                         write_results)

RERANK_LOSSES = ("pointwise", "listwise")


def overlaps(query: str, passages: Sequence[set]) -> np.ndarray:
    """How many distinct characters the query shares with each passage (a lexical first stage's score)."""
    characters = set(query)
    return np.array([len(characters & passage) for passage in passages], np.float64)


def hardest_others(queries: Sequence[str], passages: Sequence[str], count: int, pool: int,
                   seed: int) -> List[List[int]]:
    """For query i (whose own passage is passages[i]), the `count` other passages sharing the most characters
    with it, among `pool` drawn at random (all of them where `pool` is 0)."""
    rng = np.random.default_rng(seed)
    sets = [set(passage) for passage in passages]
    chosen = []
    for index, query in enumerate(queries):
        others = np.delete(np.arange(len(passages)), index)
        if pool:
            others = rng.choice(others, size=min(pool, len(others)), replace=False)
        scores = overlaps(query, [sets[other] for other in others])
        chosen.append([int(others[at]) for at in np.argsort(-scores, kind="stable")[:count]])
    return chosen


def write_pairs(path: str, rows: Sequence[Tuple[str, str, int]]) -> str:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("query\tpassage\tlabel\n")
        handle.writelines(f"{query}\t{passage}\t{label}\n" for query, passage, label in rows)
    return path


def judged_rows(queries: Sequence[str], passages: Sequence[str], others: Sequence[Sequence[int]]):
    return [row for index, query in enumerate(queries)
            for row in [(query, passages[index], 1)] + [(query, passages[other], 0) for other in others[index]]]


def split_reviews(reviews) -> Tuple[List[str], List[str]]:
    """Queries and their passages (first and second halves), one a review, tabs made spaces, repeated
    queries left out (a query's passages are grouped by its text)."""
    seen, queries, passages = set(), [], []
    for text, _ in reviews:
        query, passage = (part.replace("\t", " ").strip() for part in halves(text))
        if query and passage and query not in seen:
            seen.add(query)
            queries.append(query)
            passages.append(passage)
    return queries, passages


def baselines(pairs_path: str, backbone: str, maxlen: int, seed: int) -> Dict[str, Dict[str, float]]:
    """The rankings a reranker has to beat: chance, characters shared with the query, and the raw backbone's
    cosines (mean-pooled, as a first-stage bi-encoder before any training)."""
    from kbert.tasks.reranking import ranking_of, read_judged_pairs

    pairs, _ = read_judged_pairs(pairs_path)
    rng = np.random.default_rng(seed)
    chance = [ranking_of(pairs, rng.random(len(pairs))) for _ in range(5)]
    # Ties broken at random: in file order the relevant passage, written first, would win every tie.
    lexical = np.array([overlaps(pair.query, [set(pair.passage)])[0] + 1e-6 * rng.random() for pair in pairs])
    embedder = raw_embedder(backbone, maxlen)
    texts = sorted({pair.query for pair in pairs} | {pair.passage for pair in pairs})
    vectors = dict(zip(texts, embedder.encode(texts, normalize=True)))
    cosines = np.array([vectors[pair.query] @ vectors[pair.passage] for pair in pairs])
    return {"chance (mean of 5 shuffles)": {name: float(np.mean([run[name] for run in chance]))
                                            for name in chance[0]},
            "characters shared (first stage)": ranking_of(pairs, lexical),
            "raw backbone, cosine": ranking_of(pairs, cosines)}


def main() -> int:
    parser = common_arguments(__doc__.split("\n\n")[0])
    parser.add_argument("--train-queries", type=int, default=6000, help="training queries (of the training split)")
    parser.add_argument("--negatives", type=int, default=3, help="irrelevant passages a training query")
    parser.add_argument("--candidates", type=int, default=10, help="passages a test query ranks")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--maxlen", type=int, default=128, help="a query and passage together, in tokens")
    parser.add_argument("--lr", default="5e-5")
    parser.add_argument("--test-queries", type=int, help="the first N test queries only (a quick run)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a minute's check of the script (BERT-tiny)")
    args = parser.parse_args()
    config, pretraining_reviews = "configs/bert_small_chinese.json", None
    if args.quick:
        config, pretraining_reviews = "configs/bert_tiny.json", 2000
        args.train_queries, args.test_queries, args.maxlen = 200, 50, 64
    os.makedirs(args.work, exist_ok=True)
    train_reviews = read_reviews("train")
    train_queries, train_passages = split_reviews(train_reviews)
    order = np.random.default_rng(args.seed).permutation(len(train_queries))[:args.train_queries]
    train_queries, train_passages = [train_queries[i] for i in order], [train_passages[i] for i in order]
    test_queries, test_passages = split_reviews(read_reviews("test"))
    test_queries, test_passages = test_queries[:args.test_queries], test_passages[:args.test_queries]

    train_file = write_pairs(os.path.join(args.work, "train.tsv"), judged_rows(
        train_queries, train_passages, hardest_others(train_queries, train_passages, args.negatives, 64, args.seed)))
    ranked_others = hardest_others(test_queries, test_passages, args.candidates - 1, 0, args.seed)
    ranking_file = write_pairs(os.path.join(args.work, "ranking.tsv"),
                               judged_rows(test_queries, test_passages, ranked_others))
    pairs_file = write_pairs(os.path.join(args.work, "pairs.tsv"),
                             judged_rows(test_queries, test_passages, [others[:1] for others in ranked_others]))
    print(f"kbert: {len(train_queries)} training queries ({args.negatives} irrelevant passages each), "
          f"{len(test_queries)} test queries ({args.candidates} passages each)", file=sys.stderr)

    seconds = {}
    backbone = args.backbone or os.path.join(args.work, "backbone")
    if not args.backbone:
        corpus = os.path.join(args.work, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as handle:
            handle.writelines(f"{text}\n" for text, _ in train_reviews[:pretraining_reviews])
        vocab = os.path.join(SHARED, "vocab", "chinese_vocab.txt")
        seconds["pretrain"] = kbert("pretrain", "--config", config, "--vocab", vocab,
                                    "--train", corpus, "--epochs", str(args.pretrain_epochs), "--maxlen", "64",
                                    "--batch-size", "64", "--out", backbone)
    results = baselines(ranking_file, backbone, args.maxlen, args.seed)
    from kbert.tasks.reranking import evaluate

    for loss in RERANK_LOSSES:
        out = os.path.join(args.work, f"rerank-{loss}")
        name = f"reranker, {loss}"
        seconds[name] = kbert("train", "--task", "rerank", "--rerank-loss", loss, "--group-size",
                              str(args.negatives + 1), "--checkpoint", backbone, "--train", train_file,
                              "--epochs", str(args.epochs), "--batch-size", str(args.batch_size), "--maxlen",
                              str(args.maxlen), "--lr", args.lr, "--seed", str(args.seed), "--out", out)
        results[name] = {**evaluate(out, ranking_file, 64),
                         "pair accuracy": evaluate(out, pairs_file, 64)["accuracy"]}
    print(f"\n{'ranked by':<34}{'nDCG@10':>10}{'MRR@10':>10}{'pair accuracy':>15}{'train s':>10}")
    for name, result in results.items():
        accuracy = f"{result['pair accuracy']:.4f}" if "pair accuracy" in result else "-"
        print(f"{name:<34}{result['ndcg@10']:>10.4f}{result['mrr@10']:>10.4f}{accuracy:>15}"
              f"{seconds.get(name, 0):>10.0f}")
    write_results(args, results, seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
