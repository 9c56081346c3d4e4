"""What the training run asks of a task: its data, its model, its loss, its validation score.

`kbert.training.loop.train_task` owns the run (checks, `OUT.partial/`,
resume, Ctrl-C, the best epoch) and receives a `Task` class; the task owns
everything that differs between classification, sequence labelling and
seq2seq. The tasks themselves live in `kbert.tasks`, above this wing:
`kbert.tasks.get_task` picks one by name.
"""

from __future__ import annotations

import abc
import dataclasses
import logging
from typing import Callable, Dict, List, Optional

from kbert.training.data import LabelMap


def read_training_file(reader: Callable, path: str, options):
    """`reader(path, ...)`'s records and report (with the options' `skip_malformed`, and `columns`
    when given), logging what was read and skipped."""
    extra = {"columns": options.columns} if options.columns else {}
    records, report = reader(path, skip_malformed=options.skip_malformed, **extra)
    logging.getLogger("kbert").log(logging.WARNING if report.skipped else logging.INFO, "%s", report)
    return records, report


@dataclasses.dataclass
class TrainingData:
    """The training and validation batches, the label map, and what reading the files found.

    Args:
        train: the training batches of `(features, labels)` (`kbert.training.pipeline.make_dataset`).
        valid: the validation dataset, or None.
        labels: class or tag names, saved with the model as labels.json.
        steps_per_epoch: batches in one pass over `train`.
        train_report, valid_report: what reading each file found (counts, skipped lines).
        state: task-specific entries for training.json (a tagger's scheme and units).
        valid_examples: the validation examples, for scores computed outside Keras.
    """

    train: object
    valid: object
    labels: LabelMap
    steps_per_epoch: int
    train_report: str
    valid_report: Optional[str]
    state: Dict[str, object] = dataclasses.field(default_factory=dict)
    valid_examples: List[object] = dataclasses.field(default_factory=list)


class Task(abc.ABC):
    """The task-specific half of training; subclasses set `name`, `score_name`, `score_label`.

    `score_name` is the validation figure that picks the kept epoch (higher is
    better), as it appears in the history; `score_label` is how to print it.
    """

    name = ""
    score_name = ""
    score_label = ""
    reads_sentencepiece = False  # a SentencePiece vocabulary (`SpTokenizer`) serves it
    # Hugging Face's RoBERTa / XLM-R trains for it: tokenized by its own tokenizer.json (`TokenizerJson`), padded
    # with its <pad>; seq2seq, which needs a decoder, does not take it.
    reads_tokenizer_json = False

    @classmethod
    def from_options(cls, options) -> "Task":
        """The task for `TrainingOptions` (a tagger reads its head from them)."""
        return cls()

    def adopt_checkpoint(self, options, checkpoint_path: Optional[str]):
        """The options, with what the task takes from the checkpoint it trains where an option leaves it open
        (an embedding model's pooling and prompts from a sentence-transformers folder); by default as given."""
        return options

    def model_config(self, config):
        """The backbone's config for this task (by default the one given)."""
        return config

    def check_lengths(self, options, config, config_path: str) -> None:
        """Refuses a length of this task's options that the model's positions cannot hold (`maxlen` is checked
        for every task); nothing here."""

    def backbone_args(self) -> dict:
        """Keywords for `build_transformer_model` beyond the config and checkpoint (e.g. an application)."""
        return {}

    @abc.abstractmethod
    def read(self, tokenizer, train_path: str, valid_path: Optional[str], num_labels: Optional[int],
             options) -> TrainingData:
        """Reads and checks the files (naming file and line for bad rows), then batches them."""

    @abc.abstractmethod
    def build(self, bert, num_labels: int, options):
        """The model trained and saved, on top of the backbone `bert`."""

    def training_model(self, model):
        """The graph `fit` trains on `model`'s layers (by default `model`; a head on labelled positions
        only, for the language models). `model` is what is saved and loaded."""
        return model

    def learning_rate_multipliers(self, trained) -> dict:
        """`{weight path: multiplier}` for weights of the training graph `trained` that learn at a multiple of the
        learning rate (`kbert.training.optimizers.WeightLearningRates`); none by default."""
        return {}

    @abc.abstractmethod
    def compile_args(self, model) -> dict:
        """`loss` and `metrics` for `model.compile`."""

    def callbacks(self, data: TrainingData, directory: str) -> list:
        """Keras callbacks of the task's own (e.g. a figure for the progress bar); `directory` is the run's."""
        return []

    def finish(self, model, directory: str) -> None:
        """Writes what the task adds to a completed run's model directory (before it is published)."""

    def validation_score(self, model, data: TrainingData) -> Callable[[dict], Optional[float]]:
        """A function of an epoch's Keras logs giving `score_name` (None without validation data).

        By default the figure is one of Keras's logs; a task may compute it (and
        add it to the logs) itself.
        """
        return lambda logs: logs.get(self.score_name)
