"""A model directory: what `kbert train` writes, and reading it back.

    bert_config.json   the backbone's config
    vocab.txt          the tokenizer's vocabulary (spiece.model: a SentencePiece model, for T5;
                       tokenizer.json: Hugging Face's RoBERTa / XLM-R's own tokenizer)
    labels.json        class id -> label name (a tagger's tags or entity types)
    model.weights.h5   the model's weights (the best epoch on validation)
    training.json      the task, maxlen, lower-casing, options, per-epoch history

Directories written by kbert 0.1 (classifiers, no `task` key) read as
`classify`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from typing import Type

import keras
import numpy as np

from kbert.builder import build_transformer_model
from kbert.errors import KbertError, first_line
from kbert.io import ModelFolder
from kbert.tokenizers import SENTENCEPIECE_NAME, SpTokenizer, Tokenizer, load_tokenizer
from kbert.tokenizers.tokenizer_json import TokenizerJson
from kbert.training.data import LabelMap
from kbert.training.options import TrainingOptions
from kbert.training.task import Task

CONFIG_FILE, VOCAB_FILE, WEIGHTS_FILE, TRAINING_FILE, RESUME_DIR = (
    "bert_config.json", "vocab.txt", "model.weights.h5", "training.json", "resume")
SENTENCEPIECE_FILE = SENTENCEPIECE_NAME  # instead of vocab.txt, for a T5 trained on a SentencePiece vocabulary
TOKENIZER_JSON_FILE = "tokenizer.json"  # instead of vocab.txt, for Hugging Face's RoBERTa / XLM-R


def vocab_file(model_dir: str) -> str:
    """The model directory's vocabulary: its SentencePiece model if it has one, else vocab.txt, else (Hugging
    Face's RoBERTa / XLM-R) tokenizer.json."""
    for name in (SENTENCEPIECE_FILE, VOCAB_FILE, TOKENIZER_JSON_FILE):
        if os.path.exists(os.path.join(model_dir, name)):
            return os.path.join(model_dir, name)
    return os.path.join(model_dir, VOCAB_FILE)


def model_tokenizer(model_dir: str, do_lower_case: bool) -> "Tokenizer | SpTokenizer | TokenizerJson":
    """The tokenizer a model directory was trained with (`vocab_file`)."""
    path = vocab_file(model_dir)
    if os.path.basename(path) == TOKENIZER_JSON_FILE:
        return TokenizerJson(path)
    return load_tokenizer(path, do_lower_case=do_lower_case)


def check_model_dir(model_dir: str) -> None:
    """Raises `KbertError` unless `model_dir` holds every file `train_task` writes."""
    for name in (CONFIG_FILE, WEIGHTS_FILE, TRAINING_FILE, LabelMap.FILE_NAME):
        if not os.path.exists(os.path.join(model_dir, name)):
            raise KbertError(f"{model_dir}: not a kbert model directory (no {name})")
    if not os.path.exists(vocab_file(model_dir)):
        raise KbertError(f"{model_dir}: the vocabulary is missing: a model directory holds {VOCAB_FILE} "
                         f"(WordPiece), {SENTENCEPIECE_FILE} (a T5 trained on SentencePiece) or {TOKENIZER_JSON_FILE} "
                         "(Hugging Face's RoBERTa / XLM-R); copy back the one the model was trained with")


@dataclasses.dataclass
class TrainedModel:
    """A model directory, loaded: the task's model, its tokenizer, labels and training.json."""

    model: keras.Model
    tokenizer: "Tokenizer | SpTokenizer | TokenizerJson"
    labels: LabelMap
    state: dict

    @property
    def options(self) -> TrainingOptions:
        known = {field.name for field in dataclasses.fields(TrainingOptions)}
        return TrainingOptions(**{k: v for k, v in self.state["options"].items() if k in known})


def read_training_state(model_dir: "str | os.PathLike[str]") -> dict:
    """training.json of a model directory, checked; `task` and `options["task"]` always present (read once for
    a `ModelFolder`; each call gets its own copy)."""
    check_model_dir(model_dir)
    return copy.deepcopy(ModelFolder.of(model_dir).parsed(TRAINING_FILE, _read_state))


def _read_state(state_path: str) -> dict:
    try:
        with open(state_path, encoding="utf-8") as handle:
            state = json.load(handle)
        state.setdefault("task", "classify")  # kbert 0.1 trained classifiers only
        state["options"] = {**state["options"], "task": state["task"]}
        if not isinstance(state["num_labels"], int) or not isinstance(state["options"]["do_lower_case"], bool):
            raise TypeError("num_labels and options.do_lower_case")
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as error:
        raise KbertError(f"{state_path}: not a training.json written by kbert train ({error!r})") from None
    return state


def load_model(model_dir: "str | os.PathLike[str]", task_class: Type[Task]) -> TrainedModel:
    """Loads a model directory written by `train_task`, rebuilding the model of `task_class`.

    A directory trained for another task is refused.
    """
    model_dir = ModelFolder.of(model_dir)  # the caller's, where it read the directory already
    state = read_training_state(model_dir)
    if task_class.name != state["task"]:
        raise KbertError(f"{model_dir}: a model trained for --task {state['task']}, not {task_class.name}")
    labels = LabelMap.load(model_dir)
    if len(labels) != (state.get("num_labels") or 0):
        raise KbertError(f"{os.path.join(model_dir, LabelMap.FILE_NAME)}: {len(labels)} labels, but the model was "
                         f"trained with {state.get('num_labels') or 0} ({TRAINING_FILE}); the label map belongs to "
                         "another model: put back the one its training wrote")
    tokenizer = model_tokenizer(model_dir, state["options"]["do_lower_case"])
    loaded = TrainedModel(None, tokenizer, labels, state)
    task = task_class.from_options(loaded.options)
    bert = build_transformer_model(model_dir.file(CONFIG_FILE), model=loaded.options.model,
                                   padding=tokenizer.padding, **task.backbone_args())
    loaded.model = task.build(bert, state["num_labels"], loaded.options)
    weights = os.path.join(model_dir, WEIGHTS_FILE)
    try:
        loaded.model.load_weights(weights)
    except Exception as error:  # h5py's and Keras's errors for damaged or foreign files
        raise KbertError(f"{weights}: cannot read the model's weights ({first_line(error)}); "
                         "the file is damaged or belongs to another model") from None
    refuse_non_finite_weights(loaded.model, weights)
    return loaded


def refuse_non_finite_weights(model, path: str) -> None:
    """Refuses a model with NaN or infinite weights (a diverged run's, saved by a kbert before 0.2 or by hand):
    every prediction of it would be NaN, which no JSON answer can carry."""
    bad = [weight.path for weight in model.weights if not np.isfinite(keras.ops.convert_to_numpy(weight.value)).all()]
    if bad:
        raise KbertError(f"{path}: {len(bad)} weight tensors hold NaN or infinite values ({', '.join(bad[:3])}"
                         f"{', ...' if len(bad) > 3 else ''}): the run that wrote them diverged. Train again with a "
                         "lower --lr")
