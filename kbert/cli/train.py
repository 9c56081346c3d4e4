"""`kbert train` and `kbert pretrain`: a task trained on a data file, an encoder pre-trained on plain text.

Each task's own options come from `kbert.tasks.arguments` (a new task's options touch no module here).
"""

from __future__ import annotations

import sys
from typing import Callable, Tuple

from kbert.cli.arguments import checkpoint_argument, family_argument, fetch_checkpoint_argument, positive_int, \
    precision_option
from kbert.errors import KbertError
from kbert.tasks import TASKS
from kbert.tasks.arguments import COUNT, TASK_OPTIONS
from kbert.training.options import ADVERSARIAL, OPTIMIZERS, SCHEDULES, TrainingOptions
from kbert.training.records import parse_columns

#: The tasks `kbert train` trains (`mlm` is `kbert pretrain`'s).
FINE_TUNED = tuple(task for task in TASKS if task != "mlm")


def add_commands(command) -> None:
    """Adds `train` and `pretrain` through `command(name, help)`, which returns a sub-parser."""
    _add_train(command("train", "fine-tune a classifier, an entity tagger (--task ner) or a seq2seq "
                                "generator (--task seq2seq) on a data file"))
    _add_pretrain(command("pretrain", "pre-train an encoder's masked language model on plain text (whole-word "
                                     "masking, jieba for Chinese); the output is a checkpoint kbert train reads"))


def _add_train(train) -> None:
    defaults = TrainingOptions()
    _run_arguments(train, defaults, data="training data (text<TAB>label, CSV/TSV, JSONL; a tagged file for "
                                         "--task ner)", valid="validation data")
    train.add_argument("--task", choices=FINE_TUNED, default=defaults.task,
                       help="classify: a label per text; ner: entities in tagged text (token<TAB>tag a line, "
                            "a blank line between sentences; BIO, BIOES or BMES); seq2seq: a target text per "
                            "source text (source<TAB>target, or JSONL with source and target), UniLM or T5 (--model); "
                            "embed: sentence embeddings trained contrastively (see --loss); sparse: a SPLADE sparse "
                            "encoder, colbert: a ColBERT multi-vector encoder (both on "
                            "query<TAB>positive[<TAB>negative] rows)")
    family_argument(train, "default: the config's model_type, else bert; t5, t5.1.1 or mt5.1.1 for an "
                           "encoder-decoder --task seq2seq")
    _add_task_options(train, defaults, FINE_TUNED)
    train.add_argument("--columns", metavar="FIELD=COLUMN,...",
                       help="the columns (or JSON keys) of --train and --valid when their names are not known, "
                            "e.g. text=review,label=sentiment (fields: text, text_b, label; seq2seq: source, "
                            "target)")
    checkpoint_argument(train, "pre-trained weights (default: none, random weights); their config and "
                               "vocabulary are read from beside them")
    train.add_argument("--num-labels", type=positive_int,
                       help="number of classes (default: the labels in --train)")
    train.add_argument("--skip-malformed", action="store_true",
                       help="skip malformed rows (counted, with their lines) instead of stopping")
    train.add_argument("--no-bucketing", action="store_true",
                       help="batch training examples in (shuffled) order instead of with others of similar "
                            "length (more padding; kbert 0.1's batching)")
    train.add_argument("--lora-rank", type=positive_int, metavar="R",
                       help="train rank-R LoRA adapters on the blocks' kernels (embeddings frozen; biases, norms "
                            "and the head trained) instead of the whole model; lora.safetensors holds them, "
                            "model.weights.h5 the merged model")
    train.add_argument("--lora-alpha", type=float, metavar="A",
                       help="LoRA's scale numerator: adapters scaled by A/R (default: R)")
    train.add_argument("--lora-embeddings", type=positive_int, metavar="R",
                       help="with --lora-rank: a rank-R LoRA adapter on the token embedding table too, instead "
                            "of keeping it frozen (scaled by A/R)")
    train.add_argument("--adversarial", choices=ADVERSARIAL,
                       help="train against perturbations of the token embeddings: fgm (bert4keras's "
                            "adversarial_training) or gp (gradient penalty)")
    train.add_argument("--adversarial-epsilon", type=float, default=defaults.adversarial_epsilon, metavar="E",
                       help="the perturbation's norm (fgm) or the penalty's weight (gp)")
    train.set_defaults(run=run_train)


def _add_pretrain(pretrain) -> None:
    """`kbert pretrain`: the run options of `train`, the masking and the optimizer."""
    defaults = TrainingOptions.for_pretraining()
    _run_arguments(pretrain, defaults, data="plain text, a document or sentence a line: a file, or a directory "
                                            "of files", valid="held-out text (scored by masked-token accuracy)")
    family_argument(pretrain, "default: the config's model_type, else bert; an encoder family with an MLM head")
    checkpoint_argument(pretrain, "continue pre-training from these weights, MLM head included (default: none, "
                                  "random weights)")
    _add_task_options(pretrain, defaults, ["mlm"])
    pretrain.set_defaults(run=run_pretrain)


def _add_task_options(parser, defaults: TrainingOptions, tasks) -> None:
    """The options of `tasks` (`kbert.tasks.arguments.TASK_OPTIONS`), each defaulting to its `TrainingOptions`
    field; where the command trains several tasks, each one's help names the tasks that read it."""
    for option in TASK_OPTIONS:
        if not set(option.tasks) & set(tasks):
            continue
        settings = dict(option.settings)
        if settings.get("type") == COUNT:
            settings["type"] = positive_int
        if settings.get("action") != "store_true":
            settings["default"] = getattr(defaults, option.field)
        parser.add_argument(option.flag, dest=option.field, help=option.described if len(tasks) > 1 else option.help,
                            **settings)


def _run_arguments(parser, defaults: TrainingOptions, data: str, valid: str) -> None:
    """What `train` and `pretrain` share: the model's files, the data, the output and the run's options."""
    parser.add_argument("--config", help="the backbone's bert_config.json / config.json (default: the one beside "
                                         "--checkpoint)")
    parser.add_argument("--vocab", help="its vocab.txt (Hugging Face's RoBERTa / XLM-R: its tokenizer.json; default: "
                                        "the one beside --checkpoint)")
    parser.add_argument("--train", required=True, help=data)
    parser.add_argument("--valid", help=f"{valid}; the best epoch on it is kept "
                                        "(default: none, every epoch is kept in turn)")
    parser.add_argument("--out", required=True,
                        help="model directory to write (written as OUT.partial, moved to OUT at the end)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing --out when the run completes")
    parser.add_argument("--epochs", type=positive_int, default=defaults.epochs, help="passes over --train")
    parser.add_argument("--batch-size", type=positive_int, default=defaults.batch_size,
                        help="examples per step, over all devices")
    parser.add_argument("--lr", type=float, default=defaults.learning_rate, help="peak learning rate")
    parser.add_argument("--warmup", type=float, default=defaults.warmup_ratio,
                        help="share of the steps spent warming up, in [0, 1)")
    parser.add_argument("--schedule", choices=SCHEDULES, default=defaults.schedule,
                        help="after the warm-up: linear decay to 0, or constant (with --optimizer adafactor, T5's "
                             "own schedule)")
    parser.add_argument("--weight-decay", type=float, default=defaults.weight_decay,
                        help="decoupled weight decay (not on LayerNorms and biases)")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default=defaults.optimizer,
                        help="adamw; lamb for large pre-training batches; adafactor, T5's own (steps relative to "
                             "each weight's scale, no momentum: a T5 from random weights, with --lr 2e-2)")
    parser.add_argument("--maxlen", type=positive_int, default=defaults.maxlen,
                        help="longest sequence in tokens, [CLS] and [SEP] included")
    parser.add_argument("--cased", action="store_true", help="keep case and accents (cased vocabularies)")
    parser.add_argument("--strategy", choices=["auto", "mirrored", "multiworker"], default=defaults.strategy,
                        help="several devices or machines: auto (every local GPU; on JAX every local device), mirrored "
                             "(TensorFlow), multiworker (TensorFlow: reads TF_CONFIG; JAX: reads Keras's "
                             "KERAS_DISTRIBUTION_JOB_ADDRESSES, _NUM_PROCESSES, _PROCESS_ID)")
    precision_option(parser)
    parser.add_argument("--no-shuffle", action="store_true", help="keep the training file's order")
    parser.add_argument("--seed", type=int, default=defaults.seed,
                        help="seed of initialisation, shuffling, dropout (and masking)")
    parser.add_argument("--ema", action="store_true",
                        help="train on an exponential moving average of the weights (Keras's use_ema), "
                             "validated and saved each epoch")
    parser.add_argument("--model-parallel", type=positive_int, default=defaults.model_parallel, metavar="N",
                        help="JAX: split each attention and feed-forward kernel and the token table over N devices "
                             "(keras.distribution.ModelParallel; the other devices split the batch)")
    parser.add_argument("--remat", action="store_true",
                        help="the feed-forward layers recompute their intermediate values in the backward pass "
                             "(Keras's RematScope, gradient checkpointing): less activation memory, slower steps")
    parser.add_argument("--grad-accum", type=positive_int, default=defaults.grad_accum, metavar="N",
                        help="accumulate the gradients of N batches per update (effective batch N x --batch-size)")
    parser.add_argument("--jit-compile", action="store_true",
                        help="compile the training step with XLA on TensorFlow (faster steps, a compilation per "
                             "batch shape; JAX always compiles)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the interrupted run in OUT.partial from its last completed epoch")


def _run_options(args, **task_options) -> TrainingOptions:
    """`TrainingOptions` from the arguments `_run_arguments` adds, and the task's own."""
    return TrainingOptions(
        epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.lr, maxlen=args.maxlen,
        warmup_ratio=args.warmup, schedule=args.schedule, weight_decay=args.weight_decay, do_lower_case=not args.cased,
        strategy=args.strategy, mixed_precision=args.mixed_precision, shuffle=not args.no_shuffle, seed=args.seed,
        ema=args.ema, remat=args.remat, model_parallel=args.model_parallel, grad_accum=args.grad_accum,
        jit_compile=args.jit_compile, model=args.model,
        optimizer=args.optimizer, **task_options)


def run_train(args) -> int:
    from kbert.tasks import train

    beside = fetch_checkpoint_argument(args)
    options = _run_options(
        args, skip_malformed=args.skip_malformed, bucketing=not args.no_bucketing, adversarial=args.adversarial,
        adversarial_epsilon=args.adversarial_epsilon, task=args.task, columns=parse_columns(args.columns) or None,
        lora_rank=args.lora_rank, lora_alpha=args.lora_alpha, lora_embeddings=args.lora_embeddings,
        **_task_values(args, *FINE_TUNED))
    return _run(args, options, train, beside, num_labels=args.num_labels)


def _task_values(args, *tasks: str) -> dict:
    """The `TrainingOptions` fields of `tasks`' own options, as given."""
    return {option.field: getattr(args, option.field) for option in TASK_OPTIONS if set(option.tasks) & set(tasks)}


def run_pretrain(args) -> int:
    from kbert.tasks import pretrain

    beside = fetch_checkpoint_argument(args)
    options = _run_options(args, task="mlm", **_task_values(args, "mlm"))
    return _run(args, options, pretrain, beside)


def _run(args, options: TrainingOptions, run: Callable, beside, **extra) -> int:
    """Runs `train` or `pretrain` (`beside`: the files of --checkpoint, or None); Ctrl-C says what was kept;
    the end says what was saved."""
    from kbert.tasks import get_task
    from kbert.training.loop import TrainingInterrupted

    config, vocab = _model_files(args, beside)
    try:
        state = run(config, vocab, args.train, args.out, valid_path=args.valid,
                    checkpoint_path=args.checkpoint, options=options, resume=args.resume,
                    overwrite=args.overwrite, **extra)
    except TrainingInterrupted as interruption:
        print(f"\nkbert: {interruption}", file=sys.stderr)
        return 130
    worker = state.get("worker")
    if worker and not worker["is_chief"]:
        print(f"{worker['task_type']} {worker['task_id']} of {worker['num_workers']}: done; "
              "the chief writes the model")
        return 0
    task = get_task(options)
    best = state.get(f"best_{task.score_name}")
    print(f"saved {args.out} (epoch {state['best_epoch']}"
          + (f", {task.score_label} {best:.4f})" if best is not None else ")"))
    return 0


def _model_files(args, beside) -> Tuple[str, str]:
    """--config and --vocab, by default those beside --checkpoint (a model directory, a fetched name)."""
    config = args.config or (beside and beside.config)
    vocab = args.vocab or (beside and beside.vocab)
    for option, path in (("config", config), ("vocab", vocab)):
        if not path:
            raise KbertError(f"--{option} is required, unless --checkpoint has one beside it (kbert pretrain "
                             "writes bert_config.json and vocab.txt beside its weights; a hub repository or "
                             "release archive has its config and vocabulary)")
    return config, vocab
