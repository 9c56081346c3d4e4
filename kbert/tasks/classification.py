"""Text (and text-pair) classification: `kbert train` on labelled texts, the default task."""

from __future__ import annotations

from typing import Optional

from kbert.data import LabelMap, encode_examples, make_dataset, read_examples
from kbert.errors import DataError
from kbert.tasks.base import Task, TrainingData, read_training_file


class ClassificationTask(Task):
    """A label per text: `build_classifier`'s softmax on `[CLS]`, kept by validation accuracy."""

    name = "classify"
    score_name = "val_accuracy"
    score_label = "validation accuracy"

    def read(self, tokenizer, train_path: str, valid_path: Optional[str], num_labels: Optional[int],
             options) -> TrainingData:
        examples, report = read_training_file(read_examples, train_path, options.skip_malformed)
        labels = LabelMap.from_examples(examples)
        if len(labels) < 2:
            raise DataError(f"{train_path}: every example has the label {labels.names[0]!r}; "
                            "a classifier needs examples of at least two labels")
        if num_labels is not None and num_labels < len(labels):
            raise DataError(f"{train_path}: {len(labels)} labels ({', '.join(labels.names)}) "
                            f"but --num-labels is {num_labels}")
        train = make_dataset(encode_examples(tokenizer, examples, options.maxlen),
                             labels.ids(examples, train_path), options.batch_size,
                             shuffle=options.shuffle, seed=options.seed, bucketing=options.bucketing)
        valid, valid_report = None, None
        if valid_path:
            valid_examples, valid_report = read_training_file(read_examples, valid_path, options.skip_malformed)
            valid = make_dataset(encode_examples(tokenizer, valid_examples, options.maxlen),
                                 labels.ids(valid_examples, valid_path), options.batch_size)
        return TrainingData(train, valid, labels, int(train.cardinality()), str(report),
                            str(valid_report) if valid_report else None)

    def build(self, bert, num_labels: int, options):
        from kbert.builder import build_classifier

        return build_classifier(bert, num_labels)

    def compile_args(self, model) -> dict:
        return {"loss": "sparse_categorical_crossentropy", "metrics": ["accuracy"]}

