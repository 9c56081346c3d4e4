"""Ranking metrics of one ranked list, as pytrec_eval (and so BEIR and MTEB) define them: nDCG@10 with linear
gains, MRR@10 and recall@100. Shared by the embedding models' retrieval and the rerankers' evaluation."""

from __future__ import annotations

from typing import Dict, Sequence

import numpy as np

RANK_DEPTH = 100  # the documents kept per query: recall@100 needs them


def ranking_scores(relevance: Sequence[int], judged: Dict[str, int]) -> Dict[str, float]:
    """nDCG@10, MRR@10 and recall@100 of one ranked list, given each ranked document's relevance and all of
    the query's judgements.

    >>> scores = ranking_scores([0, 1, 0], {"a": 1, "b": 1})  # one of two relevant documents, second
    >>> {name: round(value, 4) for name, value in scores.items()}
    {'ndcg@10': 0.3869, 'mrr@10': 0.5, 'recall@100': 0.5}
    """
    gains = np.asarray(relevance[:10], np.float64)
    discounts = 1 / np.log2(np.arange(2, 12))
    ideal = np.sort(np.array([value for value in judged.values() if value > 0], np.float64))[::-1][:10]
    ndcg = float((gains * discounts[:len(gains)]).sum() / (ideal * discounts[:len(ideal)]).sum()) if ideal.size else 0.0
    first = next((rank for rank, value in enumerate(relevance[:10], start=1) if value > 0), None)
    relevant = sum(1 for value in judged.values() if value > 0)
    found = sum(1 for value in relevance[:RANK_DEPTH] if value > 0)
    return {"ndcg@10": ndcg, "mrr@10": 1 / first if first else 0.0, "recall@100": found / relevant if relevant else 0.0}
