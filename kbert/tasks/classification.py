"""Text (and text-pair) classification, the default task: train, evaluate, predict, export.

`kbert train` on labelled texts (`kbert.training.data` reads them); the
model directory it writes is read back here to predict labels, score a
labelled file and export a SavedModel.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, List, Mapping, Optional, Sequence

import keras
import numpy as np

from kbert.builder import build_classifier
from kbert.errors import DataError, KbertError
from kbert.tokenizers import Tokenizer
from kbert.tokenizers.tokenizer_json import TokenizerJson
from kbert.training.data import Example, LabelMap, check_known_tokens, encode_examples, read_examples
from kbert.training.pipeline import batches_by_length, make_dataset
from kbert.training.metrics import precision_recall_f1
from kbert.training.model_dir import load_model
from kbert.training.precision import model_dtype
from kbert.training.task import Task, TrainingData, read_training_file


class ClassificationTask(Task):
    """A label per text: `build_classifier`'s softmax on `[CLS]`, kept by validation accuracy."""

    name = "classify"
    score_name = "val_accuracy"
    score_label = "validation accuracy"
    reads_tokenizer_json = True

    def read(self, tokenizer, train_path: str, valid_path: Optional[str], num_labels: Optional[int],
             options) -> TrainingData:
        examples, report = read_training_file(read_examples, train_path, options)
        labels = LabelMap.from_examples(examples, train_path)
        if len(labels) < 2:
            raise DataError(f"{train_path}: every example has the label {labels.names[0]!r}; "
                            "a classifier needs examples of at least two labels")
        if num_labels is not None and num_labels != len(labels):
            raise DataError(f"{train_path}: {len(labels)} labels ({', '.join(labels.names)}) but --num-labels "
                            f"is {num_labels}: a classifier learns the labels of its training data; leave "
                            "out --num-labels")
        encoded = encode_examples(tokenizer, examples, options.maxlen)
        check_known_tokens(train_path, (token_ids for token_ids, _ in encoded), tokenizer)
        train = make_dataset(encoded, labels.ids(examples, train_path), options.batch_size,
                             shuffle=options.shuffle, seed=options.seed, bucketing=options.bucketing,
                             pad_ids=(tokenizer.pad_id,))
        valid, valid_report = None, None
        if valid_path:
            valid_examples, valid_report = read_training_file(read_examples, valid_path, options)
            valid = make_dataset(encode_examples(tokenizer, valid_examples, options.maxlen),
                                 labels.ids(valid_examples, valid_path), options.batch_size,
                                 pad_ids=(tokenizer.pad_id,))
        # Whether the model reads text pairs: a classifier of single texts refuses pairs at prediction.
        return TrainingData(train, valid, labels, len(train), str(report),
                            str(valid_report) if valid_report else None,
                            {"text_pairs": any(example.text_b is not None for example in examples)})

    def build(self, bert, num_labels: int, options):
        return build_classifier(bert, num_labels)

    def compile_args(self, model) -> dict:
        return {"loss": "sparse_categorical_crossentropy", "metrics": ["accuracy"]}


@dataclasses.dataclass
class TrainedClassifier:
    """A model directory, loaded: the classifier, its tokenizer, labels and maxlen."""

    model: keras.Model
    tokenizer: "Tokenizer | TokenizerJson"
    labels: LabelMap
    maxlen: int
    reads_pairs: Optional[bool] = None  # None: a directory of a kbert that did not record it

    def predict_proba(self, examples, batch_size: int = 64, bucketing: bool = True) -> np.ndarray:
        """Class probabilities `[n, labels]`, in the order of `examples`.

        With `bucketing`, the examples are batched in order of length, cut
        where the model's calls cost least (`batches_by_length`; the results
        are put back in input order), so each batch pads little.
        """
        if not examples:
            raise KbertError("no texts to predict")
        encoded = encode_examples(self.tokenizer, examples, self.maxlen)
        probabilities = np.empty((len(encoded), len(self.labels)), dtype=np.float32)
        # Batch by batch with predict_on_batch: `predict`'s set-up (a dataset, its iterator, callbacks)
        # costs more than a small batch's compute, which is what a server runs.
        for rows, features in batches_by_length(encoded, batch_size, bucketing, maxlen=self.maxlen,
                                                pad_id=self.tokenizer.pad_id):
            probabilities[rows] = keras.ops.convert_to_numpy(self.model.predict_on_batch(list(features)))[:len(rows)]
        return probabilities


    def labelled(self, texts: Sequence[str], text_pairs: Optional[Sequence[Optional[str]]] = None,
                 batch_size: int = 64, bucketing: bool = True) -> List[dict]:
        """`{"text", "label", "probability", "probabilities"}` for each text (or pair): the most probable label,
        and every label's probability (`{label: probability}`)."""
        if not len(texts):
            raise KbertError("no texts to predict")
        if text_pairs is not None and len(text_pairs) != len(texts):
            raise KbertError(f"{len(texts)} texts but {len(text_pairs)} text pairs: give one pair "
                             "(or None) per text")
        if self.reads_pairs is False and text_pairs is not None and any(pair is not None for pair in text_pairs):
            raise KbertError("text pairs given to a classifier trained on single texts (its data had no second "
                             "text): give the texts alone")
        pairs = text_pairs or [None] * len(texts)
        examples = [Example(text, pair, None, line) for line, (text, pair) in enumerate(zip(texts, pairs), 1)]
        probabilities = self.predict_proba(examples, batch_size, bucketing)
        best = probabilities.argmax(-1)
        return [{"text": text, "label": self.labels.names[index], "probability": float(row[index]),
                 "probabilities": dict(zip(self.labels.names, map(float, row)))}
                for text, index, row in zip(texts, best, probabilities)]


def load_classifier(model_dir: "str | os.PathLike[str]") -> TrainedClassifier:
    """Loads a classifier's model directory written by `kbert train`."""
    loaded = load_model(model_dir, ClassificationTask)
    return TrainedClassifier(loaded.model, loaded.tokenizer, loaded.labels, loaded.options.maxlen,
                             loaded.state.get("text_pairs"))


def predict(model_dir: str, texts: Sequence[str], text_pairs: Optional[Sequence[Optional[str]]] = None,
            batch_size: int = 64, bucketing: bool = True) -> List[dict]:
    """The predicted label and its probability for each text (or pair)."""
    return load_classifier(model_dir).labelled(texts, text_pairs, batch_size, bucketing)


def evaluate(model_dir: str, data_path: str, batch_size: int = 64, bucketing: bool = True,
             columns: Optional[Mapping[str, str]] = None) -> dict:
    """Accuracy, per-class precision/recall/F1 and the confusion matrix on a labelled file.

    `columns` names the file's columns when they have other names (`read_examples`).
    """
    with model_dtype():  # --dtype auto's choice (the CLI's, where it runs inside one)
        classifier = load_classifier(model_dir)
    examples, report = read_examples(data_path, columns=columns)
    truth = classifier.labels.ids(examples, data_path)
    predicted = classifier.predict_proba(examples, batch_size, bucketing).argmax(-1)
    return {"data": str(report), **classification_report(truth, predicted, classifier.labels.names)}


def classification_report(truth: np.ndarray, predicted: np.ndarray, names: Sequence[str]) -> dict:
    """Accuracy, per-class precision, recall, F1 and support, confusion matrix (rows: truth)."""
    size = len(names)
    confusion = np.zeros((size, size), dtype=np.int64)
    np.add.at(confusion, (truth, predicted), 1)
    per_class: Dict[str, dict] = {}
    for index, name in enumerate(names):
        per_class[name] = precision_recall_f1(int(confusion[index, index]), int(confusion[:, index].sum()),
                                              int(confusion[index].sum()))
    return {"accuracy": float(np.trace(confusion) / max(confusion.sum(), 1)), "classes": per_class,
            "confusion": confusion.tolist(), "labels": list(names)}
