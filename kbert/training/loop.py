"""The fine-tuning run of any task: checks, the model, Keras's `fit`, the kept epoch, Ctrl-C.

`train_task` receives the task (`kbert.training.task.Task`): the task reads
the data, builds the head and scores an epoch; the run is the same for every
task. Every input is checked and the model built (and its checkpoint loaded)
before anything is written; the run is written into `OUT.partial/`
(`kbert.training.run_directory`) and becomes a model directory
(`kbert.training.model_dir`) when it completes.

Training uses Keras's own loop (`fit`, its progress bar, `BackupAndRestore`)
with AdamW and a linear warm-up then linear decay of the learning rate; on
several devices it runs under a `tf.distribute` strategy.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import signal
import tempfile
import threading
from typing import Callable, Optional, Type

import keras

from kbert.builder import build_transformer_model
from kbert.errors import KbertError, check_whole_number, is_whole_number
from kbert.io import atomic_copy, atomic_path, refuse_overlap
from kbert.models import naming
from kbert.models.config import BertConfig
from kbert.models.registry import graph_class, resolve
from kbert.tokenizers import SpTokenizer, Tokenizer, load_tokenizer, save_vocab, vocab_in_directory
from kbert.tokenizers.tokenizer_json import DEBERTA_SENTENCEPIECE, TokenizerJson
from kbert.training.distribute import STRATEGIES, JaxProcesses, ProcessShare, Trainer, make_strategy, worker_role
from kbert.training.model_dir import (CONFIG_FILE, RESUME_DIR, SENTENCEPIECE_FILE, TOKENIZER_JSON_FILE,
                                      TRAINING_FILE, VOCAB_FILE, WEIGHTS_FILE)
from kbert.training.adversarial import adversarial_training, gradient_penalty
from kbert.training.lora import ADAPTERS_FILE, enable_lora, lora_enabled, save_adapters
from kbert.training.optimizers import make_optimizer
from kbert.training.options import (ADVERSARIAL, CONTRASTIVE_LOSSES, OPTIMIZERS, PACKINGS, RERANK_LOSSES,
                                    SCHEDULES, WHOLE_WORDS, TrainingOptions)
from kbert.training.precision import PRECISIONS, precision_policy, warn_if_emulated
from kbert.training.run_directory import RunDirectory, data_fingerprints, write_json
from kbert.training.task import Task


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
        # A tie (masked-token accuracy often stays put for epochs) goes to the lower validation loss.
        loss, best_loss = logs.get("val_loss"), self.state.get("best_val_loss")
        tie_won = score == best and loss is not None and (best_loss is None or loss < best_loss)
        if score is None or best is None or score > best or tie_won:
            with atomic_path(os.path.join(self.out_dir, WEIGHTS_FILE)) as temporary:
                self.kept.save_weights(temporary)  # a LoRA layer's kernel is written merged
            if lora_enabled(self.kept):  # and what the run trained, on its own
                save_adapters(self.kept, os.path.join(self.out_dir, ADAPTERS_FILE))
            self.state.update({"best_epoch": epoch + 1, self.best_key: score,
                               **({"best_val_loss": float(loss)} if loss is not None else {})})
        write_json(os.path.join(self.out_dir, TRAINING_FILE), self.state)


class TrainingDiverged(KbertError):
    """The loss stopped being a finite number: the run ends, and the epoch that diverged is not kept."""


class _StopWhenDiverged(keras.callbacks.Callback):
    """Ends the run at the end of an epoch whose loss is NaN or infinite, before that epoch is backed up or
    kept: the weights it made are not a model (every later prediction would be NaN)."""

    def __init__(self, learning_rate: float):
        super().__init__()
        self.learning_rate = learning_rate

    def on_epoch_end(self, epoch, logs=None):
        bad = {name: float(value) for name, value in (logs or {}).items()
               if name.endswith("loss") and not math.isfinite(float(value))}
        if bad:
            raise TrainingDiverged(
                f"epoch {epoch + 1} ended with {', '.join(f'{name} {value}' for name, value in bad.items())}: the "
                f"run diverged. The usual cause is a learning rate too high for the model (this run's --lr is "
                f"{self.learning_rate:g}; fine-tuning takes 1e-5 to 1e-4) or --mixed-precision float16 overflowing")


class AverageAtEpochEnd(keras.callbacks.Callback):
    """With EMA: the model continues from the weights' moving average after the last batch of each epoch.

    So validation, the kept epoch and the saved weights are the average's.
    Keras's own `ema_overwrite_frequency` counts optimizer updates, which
    with gradient accumulation are a fraction of the batches: it would land
    every `grad_accum` epochs, and mid-epoch.
    """

    def __init__(self, steps_per_epoch: int):
        super().__init__()
        self.steps_per_epoch = steps_per_epoch

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.steps_per_epoch - 1:
            self.model.optimizer.finalize_variable_values(self.model.trainable_variables)


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


def train_task(
    task_class: Type[Task],
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
    """Fine-tunes the model of a task on a data file and writes a model directory.

    The task (a `Task` class of `kbert.tasks`, made from `options`) reads the
    data and puts its head on the backbone; this function owns the run. Use
    `kbert.train`, which picks the task from `options.task`.

    Args:
        task_class: the task; its `name` must be `options.task`.
        config_path: the backbone's `bert_config.json` / `config.json`.
        vocab_path: its `vocab.txt`.
        train_path: training data (see `kbert.training.data` for the formats; tagged
            files, `kbert.tasks.labelling`, for `ner`).
        out_dir: the model directory to write (`kbert.training.model_dir`).
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
    options, family, config, task = _configured(task_class, config_path, checkpoint_path, options)
    if resume and options.strategy == "multiworker":
        raise KbertError("--resume is not supported with --strategy multiworker: the workers keep no "
                         "common backup; start the run again")
    strategy = make_strategy(options.strategy, options.model_parallel, config)
    role = worker_role(strategy)
    if role is not None and not role.is_chief:
        # Every worker runs the same steps, but only the chief writes OUT.
        out_dir = os.path.join(tempfile.mkdtemp(prefix=f"kbert-{role.task_type}{role.task_id}-"), "run")
    run = RunDirectory(out_dir)
    refuse_overlap([run.out, run.partial], {"--train": train_path, "--valid": valid_path, "--config": config_path,
                                            "--vocab": vocab_path, "--checkpoint": checkpoint_path})
    run.check(resume=resume, overwrite=overwrite)
    # Before any dataset exists: tf.data's shuffle order follows the global seed.
    keras.utils.set_random_seed(options.seed)
    if options.maxlen > config.longest_input and family.has_position_table(config):
        raise KbertError(f"maxlen {options.maxlen} is longer than the model's longest input, {config.longest_input} "
                         f"tokens (max_position_embeddings {config.max_position_embeddings}, {config_path})")
    task.check_lengths(options, config, config_path)
    tokenizer = _tokenizer(task, family, vocab_path, options, config, config_path)
    data = task.read(tokenizer, train_path, valid_path, num_labels, options)
    if isinstance(strategy, JaxProcesses):
        _check_process_shares(task, data, options, strategy)
    num_labels = num_labels or len(data.labels)
    fresh_state = {"task": task.name, "options": dataclasses.asdict(options),
                   **({"worker": dataclasses.asdict(role)} if role else {}),
                   "num_labels": num_labels, **data.state, "train_data": data.train_report,
                   "valid_data": data.valid_report, "data_files": data_fingerprints(
                       {"--train": train_path, "--valid": valid_path}), "history": []}
    if resume:
        run.check_same_run(fresh_state, data.labels.names, config.to_dict())
    warn_if_emulated(options.mixed_precision)
    with precision_policy(options.mixed_precision):
        with strategy.scope():
            model, trainer = _compiled(task, family, config, checkpoint_path, num_labels, options, data, strategy,
                                       tokenizer.padding)
        # Everything is checked: from here on the run writes, into OUT.partial/.
        state = run.begin(resume, fresh_state)

        def write_inputs() -> None:  # what the model directory needs beside the weights, once
            if not resume:
                config.to_json_file(os.path.join(run.partial, CONFIG_FILE))
                _keep_vocabulary(tokenizer, vocab_path, run.partial)
                data.labels.save(run.partial)

        _fit(trainer, model, task, data, options, run, state, verbose, write_inputs, strategy)
    # What finish writes (a CrossEncoder's or sentence-transformers' safetensors, a pre-trained checkpoint) is
    # the kept epoch's, as model.weights.h5 is, not the last epoch's. (Keras zeroes LoRA adapters as it
    # loads the merged kernels.)
    kept = os.path.join(run.partial, WEIGHTS_FILE)
    if state.get("best_epoch") != len(state.get("history", [])) and os.path.exists(kept):
        model.load_weights(kept)
    # Every worker finishes (the others into their scratch directory): a finish that builds or runs a model
    # meets collectives that all of JAX's processes must join.
    task.finish(model, run.partial)
    if role is None or role.is_chief:
        run.publish()
    else:
        shutil.rmtree(os.path.dirname(run.out), ignore_errors=True)
    return state


def _configured(task_class: Type[Task], config_path: str, checkpoint_path: Optional[str],
                options: Optional[TrainingOptions]):
    """The checked options (the family recorded), the family, the config kbert trains, and the task."""
    options = options or TrainingOptions(task=task_class.name)
    _check_options(options)
    if options.task != task_class.name:
        raise KbertError(f"options.task is {options.task!r} but the task is {task_class.name!r}")
    # The family (the config's model_type, else BERT) is recorded, so the model directory rebuilds it.
    family, config = resolve(config_path, options.model)
    if family.own_tokenizer and not task_class.reads_tokenizer_json:
        raise KbertError(f"{config_path}: model_type {config.model_type!r} ({family.name}) is an encoder only, and "
                         f"--task {task_class.name} needs a decoder (UniLM's masks or T5's): use a BERT-layout model "
                         "for it (a Chinese RoBERTa-wwm is one: model='roberta'), or a T5")
    options = dataclasses.replace(options, model=options.model or family.name)
    task = task_class.from_options(options)
    options = task.adopt_checkpoint(options, checkpoint_path)
    # What kbert changes in a model it trains (T5: no output scale before an untied head it initialises).
    config = task.model_config(family.config_to_train(config, initialised=checkpoint_path is None))
    return options, family, config, task


def _tokenizer(task: Task, family, vocab_path: str, options: TrainingOptions, config: BertConfig,
               config_path: str):
    """The vocabulary's tokenizer, refused where the task cannot read it or it does not fit the model.
    Hugging Face's RoBERTa / XLM-R is tokenized by its own `tokenizer.json` (byte-level BPE or SentencePiece
    pieces, `<pad>` at 1), MPNet and ModernBERT by theirs: the ids they were pre-trained on."""
    if family.own_tokenizer:
        tokenizer = _tokenizer_json(vocab_path, config_path)
    else:
        tokenizer = load_tokenizer(vocab_path, do_lower_case=options.do_lower_case)
    if isinstance(tokenizer, SpTokenizer) and not task.reads_sentencepiece:
        raise KbertError(f"{vocab_path}: a SentencePiece vocabulary is read for --task seq2seq with a T5 "
                         "(--model t5, t5.1.1 or mt5.1.1) only; this task needs a WordPiece vocab.txt")
    if isinstance(tokenizer, SpTokenizer) and not tokenizer.has_padding_piece:
        raise KbertError(f"{vocab_path}: this SentencePiece model has no padding piece, so batches would be "
                         f"padded with id {tokenizer.pad_id} ({tokenizer._token_pad!r}), a real piece the model "
                         "would hide, leave out of the loss and never generate. Train the SentencePiece model "
                         "with a padding piece (spm_train --pad_id=0, as Google's T5 and mT5 have <pad> at 0)")
    _check_vocab_fits(tokenizer, vocab_path, config, config_path)
    return tokenizer


def _compiled(task: Task, family, config: BertConfig, checkpoint_path: Optional[str], num_labels: int,
              options: TrainingOptions, data, strategy, padding):
    """The task's model (what is saved) and the compiled trainer wrapping it (which owns the optimizer), hiding
    the `padding` its tokenizer pads batches with."""
    with remat_scope(options, config):
        bert = build_transformer_model(config, checkpoint_path, model=options.model, padding=padding,
                                       **task.backbone_args())
        multipliers = {}
        if checkpoint_path is None:
            graph_class(family).initialise(bert, config)  # the family's own scheme, where it has one (T5)
            multipliers = graph_class(family).learning_rate_multipliers(bert, options.optimizer)
        model = task.build(bert, num_labels, options)
    if options.lora_rank:
        enable_lora(model, options.lora_rank, options.lora_alpha, options.lora_embeddings)
    # The optimizer belongs to this wrapper, so model.weights.h5 holds weights only.
    trained = task.training_model(model)
    multipliers = {**multipliers, **task.learning_rate_multipliers(trained)}
    trainer = Trainer(trained.inputs, trained.outputs, name="trainer")
    trainer.compile(make_optimizer(options, data.steps_per_epoch, model, multipliers), **task.compile_args(model),
                    jit_compile=True if options.jit_compile else "auto")
    _add_adversarial_training(trainer, options, strategy)
    return model, trainer


def _fit(trainer, model, task: Task, data, options: TrainingOptions, run: RunDirectory, state: dict,
         verbose, write_inputs: Callable[[], None], strategy) -> None:
    """`write_inputs()`, then Keras's `fit` with kbert's callbacks; a run that stops early (Ctrl-C, divergence,
    an error) cleans up and says what it kept. Among JAX's processes each feeds its share of each batch."""
    interrupt = _InterruptBetweenBatches()  # first: an epoch ended by Ctrl-C is not kept
    callbacks = [
        interrupt,
        _StopWhenDiverged(options.learning_rate),  # before the backup and the kept weights: a NaN epoch is not kept
        keras.callbacks.BackupAndRestore(os.path.join(run.partial, RESUME_DIR), double_checkpoint=True),
        # Each epoch ends on the average, so what is validated is what is saved.
        *([AverageAtEpochEnd(data.steps_per_epoch)] if options.ema else []),
        *task.callbacks(data, run.partial),  # before _BestWeights: what they log is kept in the history
        _BestWeights(model, run.partial, state, task.score_name, task.validation_score(model, data)),
    ]
    try:
        write_inputs()
        train, valid = data.train, data.valid
        if isinstance(strategy, JaxProcesses):
            train, valid = (ProcessShare(batches, strategy.process_id, strategy.num_processes)
                            if batches is not None else None for batches in (train, valid))
        with interrupt:
            trainer.fit(train, validation_data=valid, epochs=options.epochs,
                        callbacks=callbacks, verbose=verbose, shuffle=False)
    except KeyboardInterrupt:
        raise TrainingInterrupted(run.stopped(state, options.epochs)) from None
    except TrainingDiverged as error:
        raise TrainingDiverged(f"{error}; {run.stopped(state, options.epochs, 'stopped')}") from None
    except BaseException:
        run.stopped(state, options.epochs)
        raise


def remat_scope(options: TrainingOptions, config: BertConfig) -> keras.RematScope:
    """The scope the model is built in: with `--remat`, the blocks' feed-forward layers recompute their
    intermediate values (4 H wide, the largest a block keeps beside attention's scores) in the backward pass.
    Layers that draw random numbers (dropout, attention with its dropout) cannot: `jax.checkpoint` cannot
    carry their seed generators' updates."""
    if not options.remat:
        return keras.RematScope(mode=None)
    blocks = max(config.num_hidden_layers, getattr(config, "num_decoder_layers", None) or 0)
    names = [part + naming.block(index, naming.FEED_FORWARD) for part in ("", "Encoder-", "Decoder-")
             for index in (None, *range(blocks))]
    return keras.RematScope(mode="list_of_layers", layer_names=names)


def _check_process_shares(task: Task, data, options: TrainingOptions, strategy: JaxProcesses) -> None:
    """Refuses what JAX's processes cannot train as one process would: a batch that does not divide among
    them, and a validation score computed outside Keras's metrics (each process holds a share of the
    predictions)."""
    if options.batch_size % strategy.num_processes:
        raise KbertError(f"--batch-size {options.batch_size} is the global batch, split evenly among the "
                         f"{strategy.num_processes} processes: use a multiple of {strategy.num_processes}")
    if data.valid_examples and type(task).validation_score is not Task.validation_score:
        raise KbertError(f"--task {task.name} scores its validation data by predicting outside Keras's metrics, "
                         f"which --strategy multiworker on JAX does not gather from {strategy.num_processes} "
                         "processes yet: leave --valid out (the last epoch is kept), or train on one process")


def _tokenizer_json(vocab_path: str, config_path: str) -> TokenizerJson:
    """The `tokenizer.json` of `--vocab` (the file, or the folder that holds it)."""
    path = os.path.join(vocab_path, TOKENIZER_JSON_FILE) if os.path.isdir(vocab_path) else os.fspath(vocab_path)
    if os.path.isdir(vocab_path) and not os.path.isfile(path):  # DeBERTa-v3's folders: spm.model alone
        path = os.path.join(vocab_path, DEBERTA_SENTENCEPIECE)
    if os.path.basename(path) == DEBERTA_SENTENCEPIECE and os.path.isfile(path):
        return TokenizerJson.from_sentencepiece(path)
    if not path.endswith(".json") or not os.path.isfile(path):
        raise KbertError(f"{vocab_path}: the model of {config_path} is tokenized by its own {TOKENIZER_JSON_FILE} "
                         f"(its padding id and its pieces, byte-level BPE, SentencePiece or WordPiece): give --vocab "
                         f"the model's {TOKENIZER_JSON_FILE} (or DeBERTa's {DEBERTA_SENTENCEPIECE}), or the folder "
                         "it is in")
    return TokenizerJson(path)


def _keep_vocabulary(tokenizer: "Tokenizer | SpTokenizer | TokenizerJson", vocab_path: "str | os.PathLike[str]",
                     directory: str) -> None:
    """The vocabulary, into the model directory: the file itself (`vocab.txt`, `spiece.model`, RoBERTa's
    `tokenizer.json`), or a `vocab.txt` written from a WordPiece `tokenizer.json`."""
    vocab_path = os.fspath(vocab_path)
    source = vocab_in_directory(vocab_path) if os.path.isdir(vocab_path) else vocab_path
    if isinstance(tokenizer, TokenizerJson):
        tokenizer.save(os.path.join(directory, TOKENIZER_JSON_FILE))
        tokenizer.save_settings(directory)  # its pad token: the model directory's batches are padded alike
    elif isinstance(tokenizer, SpTokenizer):
        atomic_copy(source, os.path.join(directory, SENTENCEPIECE_FILE))
    elif source.endswith(".json"):
        save_vocab(os.path.join(directory, VOCAB_FILE), tokenizer.vocab)
    else:
        atomic_copy(source, os.path.join(directory, VOCAB_FILE))


def _check_vocab_fits(tokenizer: "Tokenizer | SpTokenizer", vocab_path: str, config: BertConfig, config_path: str) -> None:
    largest = max(tokenizer.vocab.values())
    if largest >= config.vocab_size:
        raise KbertError(
            f"{vocab_path}: the vocabulary has ids up to {largest}, but vocab_size in {config_path} is "
            f"{config.vocab_size}: those tokens would have no embedding. Use the vocabulary that "
            "belongs to the config (and checkpoint)")


def _check_options(options: TrainingOptions) -> None:
    if options.strategy not in STRATEGIES:
        raise KbertError(f"unknown strategy {options.strategy!r}; expected one of {', '.join(STRATEGIES)}")
    if options.remat and keras.backend.backend() == "tensorflow":
        raise KbertError("--remat (Keras's RematScope) fails on TensorFlow when a layer is called with keyword "
                         "arguments in a compiled step (tf.custom_gradient), as every Dropout is: train with "
                         "KERAS_BACKEND=jax (or torch), or leave --remat out")
    if options.mixed_precision not in (None, *PRECISIONS):
        raise KbertError(f"unknown mixed precision {options.mixed_precision!r}; expected bf16 or fp16")
    for name in ("epochs", "batch_size", "maxlen", "grad_accum", "group_size", "query_length"):
        check_whole_number(getattr(options, name), name)
    if options.maxlen < 3:
        raise KbertError(f"maxlen must leave room for [CLS] and [SEP], got {options.maxlen}")
    temperature = options.temperature
    if temperature is not None and not (_is_number(temperature) and 0 < temperature < math.inf):
        raise KbertError(f"temperature (--temperature) must be a finite positive number, got {options.temperature!r}")
    for name in ("query_regularizer", "document_regularizer"):
        if not (_is_number(getattr(options, name)) and 0 <= getattr(options, name) < math.inf):
            raise KbertError(f"{name} (--{name.replace('_', '-')}) must be a finite number, 0 or more, got "
                             f"{getattr(options, name)!r}")
    if options.inference_free and options.task != "sparse":
        raise KbertError(f"--inference-free: a weight table for the queries is for --task sparse, not --task "
                         f"{options.task}")
    if options.query_learning_rate is not None and not options.inference_free:
        raise KbertError("--query-learning-rate: the rate of an inference-free encoder's query table; give it with "
                         "--task sparse --inference-free")
    if options.query_learning_rate is not None and not (_is_number(options.query_learning_rate)
                                                         and 0 < options.query_learning_rate < math.inf):
        raise KbertError(f"query_learning_rate (--query-learning-rate) must be a finite positive number, got "
                         f"{options.query_learning_rate!r}")
    if options.teacher and options.task != "colbert":
        raise KbertError(f"--teacher: a reranker to distil is for --task colbert, not --task {options.task}")
    if options.rerank_loss not in RERANK_LOSSES:
        raise KbertError(f"unknown rerank loss {options.rerank_loss!r}; expected one of {', '.join(RERANK_LOSSES)}")
    if options.rerank_loss == "listwise" and (options.group_size < 2 or options.batch_size % options.group_size):
        raise KbertError(f"--rerank-loss listwise: --batch-size {options.batch_size} counts pairs, whole groups of "
                         f"--group-size {options.group_size} passages (at least 2): use a multiple of it")
    if options.contrastive_loss not in (None, *CONTRASTIVE_LOSSES):
        raise KbertError(f"unknown contrastive loss {options.contrastive_loss!r}; expected one of "
                         f"{', '.join(CONTRASTIVE_LOSSES)}")
    if not (_is_number(options.learning_rate) and 0 < options.learning_rate < math.inf):
        raise KbertError(f"learning rate (--lr) must be a finite positive number, got {options.learning_rate!r}")
    if not (_is_number(options.warmup_ratio) and 0 <= options.warmup_ratio < 1):
        raise KbertError(f"warm-up ratio (--warmup) must be in [0, 1), got {options.warmup_ratio!r}")
    if not (_is_number(options.crf_lr_multiplier) and 0 < options.crf_lr_multiplier < math.inf):
        raise KbertError(f"CRF learning-rate multiplier must be a finite positive number, "
                         f"got {options.crf_lr_multiplier!r}")
    if options.lora_rank is not None and not is_whole_number(options.lora_rank, 1):
        raise KbertError(f"LoRA rank (--lora-rank) must be a positive integer, got {options.lora_rank!r}")
    if options.lora_alpha is not None and not (_is_number(options.lora_alpha) and 0 < options.lora_alpha < math.inf):
        raise KbertError(f"LoRA alpha (--lora-alpha) must be a finite positive number, got {options.lora_alpha!r}")
    if options.lora_alpha is not None and not options.lora_rank:
        raise KbertError("--lora-alpha scales LoRA's adapters: give --lora-rank too")
    if options.lora_embeddings is not None and not is_whole_number(options.lora_embeddings, 1):
        raise KbertError(f"LoRA's token-table rank (--lora-embeddings) must be a positive integer, "
                         f"got {options.lora_embeddings!r}")
    if options.lora_embeddings and not options.lora_rank:
        raise KbertError("--lora-embeddings adds a LoRA adapter to the token table: give --lora-rank too")
    if options.lora_rank and options.adversarial:
        raise KbertError(f"--adversarial {options.adversarial} perturbs the token embeddings, which LoRA freezes: "
                         "use one or the other")
    if options.jit_compile and keras.backend.backend() == "torch":
        raise KbertError("--jit-compile compiles the training step with XLA, on the tensorflow and jax backends; "
                         "on torch Keras would use torch.compile, which kbert does not support: leave it out")
    if options.adversarial not in (None, *ADVERSARIAL):
        raise KbertError(f"unknown adversarial training {options.adversarial!r}; expected one of "
                         f"{', '.join(ADVERSARIAL)}")
    if options.adversarial == "gp" and options.mixed_precision == "fp16":
        raise KbertError("--adversarial gp with --mixed-precision fp16: the gradient penalty's own gradients are "
                         "not loss-scaled, so Keras's loss-scale optimizer would divide every update by the "
                         "scale (about 32,768); use --mixed-precision bf16, or fgm, or leave one out")
    if not (_is_number(options.adversarial_epsilon) and 0 < options.adversarial_epsilon < math.inf):
        raise KbertError(f"adversarial epsilon must be a finite positive number, got {options.adversarial_epsilon!r}")
    if not (_is_number(options.weight_decay) and 0 <= options.weight_decay < math.inf):
        raise KbertError(f"weight decay must be a finite number of 0 or more, got {options.weight_decay!r}")
    if options.optimizer not in OPTIMIZERS:
        raise KbertError(f"unknown optimizer {options.optimizer!r}; expected one of {', '.join(OPTIMIZERS)}")
    if options.schedule not in SCHEDULES:
        raise KbertError(f"unknown learning-rate schedule {options.schedule!r}; expected one of {', '.join(SCHEDULES)}")
    if options.whole_word not in WHOLE_WORDS:
        raise KbertError(f"unknown whole-word masking {options.whole_word!r}; expected one of "
                         f"{', '.join(WHOLE_WORDS)}")
    if options.pack not in PACKINGS:
        raise KbertError(f"unknown packing {options.pack!r}; expected one of {', '.join(PACKINGS)}")
    if not (_is_number(options.mask_rate) and 0 < options.mask_rate < 1):
        raise KbertError(f"mask rate must be in (0, 1), got {options.mask_rate!r}")


def _add_adversarial_training(trainer, options: TrainingOptions, strategy) -> None:
    """FGM or the gradient penalty on `Embedding-Token`, as `--adversarial` asks."""
    if options.adversarial is None:
        return
    if strategy.num_replicas_in_sync > 1:
        raise KbertError(f"--adversarial {options.adversarial} changes the embedding table inside each step, "
                         f"which runs on one device only; this run has {strategy.num_replicas_in_sync} "
                         "(use --strategy with one device, or leave --adversarial out)")
    method = adversarial_training if options.adversarial == "fgm" else gradient_penalty
    method(trainer, epsilon=options.adversarial_epsilon)  # on the token embedding


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
