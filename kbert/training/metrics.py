"""Precision, recall and F1 from counts: one definition for classes and for entities."""

from __future__ import annotations


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
