"""Fine-tuning a classifier: train, evaluate, predict, export.

A trained model lives in a directory that holds everything needed to use it:

    bert_config.json   the backbone's config
    vocab.txt          the tokenizer's vocabulary
    labels.json        class id -> label name
    model.weights.h5   the classifier's weights (the best epoch on validation)
    training.json      maxlen, lower-casing, options, per-epoch history
    resume/            while training: the last completed epoch (weights,
                       optimizer state, epoch), for `--resume`

Training uses Keras's own loop (`fit`, its progress bar, `BackupAndRestore`)
with AdamW and a linear warm-up then linear decay of the learning rate; on
several devices it runs under a `tf.distribute` strategy.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from typing import Dict, List, Optional, Sequence

import keras
import numpy as np

from kbert.builder import build_classifier, build_transformer_model
from kbert.config import BertConfig
from kbert.data import Example, LabelMap, encode_examples, make_dataset, read_examples
from kbert.errors import DataError, KbertError
from kbert.io import atomic_copy, atomic_path, atomic_write_text
from kbert.tokenizer import Tokenizer

CONFIG_FILE, VOCAB_FILE, WEIGHTS_FILE, TRAINING_FILE, RESUME_DIR = (
    "bert_config.json", "vocab.txt", "model.weights.h5", "training.json", "resume")
STRATEGIES = ("auto", "mirrored", "multiworker")
PRECISIONS = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


@dataclasses.dataclass
class TrainingOptions:
    """Hyper-parameters of `train`.

    Args:
        epochs: passes over the training data.
        batch_size: global batch size (split across devices).
        learning_rate: peak learning rate, reached after warm-up.
        warmup_ratio: share of all steps spent warming up.
        weight_decay: AdamW's decoupled weight decay (not on LayerNorms, biases).
        maxlen: longest sequence, in tokens, `[CLS]` and `[SEP]` included.
        do_lower_case: lower-case and strip accents in the tokenizer.
        strategy: `auto` (all local GPUs if several), `mirrored`, `multiworker`.
        mixed_precision: None, `bf16` or `fp16`.
        skip_malformed: skip bad data rows (counted) instead of failing.
        shuffle: reshuffle the training data every epoch. The order follows
            `seed`, but under a distribution strategy Keras draws the
            reshuffles differently, so runs compare exactly only without it.
        seed: seed of initialisation, shuffling and dropout.
    """

    epochs: int = 3
    batch_size: int = 32
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    maxlen: int = 128
    do_lower_case: bool = True
    strategy: str = "auto"
    mixed_precision: Optional[str] = None
    skip_malformed: bool = False
    shuffle: bool = True
    seed: int = 0


@keras.saving.register_keras_serializable(package="kbert")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to `peak`, then linear decay to 0 at `total_steps`.

    Example:
    >>> schedule = WarmupLinearDecay(2e-5, warmup_steps=100, total_steps=1000)
    >>> float(schedule(50)), float(schedule(100)), float(schedule(1000))
    (1e-05, 2e-05, 0.0)
    """

    def __init__(self, peak: float, warmup_steps: int, total_steps: int):
        self.peak, self.warmup_steps, self.total_steps = peak, warmup_steps, total_steps

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        warmup = keras.ops.maximum(float(self.warmup_steps), 1.0)
        rising = step / warmup
        falling = (self.total_steps - step) / keras.ops.maximum(float(self.total_steps - self.warmup_steps), 1.0)
        return self.peak * keras.ops.clip(keras.ops.minimum(rising, falling), 0.0, 1.0)

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps, "total_steps": self.total_steps}


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
    verbose: "int | str" = "auto",
) -> dict:
    """Fine-tunes `build_classifier` on a data file and writes a model directory.

    Args:
        config_path: the backbone's `bert_config.json` / `config.json`.
        vocab_path: its `vocab.txt`.
        train_path: training data (see `kbert.data` for the formats).
        out_dir: the model directory to write.
        valid_path: validation data; the best epoch on it is kept.
        checkpoint_path: pre-trained weights (Google checkpoint or safetensors);
            without it the backbone starts from random weights.
        num_labels: number of classes; by default, those in the training file.
        options: `TrainingOptions`.
        resume: continue an interrupted run in `out_dir` from its last
            completed epoch.
        verbose: Keras's `fit` verbosity (the progress bar by default).

    Returns:
        training.json's content: options, history, best epoch.
    """
    options = options or TrainingOptions()
    _check_options(options)
    _check_resume(out_dir, resume)
    # Before any dataset exists: tf.data's shuffle order follows the global seed.
    keras.utils.set_random_seed(options.seed)
    config = BertConfig.from_json_file(config_path)
    if options.maxlen > config.max_position_embeddings:
        raise KbertError(f"maxlen {options.maxlen} is longer than the model's "
                         f"max_position_embeddings ({config.max_position_embeddings}, {config_path})")
    tokenizer = Tokenizer(vocab_path, do_lower_case=options.do_lower_case)
    train_examples, train_report = read_examples(train_path, skip_malformed=options.skip_malformed)
    labels = LabelMap.from_examples(train_examples)
    num_labels = num_labels or len(labels)
    if num_labels < len(labels):
        raise DataError(f"{train_path}: {len(labels)} labels ({', '.join(labels.names)}) "
                        f"but --num-labels is {num_labels}")
    train_data = make_dataset(encode_examples(tokenizer, train_examples, options.maxlen),
                              labels.ids(train_examples, train_path), options.batch_size,
                              shuffle=options.shuffle, seed=options.seed)
    valid_data, valid_report = None, None
    if valid_path:
        valid_examples, valid_report = read_examples(valid_path, skip_malformed=options.skip_malformed)
        valid_data = make_dataset(encode_examples(tokenizer, valid_examples, options.maxlen),
                                  labels.ids(valid_examples, valid_path), options.batch_size)

    os.makedirs(out_dir, exist_ok=True)
    state = _training_state(out_dir, resume, options, num_labels, train_report, valid_report)
    config.to_json_file(os.path.join(out_dir, CONFIG_FILE))
    atomic_copy(vocab_path, os.path.join(out_dir, VOCAB_FILE))
    labels.save(out_dir)

    steps = options.epochs * int(np.ceil(len(train_examples) / options.batch_size))
    previous_policy = keras.mixed_precision.global_policy()
    if options.mixed_precision:
        keras.mixed_precision.set_global_policy(PRECISIONS[options.mixed_precision])
    try:
        with make_strategy(options.strategy).scope():
            bert = build_transformer_model(config, checkpoint_path)
            classifier = build_classifier(bert, num_labels)
            # The optimizer belongs to this wrapper, so model.weights.h5 holds weights only.
            trainer = keras.Model(classifier.inputs, classifier.outputs, name="trainer")
            optimizer = keras.optimizers.AdamW(
                WarmupLinearDecay(options.learning_rate, int(options.warmup_ratio * steps), steps),
                weight_decay=options.weight_decay, epsilon=1e-6)
            optimizer.exclude_from_weight_decay(var_names=["gamma", "beta", "bias"])
            trainer.compile(optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        callbacks = [
            keras.callbacks.BackupAndRestore(os.path.join(out_dir, RESUME_DIR), double_checkpoint=True),
            _BestWeights(classifier, out_dir, state),
        ]
        trainer.fit(train_data, validation_data=valid_data, epochs=options.epochs,
                    callbacks=callbacks, verbose=verbose, shuffle=False)
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)
    return state


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

    def predict_proba(self, examples, batch_size: int = 64) -> np.ndarray:
        data = make_dataset(encode_examples(self.tokenizer, examples, self.maxlen), None, batch_size)
        return self.model.predict(data, verbose=0)


def load_classifier(model_dir: str) -> TrainedClassifier:
    """Loads a model directory written by `train`."""
    for name in (CONFIG_FILE, VOCAB_FILE, WEIGHTS_FILE, TRAINING_FILE, LabelMap.FILE_NAME):
        if not os.path.exists(os.path.join(model_dir, name)):
            raise KbertError(f"{model_dir}: not a kbert model directory (no {name})")
    with open(os.path.join(model_dir, TRAINING_FILE), encoding="utf-8") as handle:
        state = json.load(handle)
    options = state["options"]
    labels = LabelMap.load(model_dir)
    tokenizer = Tokenizer(os.path.join(model_dir, VOCAB_FILE), do_lower_case=options["do_lower_case"])
    bert = build_transformer_model(os.path.join(model_dir, CONFIG_FILE))
    model = build_classifier(bert, state["num_labels"])
    model.load_weights(os.path.join(model_dir, WEIGHTS_FILE))
    return TrainedClassifier(model, tokenizer, labels, options["maxlen"])


def predict(model_dir: str, texts: Sequence[str], text_pairs: Optional[Sequence[Optional[str]]] = None,
            batch_size: int = 64) -> List[dict]:
    """The predicted label and its probability for each text (or pair)."""
    classifier = load_classifier(model_dir)
    pairs = text_pairs or [None] * len(texts)
    examples = [Example(text, pair, None, line) for line, (text, pair) in enumerate(zip(texts, pairs), 1)]
    probabilities = classifier.predict_proba(examples, batch_size)
    best = probabilities.argmax(-1)
    return [{"text": text, "label": classifier.labels.names[index], "probability": float(row[index])}
            for text, index, row in zip(texts, best, probabilities)]


def evaluate(model_dir: str, data_path: str, batch_size: int = 64) -> dict:
    """Accuracy, per-class precision/recall/F1 and the confusion matrix on a labelled file."""
    classifier = load_classifier(model_dir)
    examples, report = read_examples(data_path)
    truth = classifier.labels.ids(examples, data_path)
    predicted = classifier.predict_proba(examples, batch_size).argmax(-1)
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
    for name in ("epochs", "batch_size", "maxlen"):
        if getattr(options, name) < 1:
            raise KbertError(f"{name} must be at least 1, got {getattr(options, name)}")
    if options.maxlen < 3:
        raise KbertError(f"maxlen must leave room for [CLS] and [SEP], got {options.maxlen}")


def _check_resume(out_dir: str, resume: bool) -> None:
    interrupted = os.path.isdir(os.path.join(out_dir, RESUME_DIR))
    if interrupted and not resume:
        raise KbertError(f"{out_dir} holds an interrupted run ({RESUME_DIR}/): pass --resume to "
                         "continue it, or choose another --out")
    if resume and not interrupted:
        raise KbertError(f"{out_dir}: nothing to resume (no {RESUME_DIR}/ from an interrupted run)")


def _training_state(out_dir: str, resume: bool, options: TrainingOptions, num_labels: int,
                    train_report, valid_report) -> dict:
    if resume:
        with open(os.path.join(out_dir, TRAINING_FILE), encoding="utf-8") as handle:
            return json.load(handle)
    state = {"options": dataclasses.asdict(options), "num_labels": num_labels,
             "train_data": str(train_report),
             "valid_data": str(valid_report) if valid_report else None, "history": []}
    _write_json(os.path.join(out_dir, TRAINING_FILE), state)
    return state


def _write_json(path: str, value) -> None:
    atomic_write_text(path, json.dumps(value, indent=1, ensure_ascii=False) + "\n")
