"""Fine-tuning: train (any task), and evaluate, predict, export for classifiers.

`train` runs a task from `kbert.tasks` (`classify`, the default, `ner` or
`seq2seq`, whose evaluation and prediction live in `kbert.tasks.ner` and
`kbert.tasks.seq2seq`). A trained model
lives in a directory that holds everything needed to use it:

    bert_config.json   the backbone's config
    vocab.txt          the tokenizer's vocabulary
    labels.json        class id -> label name (a tagger's tags or entity types)
    model.weights.h5   the model's weights (the best epoch on validation)
    training.json      the task, maxlen, lower-casing, options, per-epoch history

A run never harms an earlier one: every input is checked and the model built
(and its checkpoint loaded) before anything is written; the run is written
into `OUT.partial/` (with `resume/`, the last completed epoch's weights,
optimizer state and epoch, for `--resume`) and moved to `OUT` only when it
completes. An existing `OUT` is refused unless `overwrite`, and even then it is
replaced only at the end.

Training uses Keras's own loop (`fit`, its progress bar, `BackupAndRestore`)
with AdamW and a linear warm-up then linear decay of the learning rate; on
several devices it runs under a `tf.distribute` strategy.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shutil
import signal
import tempfile
import threading
from typing import Callable, Dict, List, Optional, Sequence

import keras
import numpy as np

from kbert.builder import build_transformer_model
from kbert.config import BertConfig
from kbert.data import Example, LabelMap, encode_examples, make_dataset, read_examples
from kbert.distribute import STRATEGIES, Trainer, make_strategy, worker_role
from kbert.errors import KbertError, first_line
from kbert.options import TrainingOptions
from kbert.precision import PRECISIONS, precision_policy, warn_if_emulated
from kbert.schedules import WarmupLinearDecay
from kbert.io import atomic_copy, atomic_path, atomic_write_text, is_occupied, replace_directory
from kbert.tasks import get_task
from kbert.tokenizer import Tokenizer

logger = logging.getLogger("kbert")

CONFIG_FILE, VOCAB_FILE, WEIGHTS_FILE, TRAINING_FILE, RESUME_DIR = (
    "bert_config.json", "vocab.txt", "model.weights.h5", "training.json", "resume")
PARTIAL_SUFFIX = ".partial"


class _BestWeights(keras.callbacks.Callback):
    """Writes the model's weights (atomically) whenever the task's validation score improves.

    Without validation data every epoch's weights are written. The best value
    so far is kept in training.json, so a resumed run keeps comparing with it.
    """

    def __init__(self, model: keras.Model, out_dir: str, state: dict, score_name: str,
                 score: Callable[[dict], Optional[float]]):
        super().__init__()
        self.kept, self.out_dir, self.state, self.score = model, out_dir, state, score
        self.best_key = f"best_{score_name}"

    def on_epoch_end(self, epoch, logs=None):
        logs = {} if logs is None else logs  # a score added here shows in Keras's progress bar
        score = self.score(logs)
        history = self.state.setdefault("history", [])
        history.append({"epoch": epoch + 1, **{k: float(v) for k, v in logs.items()}})
        best = self.state.get(self.best_key)
        if score is None or best is None or score > best:
            with atomic_path(os.path.join(self.out_dir, WEIGHTS_FILE)) as temporary:
                self.kept.save_weights(temporary)
            self.state.update({"best_epoch": epoch + 1, self.best_key: score})
        _write_json(os.path.join(self.out_dir, TRAINING_FILE), self.state)


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during `train`; the message says what was kept and how to go on."""


class _InterruptBetweenBatches(keras.callbacks.Callback):
    """Ctrl-C during `fit` stops training at the next batch boundary, never inside TensorFlow.

    Python's own handler raises `KeyboardInterrupt` wherever the main thread
    is, including inside a running TensorFlow call, and the process can then
    die with a heap error (`free(): invalid next size`) instead of saying what
    was kept. While installed (a context manager, main thread only, and only
    where Ctrl-C would interrupt at all), the handler just notes the signal and
    the callback raises at the next batch or epoch boundary. A second Ctrl-C
    interrupts at once.
    """

    def __init__(self):
        super().__init__()
        self.requested, self.previous = False, None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self.previous = signal.signal(signal.SIGINT, self._note)
        return self

    def __exit__(self, *exception):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)

    def _note(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def _check(self, *args, **kwargs):
        if self.requested:
            raise KeyboardInterrupt

    on_train_batch_end = on_test_batch_end = on_epoch_begin = on_epoch_end = _check


def train(
    config_path: str,
    vocab_path: str,
    train_path: str,
    out_dir: str,
    *,
    valid_path: Optional[str] = None,
    checkpoint_path: Optional[str] = None,
    num_labels: Optional[int] = None,
    options: Optional[TrainingOptions] = None,
    resume: bool = False,
    overwrite: bool = False,
    verbose: "int | str" = "auto",
) -> dict:
    """Fine-tunes a model for `options.task` on a data file and writes a model directory.

    The task (`kbert.tasks`) reads the data and puts its head on the backbone:
    `build_classifier` for `classify`, `build_token_classifier` for `ner`.

    Args:
        config_path: the backbone's `bert_config.json` / `config.json`.
        vocab_path: its `vocab.txt`.
        train_path: training data (see `kbert.data` for the formats; tagged
            files, `kbert.tasks.labelling`, for `ner`).
        out_dir: the model directory to write (see the module docstring).
        valid_path: validation data; the best epoch on it is kept.
        checkpoint_path: pre-trained weights (Google checkpoint or safetensors);
            without it the backbone starts from random weights.
        num_labels: number of classes; by default, those in the training file
            (for `ner`, when given, it must equal the tags the data makes).
        options: `TrainingOptions`.
        resume: continue the interrupted run in `out_dir + ".partial"` from
            its last completed epoch.
        overwrite: replace an existing `out_dir` when the run completes.
        verbose: Keras's `fit` verbosity (the progress bar by default).

    Returns:
        training.json's content: options, history, best epoch.

    Raises:
        KbertError: a bad input (naming the file, line, key or option), before
            anything is written.
        TrainingInterrupted: on Ctrl-C, saying what was kept.
    """
    options = options or TrainingOptions()
    _check_options(options)
    task = get_task(options)
    if resume and options.strategy == "multiworker":
        raise KbertError("--resume is not supported with --strategy multiworker: the workers keep no "
                         "common backup; start the run again")
    strategy = make_strategy(options.strategy)
    role = worker_role(strategy)
    if role is not None and not role.is_chief:
        # Every worker runs the same steps, but only the chief writes OUT.
        out_dir = os.path.join(tempfile.mkdtemp(prefix=f"kbert-{role.task_type}{role.task_id}-"), "run")
    run = _RunDirectory(out_dir)
    run.check(resume=resume, overwrite=overwrite)
    # Before any dataset exists: tf.data's shuffle order follows the global seed.
    keras.utils.set_random_seed(options.seed)
    config = BertConfig.from_json_file(config_path)
    if options.maxlen > config.max_position_embeddings:
        raise KbertError(f"maxlen {options.maxlen} is longer than the model's "
                         f"max_position_embeddings ({config.max_position_embeddings}, {config_path})")
    tokenizer = Tokenizer(vocab_path, do_lower_case=options.do_lower_case)
    _check_vocab_fits(tokenizer, vocab_path, config, config_path)
    data = task.read(tokenizer, train_path, valid_path, num_labels, options)
    num_labels = num_labels or len(data.labels)
    warn_if_emulated(options.mixed_precision)
    with precision_policy(options.mixed_precision):
        with strategy.scope():
            bert = build_transformer_model(config, checkpoint_path, **task.backbone_args())
            model = task.build(bert, num_labels, options)
            # The optimizer belongs to this wrapper, so model.weights.h5 holds weights only.
            trainer = Trainer(model.inputs, model.outputs, name="trainer")
            trainer.compile(make_optimizer(options, data.steps_per_epoch), **task.compile_args(model))
        # Everything is checked: from here on the run writes, into OUT.partial/.
        state = run.begin(resume, {"task": task.name, "options": dataclasses.asdict(options),
                                   **({"worker": dataclasses.asdict(role)} if role else {}),
                                   "num_labels": num_labels, **data.state, "train_data": data.train_report,
                                   "valid_data": data.valid_report, "history": []})
        interrupt = _InterruptBetweenBatches()  # first: an epoch ended by Ctrl-C is not kept
        callbacks = [
            interrupt,
            keras.callbacks.BackupAndRestore(os.path.join(run.partial, RESUME_DIR), double_checkpoint=True),
            _BestWeights(model, run.partial, state, task.score_name, task.validation_score(model, data)),
        ]
        try:
            if not resume:
                config.to_json_file(os.path.join(run.partial, CONFIG_FILE))
                atomic_copy(vocab_path, os.path.join(run.partial, VOCAB_FILE))
                data.labels.save(run.partial)
            with interrupt:
                trainer.fit(data.train, validation_data=data.valid, epochs=options.epochs,
                            callbacks=callbacks, verbose=verbose, shuffle=False)
        except KeyboardInterrupt:
            raise TrainingInterrupted(run.stopped(state, options.epochs)) from None
        except BaseException:
            run.stopped(state, options.epochs)
            raise
    if role is None or role.is_chief:
        run.publish()
    else:
        shutil.rmtree(os.path.dirname(run.out), ignore_errors=True)
    return state


def make_optimizer(options: TrainingOptions, steps_per_epoch: int) -> keras.optimizers.Optimizer:
    """AdamW with warm-up and linear decay; no decay on LayerNorms and biases; EMA and accumulation as asked."""
    steps = options.epochs * steps_per_epoch
    optimizer = keras.optimizers.AdamW(
        WarmupLinearDecay(options.learning_rate, int(options.warmup_ratio * steps), steps),
        weight_decay=options.weight_decay, epsilon=1e-6, use_ema=options.ema,
        # Each epoch ends on the average, so what is validated is what is saved.
        ema_overwrite_frequency=steps_per_epoch if options.ema else None,
        gradient_accumulation_steps=options.grad_accum if options.grad_accum > 1 else None)
    optimizer.exclude_from_weight_decay(var_names=["gamma", "beta", "bias", "trans"])
    return optimizer


class _RunDirectory:
    """A run's output directory `OUT` and its working copy `OUT.partial/`."""

    def __init__(self, out_dir: str):
        self.out = os.path.normpath(os.fspath(out_dir))
        self.partial = self.out + PARTIAL_SUFFIX
        self.existed = is_occupied(self.out)

    def check(self, resume: bool, overwrite: bool) -> None:
        """Refuses a run that would overwrite or mix with an earlier one; writes nothing."""
        interrupted = os.path.isdir(os.path.join(self.partial, RESUME_DIR))
        if resume and not interrupted:
            raise KbertError(f"{self.out}: nothing to resume (no interrupted run in {self.partial})")
        if os.path.lexists(self.partial) and not resume:
            if not interrupted:
                raise KbertError(f"{self.partial} is left from a run of {self.out} that stopped before "
                                 "completing an epoch (nothing to resume): delete it to start again")
            raise KbertError(f"{self.partial} holds an interrupted run for {self.out}: pass --resume to "
                             "continue it, or delete that directory to start again")
        if self.existed and not overwrite:
            raise KbertError(f"{self.out} already exists: pass --overwrite to replace it when the new run "
                             "completes, or choose another --out")

    def begin(self, resume: bool, state: dict) -> dict:
        """Creates OUT.partial/ with training.json (or reads the interrupted run's state)."""
        path = os.path.join(self.partial, TRAINING_FILE)
        if resume:
            with open(path, encoding="utf-8") as handle:
                return json.load(handle)
        os.makedirs(self.partial)
        _write_json(path, state)
        return state

    def stopped(self, state: dict, epochs: int) -> str:
        """Cleans up after a run that did not complete; returns what happened, for the user."""
        completed = len(state.get("history", []))
        untouched = f"{self.out} is unchanged" if self.existed else f"{self.out} was not created"
        if not completed:
            shutil.rmtree(self.partial, ignore_errors=True)
            return f"interrupted before the first epoch completed: nothing was kept, and {untouched}"
        return (f"interrupted after {completed} of {epochs} epochs: they are kept in {self.partial} "
                f"({untouched}); run the same command with --resume to continue")

    def publish(self) -> None:
        replace_directory(self.partial, self.out)


def _check_vocab_fits(tokenizer: Tokenizer, vocab_path: str, config: BertConfig, config_path: str) -> None:
    largest = max(tokenizer.vocab.values())
    if largest >= config.vocab_size:
        raise KbertError(
            f"{vocab_path}: the vocabulary has ids up to {largest}, but vocab_size in {config_path} is "
            f"{config.vocab_size}: those tokens would have no embedding. Use the vocabulary that "
            "belongs to the config (and checkpoint)")


@dataclasses.dataclass
class TrainedClassifier:
    """A model directory, loaded: the classifier, its tokenizer, labels and maxlen."""

    model: keras.Model
    tokenizer: Tokenizer
    labels: LabelMap
    maxlen: int

    def predict_proba(self, examples, batch_size: int = 64, bucketing: bool = True) -> np.ndarray:
        """Class probabilities `[n, labels]`, in the order of `examples`.

        With `bucketing`, the examples are batched in order of length (and the
        results put back in input order), so each batch pads little.
        """
        if not examples:
            raise KbertError("no texts to predict")
        encoded = encode_examples(self.tokenizer, examples, self.maxlen)
        order = np.argsort([len(ids) for ids, _ in encoded], kind="stable") if bucketing \
            else np.arange(len(encoded))
        data = make_dataset([encoded[index] for index in order], None, batch_size)
        probabilities = np.empty((len(encoded), len(self.labels)), dtype=np.float32)
        probabilities[order] = self.model.predict(data, verbose=0)
        return probabilities


def check_model_dir(model_dir: str) -> None:
    """Raises `KbertError` unless `model_dir` holds every file `train` writes."""
    for name in (CONFIG_FILE, VOCAB_FILE, WEIGHTS_FILE, TRAINING_FILE, LabelMap.FILE_NAME):
        if not os.path.exists(os.path.join(model_dir, name)):
            raise KbertError(f"{model_dir}: not a kbert model directory (no {name})")


@dataclasses.dataclass
class TrainedModel:
    """A model directory, loaded: the task's model, its tokenizer, labels and training.json."""

    model: keras.Model
    tokenizer: Tokenizer
    labels: LabelMap
    state: dict

    @property
    def options(self) -> TrainingOptions:
        known = {field.name for field in dataclasses.fields(TrainingOptions)}
        return TrainingOptions(**{k: v for k, v in self.state["options"].items() if k in known})


def read_training_state(model_dir: str) -> dict:
    """training.json of a model directory, checked; `task` and `options["task"]` always present."""
    check_model_dir(model_dir)
    state_path = os.path.join(model_dir, TRAINING_FILE)
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


def load_model(model_dir: str, task: Optional[str] = None) -> TrainedModel:
    """Loads a model directory written by `train`, rebuilding its task's model.

    With `task`, a directory trained for another task is refused.
    """
    state = read_training_state(model_dir)
    if task is not None and task != state["task"]:
        raise KbertError(f"{model_dir}: a model trained for --task {state['task']}, not {task}")
    labels = LabelMap.load(model_dir)
    tokenizer = Tokenizer(os.path.join(model_dir, VOCAB_FILE), do_lower_case=state["options"]["do_lower_case"])
    loaded = TrainedModel(None, tokenizer, labels, state)
    task = get_task(loaded.options)
    bert = build_transformer_model(os.path.join(model_dir, CONFIG_FILE), **task.backbone_args())
    loaded.model = task.build(bert, state["num_labels"], loaded.options)
    weights = os.path.join(model_dir, WEIGHTS_FILE)
    try:
        loaded.model.load_weights(weights)
    except Exception as error:  # h5py's and Keras's errors for damaged or foreign files
        raise KbertError(f"{weights}: cannot read the model's weights ({first_line(error)}); "
                         "the file is damaged or belongs to another model") from None
    return loaded


def load_classifier(model_dir: str) -> TrainedClassifier:
    """Loads a classifier's model directory written by `train`."""
    loaded = load_model(model_dir, "classify")
    return TrainedClassifier(loaded.model, loaded.tokenizer, loaded.labels, loaded.options.maxlen)


def predict(model_dir: str, texts: Sequence[str], text_pairs: Optional[Sequence[Optional[str]]] = None,
            batch_size: int = 64, bucketing: bool = True) -> List[dict]:
    """The predicted label and its probability for each text (or pair)."""
    if not len(texts):
        raise KbertError("no texts to predict")
    if text_pairs is not None and len(text_pairs) != len(texts):
        raise KbertError(f"{len(texts)} texts but {len(text_pairs)} text pairs: give one pair "
                         "(or None) per text")
    classifier = load_classifier(model_dir)
    pairs = text_pairs or [None] * len(texts)
    examples = [Example(text, pair, None, line) for line, (text, pair) in enumerate(zip(texts, pairs), 1)]
    probabilities = classifier.predict_proba(examples, batch_size, bucketing)
    best = probabilities.argmax(-1)
    return [{"text": text, "label": classifier.labels.names[index], "probability": float(row[index])}
            for text, index, row in zip(texts, best, probabilities)]


def evaluate(model_dir: str, data_path: str, batch_size: int = 64, bucketing: bool = True) -> dict:
    """Accuracy, per-class precision/recall/F1 and the confusion matrix on a labelled file."""
    classifier = load_classifier(model_dir)
    examples, report = read_examples(data_path)
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
        hits = confusion[index, index]
        precision = hits / max(confusion[:, index].sum(), 1)
        recall = hits / max(confusion[index].sum(), 1)
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[name] = {"precision": float(precision), "recall": float(recall), "f1": float(f1),
                           "support": int(confusion[index].sum())}
    return {"accuracy": float(np.trace(confusion) / max(confusion.sum(), 1)), "classes": per_class,
            "confusion": confusion.tolist(), "labels": list(names)}


def export(model_dir: str, out: str) -> str:
    """Exports a model directory as a TF SavedModel (or, for `*.keras`, a Keras file).

    The SavedModel's `serving_default` signature takes int32 `token_ids` and
    `segment_ids` of shape `[batch, length]` and returns `probabilities`.
    Written to a temporary path first, then moved into place.
    """
    import tensorflow as tf

    if os.path.exists(out):
        raise KbertError(f"{out}: already exists; choose a new path")
    model = load_classifier(model_dir).model
    if out.endswith(".keras"):
        with atomic_path(out) as temporary:  # the temporary name ends in .keras too
            model.save(temporary)
        return out

    def serve(token_ids, segment_ids):
        return {"probabilities": model([token_ids, segment_ids], training=False)}

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serving_default", serve, input_signature=[
        tf.TensorSpec([None, None], tf.int32, name="token_ids"),
        tf.TensorSpec([None, None], tf.int32, name="segment_ids")])
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(dir=parent, prefix=".tmp-export-")
    try:
        archive.write_out(os.path.join(staging, "model"), verbose=False)
        os.replace(os.path.join(staging, "model"), out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def _check_options(options: TrainingOptions) -> None:
    if options.strategy not in STRATEGIES:
        raise KbertError(f"unknown strategy {options.strategy!r}; expected one of {', '.join(STRATEGIES)}")
    if options.mixed_precision not in (None, *PRECISIONS):
        raise KbertError(f"unknown mixed precision {options.mixed_precision!r}; expected bf16 or fp16")
    for name in ("epochs", "batch_size", "maxlen", "grad_accum"):
        value = getattr(options, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise KbertError(f"{name} must be a whole number of at least 1, got {value!r}")
    if options.maxlen < 3:
        raise KbertError(f"maxlen must leave room for [CLS] and [SEP], got {options.maxlen}")
    if not (_is_number(options.learning_rate) and 0 < options.learning_rate < math.inf):
        raise KbertError(f"learning rate (--lr) must be a finite positive number, got {options.learning_rate!r}")
    if not (_is_number(options.warmup_ratio) and 0 <= options.warmup_ratio < 1):
        raise KbertError(f"warm-up ratio (--warmup) must be in [0, 1), got {options.warmup_ratio!r}")
    if not (_is_number(options.crf_lr_multiplier) and 0 < options.crf_lr_multiplier < math.inf):
        raise KbertError(f"CRF learning-rate multiplier must be a finite positive number, "
                         f"got {options.crf_lr_multiplier!r}")
    if not (_is_number(options.weight_decay) and 0 <= options.weight_decay < math.inf):
        raise KbertError(f"weight decay must be a finite number of 0 or more, got {options.weight_decay!r}")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _write_json(path: str, value) -> None:
    atomic_write_text(path, json.dumps(value, indent=1, ensure_ascii=False) + "\n")
