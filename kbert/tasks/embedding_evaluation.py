"""An embedding model scored as MTEB scores one, on the user's own data: STS, retrieval, classification
and clustering (`kbert evaluate --model EMBEDDING_MODEL`).

- STS: Spearman's correlation of the cosines of text pairs with their gold scores
  (`text<TAB>text_b<TAB>score`).
- retrieval: a BEIR folder (`corpus.jsonl`, `queries.jsonl`, `qrels/test.tsv`, the layout MTEB's
  retrieval sets use): each query's corpus ranked by cosine, exactly, in NumPy; nDCG@10 (linear
  gains, as pytrec_eval's), MRR@10 and recall@100. A corpus has to fit in memory as float32
  vectors (a million 384-dimensional ones: 1.5 GB); beyond that, an index (FAISS, a vector
  database) is the tool, which kbert leaves out of its install.
- classification: a logistic regression fitted on the frozen vectors of labelled training texts,
  scored on the test texts (accuracy, macro F1), as MTEB's classification tasks do.
- clustering: k-means (k: the number of labels) on the vectors, scored by V-measure against the
  labels.
"""

from __future__ import annotations

import csv
import json
import os
from typing import Dict, List, Sequence, Tuple

import numpy as np

from kbert.errors import DataError
from kbert.training.metrics import spearman

RANK_DEPTH = 100  # the documents kept per query: recall@100 needs them


def sts(embedder, first: Sequence[str], second: Sequence[str], scores: Sequence[float]) -> Dict[str, float]:
    """`{"spearman", "pairs"}`: the cosines of each pair ranked against the gold scores."""
    a, b = embedder.encode(first, normalize=True), embedder.encode(second, normalize=True)
    return {"spearman": spearman((a * b).sum(1), np.asarray(scores, np.float64)), "pairs": len(first)}


# --- retrieval ---------------------------------------------------------------------------------------

def read_beir(folder: str, split: str = "test") -> Tuple[Dict[str, str], Dict[str, str], Dict[str, Dict[str, int]]]:
    """A BEIR folder's corpus `{id: text}` (title and text joined), queries `{id: text}` and judgements
    `{query id: {document id: relevance}}` of `qrels/SPLIT.tsv`; a missing file or bad line is named."""
    corpus = {row["_id"]: " ".join(part for part in (row.get("title"), row.get("text")) if part)
              for row in _json_lines(os.path.join(folder, "corpus.jsonl"))}
    queries = {row["_id"]: row["text"] for row in _json_lines(os.path.join(folder, "queries.jsonl"))}
    path = os.path.join(folder, "qrels", f"{split}.tsv")
    if not os.path.isfile(path):
        raise DataError(f"{path}: no relevance judgements; a BEIR folder has qrels/{split}.tsv "
                        "(query-id<TAB>corpus-id<TAB>score, with a header)")
    judgements: Dict[str, Dict[str, int]] = {}
    with open(path, encoding="utf-8", newline="") as handle:
        for line, row in enumerate(csv.reader(handle, delimiter="\t"), start=1):
            if line == 1 and row and not row[-1].lstrip("-").isdigit():
                continue  # the header
            if len(row) != 3 or not row[2].lstrip("-").isdigit():
                raise DataError(f"{path}, line {line}: expected query-id<TAB>corpus-id<TAB>score (a whole number)")
            if row[0] not in queries or row[1] not in corpus:
                raise DataError(f"{path}, line {line}: {'query' if row[0] not in queries else 'document'} "
                                f"{row[0] if row[0] not in queries else row[1]!r} is not in the folder's "
                                f"{'queries' if row[0] not in queries else 'corpus'}.jsonl")
            judgements.setdefault(row[0], {})[row[1]] = int(row[2])
    return corpus, queries, judgements


def _json_lines(path: str) -> List[dict]:
    if not os.path.isfile(path):
        raise DataError(f"{path}: missing; a BEIR folder holds corpus.jsonl, queries.jsonl and qrels/test.tsv")
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except ValueError:
                raise DataError(f"{path}, line {line}: not JSON") from None
            if not isinstance(row, dict) or "_id" not in row or not isinstance(row.get("text"), str):
                raise DataError(f"{path}, line {line}: expected an object with \"_id\" and \"text\"")
            row["_id"] = str(row["_id"])
            rows.append(row)
    return rows


def retrieval(embedder, corpus: Dict[str, str], queries: Dict[str, str], judgements: Dict[str, Dict[str, int]],
              batch_size: int = 64) -> Dict[str, float]:
    """`{"ndcg@10", "mrr@10", "recall@100", "queries", "documents"}` of exact cosine search, averaged over
    the judged queries. Queries and documents each get the model's prompt for their role, where it has one
    (`Embedder.prompt_name_for`: e5's `query: ` and `passage: `)."""
    ids = list(corpus)
    documents = embedder.encode([corpus[key] for key in ids], batch_size, normalize=True,
                                prompt_name=embedder.prompt_name_for("document"))
    asked = [key for key in queries if key in judgements]
    vectors = embedder.encode([queries[key] for key in asked], batch_size, normalize=True,
                              prompt_name=embedder.prompt_name_for("query"))
    scores = {"ndcg@10": [], "mrr@10": [], "recall@100": []}
    for start in range(0, len(asked), 256):  # a block of queries at a time: [256, documents] scores in memory
        similarity = vectors[start:start + 256] @ documents.T
        depth = min(RANK_DEPTH, len(ids))
        top = np.argpartition(-similarity, depth - 1, axis=1)[:, :depth]
        for row, key in enumerate(asked[start:start + 256]):
            ranked = top[row][np.argsort(-similarity[row, top[row]], kind="stable")]
            relevance = [judgements[key].get(ids[index], 0) for index in ranked]
            for name, value in ranking_scores(relevance, judgements[key]).items():
                scores[name].append(value)
    return {**{name: float(np.mean(values)) for name, values in scores.items()}, "queries": len(asked),
            "documents": len(ids)}


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


# --- classification and clustering -------------------------------------------------------------------

def classification(embedder, train_texts: Sequence[str], train_labels: Sequence[str], test_texts: Sequence[str],
                   test_labels: Sequence[str], batch_size: int = 64) -> Dict[str, float]:
    """`{"accuracy", "macro_f1", "train", "test"}` of a logistic regression on the frozen vectors."""
    names = sorted(set(train_labels))
    unknown = sorted(set(test_labels) - set(names))
    if unknown:
        raise DataError(f"the test labels {', '.join(map(repr, unknown[:5]))} are not among the training labels")
    index = {name: number for number, name in enumerate(names)}
    weights = fit_logistic_regression(embedder.encode(train_texts, batch_size),
                                      np.array([index[label] for label in train_labels]), len(names))
    predicted = predict_logistic_regression(weights, embedder.encode(test_texts, batch_size))
    truth = np.array([index[label] for label in test_labels])
    f1 = []
    for label in range(len(names)):
        hits = np.sum((predicted == label) & (truth == label))
        precision = hits / max(np.sum(predicted == label), 1)
        recall = hits / max(np.sum(truth == label), 1)
        f1.append(2 * precision * recall / (precision + recall) if precision + recall else 0.0)
    return {"accuracy": float(np.mean(predicted == truth)), "macro_f1": float(np.mean(f1)),
            "train": len(train_texts), "test": len(test_texts)}


def fit_logistic_regression(features: np.ndarray, labels: np.ndarray, classes: int, l2: float = 1e-4,
                            steps: int = 500) -> np.ndarray:
    """A multinomial logistic regression's `[features + 1, classes]` weights (the last row the bias), by
    gradient descent with Nesterov momentum on standardised features (a convex loss: the step is set from
    its curvature bound, so it converges without tuning).

    >>> x = np.array([[0.0], [1.0], [4.0], [5.0]]); y = np.array([0, 0, 1, 1])
    >>> predict_logistic_regression(fit_logistic_regression(x, y, 2), np.array([[0.5], [4.5]])).tolist()
    [0, 1]
    """
    mean, scale = features.mean(0), features.std(0) + 1e-8
    x = np.hstack([(features - mean) / scale, np.ones((len(features), 1))])
    targets = np.eye(classes)[labels]
    step = 1 / (0.5 * np.linalg.norm(x, 2) ** 2 / len(x) + l2)
    weights = velocity = np.zeros((x.shape[1], classes))
    for _ in range(steps):
        ahead = weights + 0.9 * velocity
        logits = x @ ahead
        probabilities = np.exp(logits - logits.max(1, keepdims=True))
        probabilities /= probabilities.sum(1, keepdims=True)
        gradient = x.T @ (probabilities - targets) / len(x) + l2 * ahead
        velocity = 0.9 * velocity - step * gradient
        weights = weights + velocity
    # Folded back, so that the weights apply to the raw features.
    folded = weights[:-1] / scale[:, None]
    return np.vstack([folded, weights[-1:] - mean @ folded])


def predict_logistic_regression(weights: np.ndarray, features: np.ndarray) -> np.ndarray:
    return np.argmax(features @ weights[:-1] + weights[-1], axis=1)


def clustering(embedder, texts: Sequence[str], labels: Sequence[str], batch_size: int = 64,
               seed: int = 0) -> Dict[str, float]:
    """`{"v_measure", "clusters", "texts"}`: k-means on the unit vectors, k the number of labels."""
    names = sorted(set(labels))
    truth = np.array([names.index(label) for label in labels])
    assigned = kmeans(embedder.encode(texts, batch_size, normalize=True), len(names), seed)
    return {"v_measure": v_measure(truth, assigned), "clusters": len(names), "texts": len(texts)}


def kmeans(vectors: np.ndarray, k: int, seed: int = 0, restarts: int = 5, steps: int = 100) -> np.ndarray:
    """Each vector's cluster by Lloyd's k-means from k-means++ starts; of `restarts` runs, the tightest."""
    rng = np.random.default_rng(seed)
    best, best_inertia = None, np.inf
    for _ in range(restarts):
        centres = vectors[[rng.integers(len(vectors))]]
        while len(centres) < k:  # k-means++: far points are likelier starts
            distances = ((vectors[:, None] - centres[None]) ** 2).sum(-1).min(1)
            centres = np.vstack([centres, vectors[rng.choice(len(vectors), p=distances / distances.sum())]])
        for _ in range(steps):
            assigned = ((vectors[:, None] - centres[None]) ** 2).sum(-1).argmin(1)
            moved = np.array([vectors[assigned == c].mean(0) if np.any(assigned == c) else centres[c]
                              for c in range(k)])
            if np.allclose(moved, centres):
                break
            centres = moved
        inertia = ((vectors - centres[assigned]) ** 2).sum()
        if inertia < best_inertia:
            best, best_inertia = assigned, inertia
    return best


def v_measure(truth: np.ndarray, assigned: np.ndarray) -> float:
    """The harmonic mean of homogeneity and completeness (Rosenberg and Hirschberg, 2007).

    >>> truth = np.array([0, 0, 1, 1])
    >>> v_measure(truth, np.array([1, 1, 0, 0])), v_measure(truth, np.array([0, 1, 0, 1]))
    (1.0, 0.0)
    """
    table = np.zeros((truth.max() + 1, assigned.max() + 1))
    np.add.at(table, (truth, assigned), 1)
    joint = table / table.sum()

    def entropy(p):
        p = p[p > 0]
        return float(-(p * np.log(p)).sum())

    h_truth, h_assigned = entropy(joint.sum(1)), entropy(joint.sum(0))
    mutual = h_truth + h_assigned - entropy(joint.ravel())
    homogeneity = mutual / h_truth if h_truth else 1.0
    completeness = mutual / h_assigned if h_assigned else 1.0
    total = homogeneity + completeness
    return float(2 * homogeneity * completeness / total) if total else 0.0


def evaluate(model: str, data: str, train: "str | None" = None, batch_size: int = 64) -> dict:
    """An embedding model (a sentence-transformers folder, a `kbert train --task embed` directory, a name) scored
    on `data`, by what it holds: a folder is a BEIR retrieval set; with `train` (labelled texts), `data`'s
    labelled texts are classified; a file of scored pairs (`text<TAB>text_b<TAB>score`) is STS; labelled texts
    (`text<TAB>label`) alone are clustered. Returns the scores with `"kind"` and `"data"`."""
    from kbert.tasks.embedding import Embedder, read_text_groups
    from kbert.training.data import read_examples

    embedder = Embedder.load(model)
    if os.path.isdir(data):
        return {"kind": "retrieval", "data": data, **retrieval(embedder, *read_beir(data), batch_size=batch_size)}
    if train is not None:
        fitted, _ = read_examples(train)
        scored, _ = read_examples(data)
        return {"kind": "classification", "data": data, **classification(
            embedder, [e.text for e in fitted], [e.label for e in fitted], [e.text for e in scored],
            [e.label for e in scored], batch_size)}
    groups, _ = read_text_groups(data)
    if groups[0].score is not None:
        return {"kind": "sts", "data": data, **sts(embedder, [group.texts[0] for group in groups],
                                                   [group.texts[1] for group in groups],
                                                   [group.score for group in groups])}
    examples, _ = read_examples(data)
    return {"kind": "clustering", "data": data, **clustering(embedder, [e.text for e in examples],
                                                             [e.label for e in examples], batch_size)}
