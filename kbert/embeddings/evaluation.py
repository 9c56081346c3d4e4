"""An embedding model scored as MTEB scores one, on the user's own data: STS, retrieval, classification
and clustering (`kbert evaluate --model EMBEDDING_MODEL`).

- STS: Spearman's correlation of the cosines of text pairs with their gold scores
  (`text<TAB>text_b<TAB>score`).
- retrieval: a BEIR folder (`corpus.jsonl`, `queries.jsonl`, `qrels/test.tsv`, the layout MTEB's
  retrieval sets use): each query's corpus ranked by cosine (a sparse encoder's: by the dot product of its
  sparse vectors, through an inverted index; a multi-vector encoder's: by MaxSim over every token's vector),
  exactly, in NumPy; nDCG@10 (linear
  gains, as pytrec_eval's), MRR@10 and recall@100. A corpus has to fit in memory as float32
  vectors (a million 384-dimensional ones: 1.5 GB); beyond that, an index (FAISS, a vector
  database) is the tool, which kbert leaves out of its install.
- classification: scikit-learn's logistic regression fitted on the frozen vectors of labelled
  training texts, scored on the test texts (accuracy, macro F1 over the labels either holds), as MTEB's
  classification tasks do.
- clustering: scikit-learn's k-means (k: the number of labels) on the vectors, scored by V-measure
  against the labels, as MTEB's clustering tasks do.

Classification and clustering use scikit-learn, the library MTEB scores with (`pip install
'kbert[eval]'`); ranking is counted here (`kbert.embeddings.ranking_metrics`), with pytrec_eval's definitions.
"""

from __future__ import annotations

import csv
import json
import os
from typing import Dict, List, Sequence, Tuple

import numpy as np

from kbert.errors import DataError, KbertError, shown
from kbert.embeddings.ranking_metrics import RANK_DEPTH, ranking_scores
from kbert.training.metrics import spearman


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
            if len(row) != 3 or not row[2].lstrip("-").isdigit() or len(row[2]) > 18:
                raise DataError(f"{path}, line {line}: expected query-id<TAB>corpus-id<TAB>score (a whole number "
                                "of at most 18 digits)")
            if row[0] not in queries or row[1] not in corpus:
                raise DataError(f"{path}, line {line}: {'query' if row[0] not in queries else 'document'} "
                                f"{row[0] if row[0] not in queries else row[1]!r} is not in the folder's "
                                f"{'queries' if row[0] not in queries else 'corpus'}.jsonl")
            if not queries[row[0]].strip():  # embedded and scored without a word of it
                raise DataError(f"{path}, line {line}: query {row[0]!r} is judged, but its text in queries.jsonl is "
                                "empty; give it its text, or leave its judgements out")
            judgements.setdefault(row[0], {})[row[1]] = int(row[2])
    return corpus, queries, judgements


def _json_lines(path: str) -> List[dict]:
    if not os.path.isfile(path):
        raise DataError(f"{path}: missing; a BEIR folder holds corpus.jsonl, queries.jsonl and qrels/test.tsv")
    rows, seen = [], {}
    with open(path, encoding="utf-8-sig") as handle:  # -sig: a byte-order mark before the first line
        for line, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except (ValueError, RecursionError):
                raise DataError(f"{path}, line {line}: not JSON (or nested too deeply to read)") from None
            if not isinstance(row, dict) or "_id" not in row or not isinstance(row.get("text"), str):
                raise DataError(f"{path}, line {line}: expected an object with \"_id\" and \"text\"")
            if row.get("title") is not None and not isinstance(row["title"], str):
                raise DataError(f"{path}, line {line}: \"title\" {shown(row['title'])}: expected a string (or none)")
            row["_id"] = str(row["_id"])
            if row["_id"] in seen:  # a dict would keep the last silently, and score against the wrong text
                raise DataError(f"{path}, line {line}: _id {row['_id']!r} again (first on line {seen[row['_id']]}); "
                                "every _id must be unique")
            seen[row["_id"]] = line
            rows.append(row)
    return rows


def retrieval(embedder, corpus: Dict[str, str], queries: Dict[str, str], judgements: Dict[str, Dict[str, int]],
              batch_size: int = 64, fuse=None) -> Dict[str, float]:
    """`{"ndcg@10", "mrr@10", "recall@100", "queries", "documents"}` of exact search, averaged over the judged
    queries (`rankings`); with `fuse` (a second embedder: a sparse one beside a dense one), of both rankings fused
    by reciprocal ranks (`reciprocal_rank_fusion`), each model's own scores under `"models"`."""
    ids = list(corpus)
    asked = [key for key in queries if key in judgements]
    texts = {"document": [corpus[key] for key in ids], "query": [queries[key] for key in asked]}
    ranked, extra = rankings(embedder, texts, batch_size)
    if fuse is not None:
        fused, fused_extra = rankings(fuse, texts, batch_size)
        extra = {"fusion": "reciprocal rank (k=60)", "models": [
            {**_scores(ranked, asked, ids, judgements), **extra},
            {**_scores(fused, asked, ids, judgements), **fused_extra}]}
        ranked = [reciprocal_rank_fusion(first, second) for first, second in zip(ranked, fused)]
    return {**_scores(ranked, asked, ids, judgements), "queries": len(asked), "documents": len(ids), **extra}


def rankings(embedder, texts: Dict[str, List[str]], batch_size: int = 64) -> Tuple[List[np.ndarray], dict]:
    """Each query's `RANK_DEPTH` best documents (their indices, best first) by exact search as the model's kind
    searches (`OutputKind.search`: by cosine; a sparse encoder's dot product through an inverted index, with the
    mean non-zero weights of a query and a document; a multi-vector encoder's MaxSim, with the mean vectors of
    each), and what the vectors hold. Queries and documents each get the model's prompt for their role, where it
    has one (`Embedder.prompt_name_for`: e5's `query: ` and `passage: `), and a model loaded with several task
    adapters its query and document ones (`Embedder.for_work`)."""
    blocks, extra = embedder.output.search(embedder, texts, batch_size)
    ranked = []
    for similarity in blocks:  # [256, documents] scores in memory at most
        depth = min(RANK_DEPTH, similarity.shape[1])
        top = np.argpartition(-similarity, depth - 1, axis=1)[:, :depth]
        ranked += [row[np.argsort(-scores[row], kind="stable")] for row, scores in zip(top, similarity)]
    return ranked, extra


def reciprocal_rank_fusion(*ranked: np.ndarray, k: int = 60) -> np.ndarray:
    """Documents ranked by the sum of `1 / (k + rank)` over the rankings that hold them (rank 1 the best;
    Cormack et al.'s fusion, k = 60), the first `RANK_DEPTH`.

    >>> reciprocal_rank_fusion(np.array([3, 1, 2]), np.array([1, 2, 3])).tolist()
    [1, 3, 2]
    """
    fused: Dict[int, float] = {}
    for ranking in ranked:
        for rank, document in enumerate(ranking.tolist(), start=1):
            fused[document] = fused.get(document, 0.0) + 1.0 / (k + rank)
    order = sorted(fused, key=lambda document: -fused[document])  # stable: first met first among ties
    return np.array(order[:RANK_DEPTH], np.int64)


def _scores(ranked: List[np.ndarray], asked: List[str], ids: List[str],
            judgements: Dict[str, Dict[str, int]]) -> Dict[str, float]:
    """nDCG@10, MRR@10 and recall@100 of each query's ranking, averaged."""
    scores = {"ndcg@10": [], "mrr@10": [], "recall@100": []}
    for key, ranking in zip(asked, ranked):
        relevance = [judgements[key].get(ids[index], 0) for index in ranking]
        for name, value in ranking_scores(relevance, judgements[key]).items():
            scores[name].append(value)
    return {name: float(np.mean(values)) for name, values in scores.items()}


# --- classification and clustering -------------------------------------------------------------------

def classification(embedder, train_texts: Sequence[str], train_labels: Sequence[str], test_texts: Sequence[str],
                   test_labels: Sequence[str], batch_size: int = 64, seed: int = 0) -> Dict[str, float]:
    """`{"accuracy", "macro_f1", "train", "test"}` of scikit-learn's logistic regression on the frozen vectors
    (MTEB's classifier); macro F1 averages over the labels the test labels or the predictions hold."""
    linear_model, metrics = _scikit_learn("linear_model", "metrics")
    unknown = sorted(set(test_labels) - set(train_labels))
    if unknown:
        raise DataError(f"the test labels {', '.join(map(repr, unknown[:5]))} are not among the training labels")
    classifier = linear_model.LogisticRegression(max_iter=1000, random_state=seed)
    classifier.fit(embedder.encode(train_texts, batch_size), list(train_labels))
    predicted = classifier.predict(embedder.encode(test_texts, batch_size))
    return {"accuracy": float(metrics.accuracy_score(test_labels, predicted)),
            "macro_f1": float(metrics.f1_score(test_labels, predicted, average="macro")),
            "train": len(train_texts), "test": len(test_texts)}


def clustering(embedder, texts: Sequence[str], labels: Sequence[str], batch_size: int = 64,
               seed: int = 0) -> Dict[str, float]:
    """`{"v_measure", "clusters", "texts"}`: scikit-learn's k-means on the unit vectors, k the number of labels;
    fewer distinct vectors than labels is refused, as no clustering could tell them apart."""
    cluster, metrics = _scikit_learn("cluster", "metrics")
    vectors = embedder.encode(texts, batch_size, normalize=True)
    k = len(set(labels))
    distinct = len(np.unique(vectors.round(6), axis=0))
    if distinct < k:
        raise DataError(f"{distinct} distinct vectors for {k} labels: k-means cannot make {k} clusters of them "
                        "(the texts are too alike, or repeated); give more varied texts")
    # Lloyd's k-means, best of 10 k-means++ starts (a mini-batch's single start is unstable on small sets)
    assigned = cluster.KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(vectors)
    return {"v_measure": float(metrics.v_measure_score(labels, assigned)), "clusters": k, "texts": len(texts)}


def _scikit_learn(*modules: str):
    """scikit-learn's modules, or a `KbertError` saying how to install them."""
    import importlib

    try:
        return [importlib.import_module(f"sklearn.{module}") for module in modules]
    except ImportError:
        raise KbertError("kbert evaluate's classification and clustering use scikit-learn (as MTEB does): "
                         "pip install 'kbert[eval]'") from None


def evaluate(model: str, data: str, train: "str | None" = None, batch_size: int = 64,
             fuse: "str | None" = None, head: "str | None" = None, adapter=None) -> dict:
    """An embedding model (a sentence-transformers folder, a `kbert train --task embed` directory, a name) scored
    on `data`, by what it holds: a folder is a BEIR retrieval set; with `train` (labelled texts), `data`'s
    labelled texts are classified; a file of scored pairs (`text<TAB>text_b<TAB>score`) is STS; labelled texts
    (`text<TAB>label`) alone are clustered. Returns the scores with `"kind"` and `"data"`. `fuse`: a second model
    whose retrieval ranking is fused with `model`'s (hybrid search). `head`: bge-m3's output to score (`dense`,
    `sparse`, `colbert`; `Embedder.load`). `adapter`: jina-embeddings-v3's task adapter (`Embedder.load`); with
    several, each kind of work takes its own (`Embedder.for_work`: retrieval's queries `retrieval.query` and
    documents `retrieval.passage`, STS `text-matching`, classification `classification`, clustering
    `separation`)."""
    from kbert.embeddings.embedder import Embedder
    from kbert.training.data import read_examples
    from kbert.training.text_groups import read_text_groups

    embedder = Embedder.load(model, adapter=adapter, head=head)
    if fuse is not None and not os.path.isdir(data):
        raise KbertError(f"--fuse: fuses two models' retrieval rankings, on a BEIR folder; {data} is a file")
    if not embedder.output.one_vector and not os.path.isdir(data):
        raise KbertError(f"{data}: {model} is a multi-vector encoder, scored on retrieval (a BEIR folder: "
                         "corpus.jsonl, queries.jsonl, qrels/); STS, classification and clustering take one vector "
                         "a text")
    if os.path.isdir(data):
        second = None if fuse is None else Embedder.load(fuse)
        return {"kind": "retrieval", "data": data, **({"fused_with": fuse} if fuse else {}),
                **retrieval(embedder, *read_beir(data), batch_size=batch_size, fuse=second)}
    if train is not None:
        fitted, _ = read_examples(train)
        scored, _ = read_examples(data)
        return {"kind": "classification", "data": data, **classification(
            embedder.for_work("classification"), [e.text for e in fitted], [e.label for e in fitted], [e.text for e in scored],
            [e.label for e in scored], batch_size)}
    if is_scored_pairs(data):
        groups, _ = read_text_groups(data)
        return {"kind": "sts", "data": data, **sts(embedder.for_work("sts"), [group.texts[0] for group in groups],
                                                   [group.texts[1] for group in groups],
                                                   [group.score for group in groups])}
    examples, _ = read_examples(data)
    return {"kind": "clustering", "data": data, **clustering(embedder.for_work("clustering"), [e.text for e in examples],
                                                             [e.label for e in examples], batch_size)}


def is_scored_pairs(path: str) -> bool:
    """Whether a file's rows are scored pairs (`text<TAB>text_b<TAB>score`, or a header naming two texts and a
    score), not labelled texts: a header `text<TAB>label` names a label, whatever word `label` is an alias of."""
    from kbert.training.records import read_records
    from kbert.training.text_groups import PAIR_FIELDS, is_number

    rows, _, _ = read_records(path, PAIR_FIELDS)
    first = next((row for _, row in rows if isinstance(row, dict)), {})
    return first.get("text_b") is not None and is_number(first.get("score"))
