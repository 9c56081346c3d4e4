"""The non-neural baselines kbert's task figures are compared with, on the same splits.

    pip install scikit-learn sklearn-crfsuite      # the baselines' own libraries, not kbert's
    python -m benchmarks.baselines --data ../shared/data

- Sentiment: TF-IDF of character n-grams and logistic regression; the longest
  n-gram (2, 3 or 4) and the regularisation `C` are chosen on the validation
  split, then the test accuracy is reported.
- MSRA NER: a linear-chain CRF (CRFsuite, L-BFGS with L1 + L2) on each
  character's window features (the characters and bigrams within two places);
  trained on the training split, `c1`/`c2` chosen on the dev split, entity F1
  on the test split scored by kbert's own `entity_scores` (exact span and type),
  as `kbert evaluate` scores a tagger.

Prints a table: each baseline's chosen setting, validation and test figures,
and its training time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Dict, List, Sequence

from kbert.tasks.labelling import entity_scores, read_tagged, spans
from kbert.training.data import read_examples

SENTIMENT_GRID = [(ngrams, c) for ngrams in (2, 3, 4) for c in (1.0, 4.0, 16.0)]  # (longest n-gram, C)
CRF_REGULARISATION = ((0.05, 0.01), (0.1, 0.05))


def _requirements():
    try:
        import sklearn  # noqa: F401
        import sklearn_crfsuite  # noqa: F401
    except ImportError as error:
        sys.exit(f"benchmarks.baselines needs scikit-learn and sklearn-crfsuite ({error.name} is missing): "
                 "pip install scikit-learn sklearn-crfsuite")


def sentiment(data: str) -> dict:
    """TF-IDF + logistic regression: the C with the best validation accuracy, and its test accuracy."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    def split(name):
        examples, _ = read_examples(os.path.join(data, "sentiment", f"sentiment.{name}.data"))
        return [e.text for e in examples], [e.label for e in examples]

    (train_x, train_y), (valid_x, valid_y), (test_x, test_y) = split("train"), split("valid"), split("test")
    start = time.perf_counter()
    fits, scores = {}, {}
    for ngrams, c in SENTIMENT_GRID:
        vectorizer = TfidfVectorizer(analyzer="char", ngram_range=(1, ngrams), sublinear_tf=True, min_df=2)
        classifier = LogisticRegression(C=c, max_iter=2000).fit(vectorizer.fit_transform(train_x), train_y)
        fits[ngrams, c] = vectorizer, classifier
        scores[ngrams, c] = classifier.score(vectorizer.transform(valid_x), valid_y)
    best = max(scores, key=scores.get)
    vectorizer, classifier = fits[best]
    return {"baseline": "sentiment: TF-IDF char n-grams + logistic regression",
            "setting": f"1-{best[0]}-grams, C={best[1]:g}", "valid": scores[best],
            "test": classifier.score(vectorizer.transform(test_x), test_y), "measure": "accuracy",
            "seconds": time.perf_counter() - start}


def character_features(chars: Sequence[str], i: int) -> Dict[str, float]:
    """The characters and bigrams within two places of `chars[i]`, by their offsets."""
    padded = ["<s>", "<s>", *chars, "</s>", "</s>"]
    j = i + 2
    features = {"bias": 1.0}
    for offset in range(-2, 3):
        features[f"c{offset}={padded[j + offset]}"] = 1.0
    for offset in range(-2, 2):
        features[f"b{offset}={padded[j + offset]}{padded[j + offset + 1]}"] = 1.0
    return features


def msra_ner(data: str) -> dict:
    """A feature CRF: the (c1, c2) with the best dev entity F1, and its test entity F1."""
    import sklearn_crfsuite

    def split(name):
        sentences, _ = read_tagged(os.path.join(data, "msra_ner", f"msra.{name}.bmes"))
        features = [[character_features(s.tokens, i) for i in range(len(s.tokens))] for s in sentences]
        return features, [list(s.tags) for s in sentences]

    def f1(crf, features, tags: List[List[str]]) -> float:
        predicted = crf.predict(features)
        return entity_scores([spans(t) for t in tags], [spans(p) for p in predicted])["overall"]["f1"]

    (train_x, train_y), (dev_x, dev_y), (test_x, test_y) = split("train"), split("dev"), split("test")
    start = time.perf_counter()
    fits = {}
    for c1, c2 in CRF_REGULARISATION:
        crf = sklearn_crfsuite.CRF(algorithm="lbfgs", c1=c1, c2=c2, max_iterations=100)
        fits[(c1, c2)] = crf.fit(train_x, train_y)
    scores = {setting: f1(crf, dev_x, dev_y) for setting, crf in fits.items()}
    best = max(scores, key=scores.get)
    return {"baseline": "MSRA NER: linear-chain CRF on character window features",
            "setting": f"c1={best[0]:g}, c2={best[1]:g}", "valid": scores[best],
            "test": f1(fits[best], test_x, test_y), "measure": "entity F1", "seconds": time.perf_counter() - start}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="../shared/data", help="the shared data folder")
    parser.add_argument("--only", choices=["sentiment", "ner"], help="run one baseline")
    args = parser.parse_args(argv)
    _requirements()
    runs = {"sentiment": sentiment, "ner": msra_ner}
    rows = [run(args.data) for name, run in runs.items() if args.only in (None, name)]
    print(f"| {'baseline':58} | {'chosen on validation':20} | {'measure':9} | valid  | test   | seconds |")
    print(f"|{'-' * 60}|{'-' * 22}|{'-' * 11}|--------|--------|---------|")
    for row in rows:
        print(f"| {row['baseline']:58} | {row['setting']:20} | {row['measure']:9} | {row['valid']:.4f} | "
              f"{row['test']:.4f} | {row['seconds']:7.0f} |")


if __name__ == "__main__":
    main()
