"""Scores computed outside Keras: precision, recall and F1 from counts (one definition for classes and
for entities), and Spearman's rank correlation (embeddings' STS score)."""

from __future__ import annotations

import numpy as np


def precision_recall_f1(hits: int, predicted: int, true: int) -> dict:
    """Precision, recall, F1 and support (`true`) from the counts of hits, predictions and true items.

    An empty denominator gives 0, as conlleval and scikit-learn's default do.

    >>> precision_recall_f1(hits=3, predicted=4, true=6)
    {'precision': 0.75, 'recall': 0.5, 'f1': 0.6, 'support': 6}
    >>> precision_recall_f1(0, 0, 0)["f1"]
    0.0
    """
    precision = hits / predicted if predicted else 0.0
    recall = hits / true if true else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": float(precision), "recall": float(recall), "f1": float(f1), "support": int(true)}


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation: Pearson's of the ranks, ties given their average rank.

    >>> spearman(np.array([0.1, 0.5, 0.3]), np.array([1.0, 3.0, 2.0])), spearman(np.array([1, 2]), np.array([2, 1]))
    (1.0, -1.0)
    """
    ranks = [_average_ranks(np.asarray(values, np.float64)) for values in (x, y)]
    centred = [rank - rank.mean() for rank in ranks]
    scale = np.sqrt((centred[0] ** 2).sum() * (centred[1] ** 2).sum())
    return float((centred[0] * centred[1]).sum() / scale) if scale else 0.0


def _average_ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values), dtype=np.float64)
    _, inverse = np.unique(values, return_inverse=True)
    return (np.bincount(inverse, ranks) / np.bincount(inverse))[inverse]
