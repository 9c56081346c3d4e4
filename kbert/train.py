"""Fine-tuning a classifier: train, evaluate, predict, export.

A trained model lives in a directory that holds everything needed to use it:

    bert_config.json   the backbone's config
    vocab.txt          the tokenizer's vocabulary
    labels.json        class id -> label name
    model.weights.h5   the classifier's weights (the best epoch on validation)
    training.json      maxlen, lower-casing, options, per-epoch history

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

import contextlib
import dataclasses
import json
import logging
import math
import os
import shutil
import tempfile
from typing import Dict, List, Optional, Sequence

import keras
import numpy as np

from kbert.builder import build_classifier, build_transformer_model
from kbert.config import BertConfig
from kbert.data import Example, LabelMap, encode_examples, make_dataset, read_examples
from kbert.errors import DataError, KbertError, first_line
from kbert.options import TrainingOptions
from kbert.schedules import WarmupLinearDecay
from kbert.io import atomic_copy, atomic_path, atomic_write_text, is_occupied, replace_directory
from kbert.tokenizer import Tokenizer

logger = logging.getLogger("kbert")

CONFIG_FILE, VOCAB_FILE, WEIGHTS_FILE, TRAINING_FILE, RESUME_DIR = (
    "bert_config.json", "vocab.txt", "model.weights.h5", "training.json", "resume")
PARTIAL_SUFFIX = ".partial"
STRATEGIES = ("auto", "mirrored", "multiworker")
PRECISIONS = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


class _BestWeights(keras.callbacks.Callback):
    """Writes the classifier's weights (atomically) whenever validation accuracy improves.

    Without validation data every epoch's weights are written. The best value
    so far is kept in training.json, so a resumed run keeps comparing with it.
    """

    def __init__(self, classifier: keras.Model, out_dir: str, state: dict):
        super().__init__()
        self.classifier, self.out_dir, self.state = classifier, out_dir, state

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        history = self.state.setdefault("history", [])
        history.append({"epoch": epoch + 1, **{k: float(v) for k, v in logs.items()}})
        score = logs.get("val_accuracy")
        best = self.state.get("best_val_accuracy")
        if score is None or best is None or score > best:
            with atomic_path(os.path.join(self.out_dir, WEIGHTS_FILE)) as temporary:
                self.classifier.save_weights(temporary)
            self.state.update(best_epoch=epoch + 1, best_val_accuracy=score)
        _write_json(os.path.join(self.out_dir, TRAINING_FILE), self.state)


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during `train`; the message says what was kept and how to go on."""


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
    """Fine-tunes `build_classifier` on a data file and writes a model directory.

    Args:
        config_path: the backbone's `bert_config.json` / `config.json`.
        vocab_path: its `vocab.txt`.
        train_path: training data (see `kbert.data` for the formats).
        out_dir: the model directory to write (see the module docstring).
        valid_path: validation data; the best epoch on it is kept.
        checkpoint_path: pre-trained weights (Google checkpoint or safetensors);
            without it the backbone starts from random weights.
        num_labels: number of classes; by default, those in the training file.
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
    run = _RunDirectory(out_dir)
    run.check(resume=resume, overwrite=overwrite)
    strategy = make_strategy(options.strategy)
    # Before any dataset exists: tf.data's shuffle order follows the global seed.
    keras.utils.set_random_seed(options.seed)
    config = BertConfig.from_json_file(config_path)
    if options.maxlen > config.max_position_embeddings:
        raise KbertError(f"maxlen {options.maxlen} is longer than the model's "
                         f"max_position_embeddings ({config.max_position_embeddings}, {config_path})")
    tokenizer = Tokenizer(vocab_path, do_lower_case=options.do_lower_case)
    _check_vocab_fits(tokenizer, vocab_path, config, config_path)
    data = _TrainingData.read(tokenizer, train_path, valid_path, num_labels, options)
    num_labels = num_labels or len(data.labels)
    with _precision(options.mixed_precision):
        with strategy.scope():
            bert = build_transformer_model(config, checkpoint_path)
            classifier = build_classifier(bert, num_labels)
            # The optimizer belongs to this wrapper, so model.weights.h5 holds weights only.
            trainer = keras.Model(classifier.inputs, classifier.outputs, name="trainer")
            trainer.compile(make_optimizer(options, data.steps_per_epoch),
                            loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        # Everything is checked: from here on the run writes, into OUT.partial/.
        state = run.begin(resume, {"options": dataclasses.asdict(options), "num_labels": num_labels,
                                   "train_data": data.train_report, "valid_data": data.valid_report,
                                   "history": []})
        callbacks = [
            keras.callbacks.BackupAndRestore(os.path.join(run.partial, RESUME_DIR), double_checkpoint=True),
            _BestWeights(classifier, run.partial, state),
        ]
        try:
            if not resume:
                config.to_json_file(os.path.join(run.partial, CONFIG_FILE))
                atomic_copy(vocab_path, os.path.join(run.partial, VOCAB_FILE))
                data.labels.save(run.partial)
            trainer.fit(data.train, validation_data=data.valid, epochs=options.epochs,
                        callbacks=callbacks, verbose=verbose, shuffle=False)
        except KeyboardInterrupt:
            raise TrainingInterrupted(run.stopped(state, options.epochs)) from None
        except BaseException:
            run.stopped(state, options.epochs)
            raise
    run.publish()
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
    optimizer.exclude_from_weight_decay(var_names=["gamma", "beta", "bias"])
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


@dataclasses.dataclass
class _TrainingData:
    """The training and validation batches, the label map, and what reading the files found."""

    train: object
    valid: object
    labels: LabelMap
    steps_per_epoch: int
    train_report: str
    valid_report: Optional[str]

    @classmethod
    def read(cls, tokenizer: Tokenizer, train_path: str, valid_path: Optional[str],
             num_labels: Optional[int], options: TrainingOptions) -> "_TrainingData":
        """Reads and checks the files (naming file and line for bad rows), then batches them."""
        examples, report = _read(train_path, options)
        labels = LabelMap.from_examples(examples)
        if len(labels) < 2:
            raise DataError(f"{train_path}: every example has the label {labels.names[0]!r}; "
                            "a classifier needs examples of at least two labels")
        if num_labels is not None and num_labels < len(labels):
            raise DataError(f"{train_path}: {len(labels)} labels ({', '.join(labels.names)}) "
                            f"but --num-labels is {num_labels}")
        train = make_dataset(encode_examples(tokenizer, examples, options.maxlen),
                             labels.ids(examples, train_path), options.batch_size,
                             shuffle=options.shuffle, seed=options.seed)
        valid, valid_report = None, None
        if valid_path:
            valid_examples, valid_report = _read(valid_path, options)
            valid = make_dataset(encode_examples(tokenizer, valid_examples, options.maxlen),
                                 labels.ids(valid_examples, valid_path), options.batch_size)
        return cls(train, valid, labels, -(-len(examples) // options.batch_size), str(report),
                   str(valid_report) if valid_report else None)


def _read(path: str, options: TrainingOptions):
    examples, report = read_examples(path, skip_malformed=options.skip_malformed)
    if report.skipped:
        logger.warning("%s", report)
    return examples, report


def _check_vocab_fits(tokenizer: Tokenizer, vocab_path: str, config: BertConfig, config_path: str) -> None:
    largest = max(tokenizer.vocab.values())
    if largest >= config.vocab_size:
        raise KbertError(
            f"{vocab_path}: the vocabulary has ids up to {largest}, but vocab_size in {config_path} is "
            f"{config.vocab_size}: those tokens would have no embedding. Use the vocabulary that "
            "belongs to the config (and checkpoint)")


@contextlib.contextmanager
def _precision(mixed_precision: Optional[str]):
    """Keras's global dtype policy for the run, restored afterwards."""
    previous = keras.mixed_precision.global_policy()
    if mixed_precision:
        keras.mixed_precision.set_global_policy(PRECISIONS[mixed_precision])
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


def make_strategy(name: str):
    """The `tf.distribute` strategy for `--strategy`."""
    import tensorflow as tf

    if name == "auto":
        gpus = tf.config.list_logical_devices("GPU")
        return tf.distribute.MirroredStrategy() if len(gpus) > 1 else tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multiworker":
        if "TF_CONFIG" not in os.environ:
            raise KbertError("--strategy multiworker needs the TF_CONFIG environment variable "
                             "(the cluster and this worker's task)")
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise KbertError(f"unknown strategy {name!r}; expected one of {', '.join(STRATEGIES)}")


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


def load_classifier(model_dir: str) -> TrainedClassifier:
    """Loads a model directory written by `train`."""
    check_model_dir(model_dir)
    state_path = os.path.join(model_dir, TRAINING_FILE)
    try:
        with open(state_path, encoding="utf-8") as handle:
            state = json.load(handle)
        options, num_labels = state["options"], state["num_labels"]
        do_lower_case, maxlen = options["do_lower_case"], options["maxlen"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as error:
        raise KbertError(f"{state_path}: not a training.json written by kbert train ({error!r})") from None
    labels = LabelMap.load(model_dir)
    tokenizer = Tokenizer(os.path.join(model_dir, VOCAB_FILE), do_lower_case=do_lower_case)
    bert = build_transformer_model(os.path.join(model_dir, CONFIG_FILE))
    model = build_classifier(bert, num_labels)
    weights = os.path.join(model_dir, WEIGHTS_FILE)
    try:
        model.load_weights(weights)
    except Exception as error:  # h5py's and Keras's errors for damaged or foreign files
        raise KbertError(f"{weights}: cannot read the classifier's weights ({first_line(error)}); "
                         "the file is damaged or belongs to another model") from None
    return TrainedClassifier(model, tokenizer, labels, maxlen)


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
    if not (_is_number(options.weight_decay) and 0 <= options.weight_decay < math.inf):
        raise KbertError(f"weight decay must be a finite number of 0 or more, got {options.weight_decay!r}")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _write_json(path: str, value) -> None:
    atomic_write_text(path, json.dumps(value, indent=1, ensure_ascii=False) + "\n")
