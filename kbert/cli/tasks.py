"""The commands of the tasks: `train`, `pretrain`, `evaluate`, `predict`, `export`.

`evaluate` and `predict` read the model directory's task and hand over to
that task's module (`kbert.tasks.classification`, `.ner`, `.seq2seq`).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Callable, List, Optional, Tuple

from kbert.cli.arguments import (adapter_names, checkpoint_argument, embedding_head_argument, family_argument,
                                 fetch_checkpoint_argument, onnx_runtime_chosen, positive_int, precision_option,
                                 runtime_options)
from kbert.errors import DataError, KbertError, is_blank
from kbert.models.heads import TOKEN_HEADS
from kbert.tasks import TASKS
from kbert.training.options import (ADVERSARIAL, CONTRASTIVE_LOSSES, OPTIMIZERS, PACKINGS, POOLINGS,
                                    RERANK_LOSSES, SCHEDULES, WHOLE_WORDS, TrainingOptions)
from kbert.training.records import ONE_A_LINE, parse_columns


def add_commands(command) -> None:
    """Adds the commands through `command(name, help)`, which returns a sub-parser."""
    _add_train(command("train", "fine-tune a classifier, an entity tagger (--task ner) or a seq2seq "
                                "generator (--task seq2seq) on a data file"))
    _add_pretrain(command("pretrain", "pre-train an encoder's masked language model on plain text (whole-word "
                                     "masking, jieba for Chinese); the output is a checkpoint kbert train reads"))

    evaluate = command("evaluate", "accuracy, per-class P/R/F1, confusion matrix; a tagger's entity P/R/F1; "
                                   "a generator's exact match and character F1; an embedding model's MTEB-style "
                                   "scores (STS, retrieval, classification, clustering)")
    _inference_arguments(evaluate, "checked against the model directory (default: its task)")
    evaluate.add_argument("--data", required=True, help="labelled data file (a tagged file for a tagger); for an "
                                                        "embedding model: scored pairs (STS), a BEIR folder "
                                                        "(retrieval), or labelled texts (clustering; "
                                                        "classification with --train)")
    evaluate.add_argument("--train", help="an embedding model: labelled texts a logistic regression on the frozen "
                                          "vectors is fitted on, then scored on --data")
    evaluate.add_argument("--fuse", metavar="MODEL", help="an embedding model on a BEIR folder: a second one (a "
                                                          "sparse encoder beside a dense one) whose ranking is "
                                                          "fused with --model's by reciprocal ranks (hybrid search)")
    evaluate.add_argument("--adapter", metavar="TASK", action="append",
                          help="an embedding model with task LoRA adapters (jina-embeddings-v3): the task's, merged "
                               "in; given once per task (or 'all'), each kind of work takes its own (retrieval's "
                               "queries retrieval.query and documents retrieval.passage, STS text-matching, "
                               "classification, clustering separation)")
    evaluate.add_argument("--json", action="store_true", help="print JSON")
    evaluate.set_defaults(run=run_evaluate)

    predict = command("predict", "label and probability for each input text; a tagger's entities; "
                                 "a generator's target")
    _inference_arguments(predict, "checked against the model directory (default: its task); a tagger "
                                  "prints type<TAB>start<TAB>end<TAB>text per entity (character offsets, "
                                  "end exclusive) and a blank line after each text")
    predict.add_argument("input", nargs="?", default="-",
                         help="file of texts (one a line, or CSV/TSV/JSONL with a text column); "
                              "- for standard input")
    predict.add_argument("--json", action="store_true", help="print JSON Lines")
    predict.set_defaults(run=run_predict)

    embed = command("embed", "a vector per input text from a sentence-transformers model (a folder or a name "
                             "such as hf://sentence-transformers/all-MiniLM-L6-v2): JSON Lines, or --npy; a "
                             "SparseEncoder's as {\"indices\", \"values\"} lines; a MultiVectorEncoder's "
                             "(ColBERT) as a vector per token")
    embed.add_argument("--model", required=True, help="a sentence-transformers folder, or a name (hf://OWNER/NAME, "
                                                       "an archive's URL) fetched once into the cache")
    embed.add_argument("input", nargs="?", default="-", help="file of texts, one a line; - for standard input")
    embed.add_argument("--npy", metavar="OUT", help="write one float32 array [texts, dimensions] to OUT (.npy) "
                                                    "instead of printing; OUT must not exist (a multi-vector "
                                                    "model: every token's vectors [tokens, dimensions], and OUT's "
                                                    "name with .offsets.npy, where each text's rows start)")
    embed.add_argument("--batch-size", type=positive_int, default=32, help="texts a model call takes at most")
    embed.add_argument("--normalize", action="store_true",
                       help="scale each vector to unit length (a model whose last module is Normalize does)")
    prompt = embed.add_mutually_exclusive_group()
    prompt.add_argument("--prompt-name", metavar="NAME", help="put the model's prompt NAME before each text (the "
                                                              "prompts of its config_sentence_transformers.json; "
                                                              "default: its default_prompt_name, if any); a "
                                                              "multi-vector model: query or document embeds the "
                                                              "texts as queries (expanded) or documents")
    prompt.add_argument("--prompt", metavar="TEXT", help="put TEXT before each text instead ('' for no prompt)")
    embed.add_argument("--dimensions", type=positive_int, metavar="N",
                       help="keep each vector's first N values (a Matryoshka model's shorter vectors), scaled back "
                            "to unit length where the model's vectors are")
    embed.add_argument("--precision", choices=("float", "int8", "uint8", "binary", "ubinary"), default="float",
                       help="the vectors' values: float32, or fewer bits as sentence-transformers' "
                            "quantize_embeddings gives them (int8 and uint8 need --ranges, or the "
                            "model folder's calibration_ranges.json)")
    embed.add_argument("--ranges", metavar="FILE", help="each dimension's calibration range, for --precision int8 "
                                                        "or uint8 (a file --calibrate wrote)")
    embed.add_argument("--calibrate", metavar="OUT", help="write each dimension's range over the input texts' "
                                                          "vectors to OUT (JSON) instead of the vectors")
    embed.add_argument("--top-k", type=positive_int, metavar="K",
                       help="a sparse encoder: keep each vector's K largest weights (sentence-transformers' "
                            "max_active_dims); default: every non-zero one")
    embedding_head_argument(embed)
    embed.add_argument("--adapter", metavar="TASK", help="a model with task LoRA adapters (jina-embeddings-v3): "
                                                         "the task's, merged in (retrieval.query, retrieval.passage, "
                                                         "separation, classification, text-matching), with the "
                                                         "folder's prompt of that name if it has one; default: "
                                                         "none, the base weights")
    embed.add_argument("--cache-dir", help="where a named model is kept (default: $KBERT_CACHE, else "
                                           "~/.cache/kbert; the hub's own cache for hf://)")
    runtime_options(embed, "the model", "worth it for a long file on a CPU: the export takes seconds "
                    "(docs/embeddings.md)")
    precision_option(embed, weights=True)
    embed.set_defaults(run=run_embed)
    export = command("export", "a classifier or tagger for other runtimes: TF SavedModel, ONNX (int8 too), "
                               "LiteRT, or a .keras file; a UniLM seq2seq model's cached step as ONNX")
    export.add_argument("--model", required=True, help="model directory from kbert train")
    export.add_argument("output", metavar="OUT", help="SavedModel directory, or a path ending in .onnx, .tflite "
                                                      "(LiteRT; its metadata goes to NAME.metadata.json) or .keras "
                                                      "(must not exist)")
    export.add_argument("--format", choices=("saved_model", "onnx", "litert", "keras"),
                        help="default: from OUT (.onnx, .tflite, .keras; else a SavedModel directory)")
    export.add_argument("--quantize", choices=("int8",),
                        help="ONNX and LiteRT: int8 weights, run by the runtime's int8 kernels (smaller, and "
                             "faster on CPU with onnxruntime)")
    embedding_head_argument(export)
    export.add_argument("--adapter", metavar="TASK", help="an embedding model with task LoRA adapters "
                                                          "(jina-embeddings-v3): the task whose weights the file "
                                                          "computes, merged in; default: the base weights")
    precision_option(export)
    export.set_defaults(run=run_export)


def _add_train(train) -> None:
    defaults = TrainingOptions()
    _run_arguments(train, defaults, data="training data (text<TAB>label, CSV/TSV, JSONL; a tagged file for "
                                         "--task ner)", valid="validation data")
    train.add_argument("--task", choices=[task for task in TASKS if task != "mlm"], default=defaults.task,
                       help="classify: a label per text; ner: entities in tagged text (token<TAB>tag a line, "
                            "a blank line between sentences; BIO, BIOES or BMES); seq2seq: a target text per "
                            "source text (source<TAB>target, or JSONL with source and target), UniLM or T5 (--model); "
                            "embed: sentence embeddings trained contrastively (see --loss); sparse: a SPLADE sparse "
                            "encoder, colbert: a ColBERT multi-vector encoder (both on "
                            "query<TAB>positive[<TAB>negative] rows)")
    family_argument(train, "default: the config's model_type, else bert; t5, t5.1.1 or mt5.1.1 for an "
                           "encoder-decoder --task seq2seq")
    train.add_argument("--head", choices=TOKEN_HEADS, default=defaults.head,
                       help="the tagger's head (--task ner)")
    train.add_argument("--crf-lr-multiplier", type=float, default=defaults.crf_lr_multiplier,
                       help="the CRF transitions' learning rate as a multiple of --lr (--head crf)")
    train.add_argument("--pooling", choices=POOLINGS, default=defaults.pooling,
                       help="--task embed: how the token vectors become one")
    train.add_argument("--loss", dest="contrastive_loss", choices=CONTRASTIVE_LOSSES,
                       help="--task embed: in_batch (text<TAB>positive[<TAB>negative]), simcse (one text a line) "
                            "or cosent (text<TAB>text_b<TAB>score); default: the one the data's columns call for")
    train.add_argument("--temperature", type=float, default=defaults.temperature,
                       help="--task embed: the cosines are divided by it (default 0.05); --task sparse: the dot "
                            "products (default 1); --task colbert: the MaxSim scores (default 1)")
    train.add_argument("--query-length", type=positive_int, default=defaults.query_length,
                       help="--task colbert: a query's tokens, filled with [MASK] up to it and cut at it "
                            "(default 32)")
    train.add_argument("--teacher", metavar="RERANKER",
                       help="--task colbert: distil a reranker (a CrossEncoder folder, a --task rerank directory): "
                            "learn its scores of each query's positive and hard negative (KL divergence)")
    train.add_argument("--query-regularizer", type=float, default=defaults.query_regularizer,
                       help="--task sparse: the weight of SPLADE's FLOPS regularizer on the queries' vectors "
                            "(reached over the first third of the steps)")
    train.add_argument("--document-regularizer", type=float, default=defaults.document_regularizer,
                       help="--task sparse: the weight of the FLOPS regularizer on the documents' vectors")
    train.add_argument("--inference-free", action="store_true",
                       help="--task sparse: only documents go through the model; a query's vector is a fixed "
                            "table of inverse document frequencies (written as a sentence-transformers Router)")
    train.add_argument("--query-learning-rate", type=float, default=defaults.query_learning_rate,
                       help="--task sparse --inference-free: train the queries' table too, at this learning rate "
                            "(sentence-transformers' example: 1e-3); default: it stays the IDF table")
    train.add_argument("--symmetric", action="store_true",
                       help="--task embed, in_batch: also score each positive against the queries")
    train.add_argument("--rerank-loss", choices=RERANK_LOSSES, default=defaults.rerank_loss,
                       help="--task rerank: pointwise (each pair's label) or listwise (a softmax over each query's "
                            "group of --group-size passages: a relevant one and others of the same query)")
    train.add_argument("--group-size", type=positive_int, default=defaults.group_size,
                       help="--rerank-loss listwise: passages a group (--batch-size counts pairs: a multiple)")
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
    pretrain.add_argument("--whole-word", choices=WHOLE_WORDS, default=defaults.whole_word,
                          help="mask whole words: jieba's (Chinese), wordpiece's (a word and its ## pieces) or "
                               "none (each token alone)")
    pretrain.add_argument("--mask-rate", type=float, default=defaults.mask_rate,
                          help="share of the tokens predicted (80 %% [MASK], 10 %% random, 10 %% kept)")
    pretrain.add_argument("--pack", choices=PACKINGS, default=defaults.pack,
                          help="how lines share a row: stream (end to end, a line continuing into the next row, "
                               "attention across lines: Google's and bert4keras's data), documents (each line a "
                               "document: several a row, positions restarted, attention within it), none (one "
                               "line a row, padded)")
    pretrain.set_defaults(run=run_pretrain)


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


def _inference_arguments(parser, task_help: str) -> None:
    """What `evaluate` and `predict` share: the model directory, batching, generation, precision."""
    parser.add_argument("--model", required=True, help="model directory from kbert train")
    parser.add_argument("--task", choices=TASKS, help=f"the model's task, {task_help}")
    parser.add_argument("--batch-size", type=positive_int, default=64, help="examples per step")
    parser.add_argument("--no-bucketing", action="store_true",
                        help="batch the texts in input order instead of by length (results are in input "
                             "order either way)")
    parser.add_argument("--beam-size", type=positive_int, default=1,
                        help="seq2seq: beam search with this many beams (default: 1, greedy)")
    parser.add_argument("--max-new-tokens", type=positive_int,
                        help="seq2seq: the longest target (default: what --maxlen of training leaves after each source)")
    parser.add_argument("--columns", metavar="FIELD=COLUMN,...",
                        help="the columns (or JSON keys) of the data when their names are not known, e.g. "
                             "text=review,label=sentiment")
    parser.add_argument("--top-k", type=positive_int, default=5,
                        help="a pre-trained model (kbert pretrain): the tokens given for each [MASK] of a text")
    parser.add_argument("--model-parallel", type=positive_int, default=1, metavar="N",
                        help="JAX: the model split over N devices as kbert train --model-parallel splits it")
    precision_option(parser, weights=True)
    embedding_head_argument(parser)


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
        adversarial_epsilon=args.adversarial_epsilon, task=args.task, head=args.head,
        crf_lr_multiplier=args.crf_lr_multiplier, columns=parse_columns(args.columns) or None,
        lora_rank=args.lora_rank, lora_alpha=args.lora_alpha, lora_embeddings=args.lora_embeddings,
        pooling=args.pooling, contrastive_loss=args.contrastive_loss, temperature=args.temperature,
        symmetric=args.symmetric, rerank_loss=args.rerank_loss, group_size=args.group_size,
        query_regularizer=args.query_regularizer, document_regularizer=args.document_regularizer,
        inference_free=args.inference_free, query_learning_rate=args.query_learning_rate,
        query_length=args.query_length, teacher=args.teacher)
    return _run(args, options, train, beside, num_labels=args.num_labels)


def run_pretrain(args) -> int:
    from kbert.tasks import pretrain

    beside = fetch_checkpoint_argument(args)
    options = _run_options(args, task="mlm", whole_word=args.whole_word, mask_rate=args.mask_rate, pack=args.pack)
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


def _model_task(args) -> str:
    """The model directory's task; a --task that differs is an error."""
    from kbert.tasks.predictors import model_task, resolved

    task = model_task(resolved(args.model))
    if task == "mlm" and args.command != "predict":
        raise KbertError(f"{args.model}: a pre-trained model (kbert pretrain), which has no task to "
                         f"{args.command}: fine-tune it with kbert train --checkpoint {args.model} (its "
                         "config and vocabulary are read from there)")
    if args.task is not None and args.task != task:
        raise KbertError(f"{args.model}: a model trained for --task {task}, not {args.task}")
    return task


def run_evaluate(args) -> int:
    from kbert.tasks.predictors import is_embedding_model, resolved

    if is_embedding_model(resolved(args.model)):
        return _evaluate_embedder(args)
    if args.fuse:
        raise KbertError(f"--fuse: fuses two embedding models' retrieval rankings; {args.model} is not an embedding "
                         "model")
    for option in ("head", "adapter"):
        if getattr(args, option):
            raise KbertError(f"--{option}: an embedding model's option (bge-m3's output, jina-embeddings-v3's task "
                             f"adapters); {args.model} is not an embedding model")
    if _model_task(args) == "rerank":
        return _evaluate_reranker(args)
    if args.train:
        raise KbertError("--train: for an embedding model (a logistic regression on its vectors); "
                         f"{args.model} is a model directory of kbert train")
    task = _model_task(args)
    if task == "ner" and args.columns:
        raise KbertError("--columns: a tagger reads token<TAB>tag files, which have no named columns")
    if task == "ner":
        return _evaluate_tagger(args)
    if task == "seq2seq":
        return _evaluate_generator(args)
    return _evaluate_classifier(args)


def _evaluate_embedder(args) -> int:
    from kbert.tasks.embedding_evaluation import evaluate

    return _print_scores_line(args, evaluate(args.model, args.data, args.train, batch_size=args.batch_size,
                                             fuse=args.fuse, head=args.head, adapter=adapter_names(args.adapter)))


def _evaluate_reranker(args) -> int:
    from kbert.tasks.predictors import resolved
    from kbert.tasks.reranking import evaluate

    return _print_scores_line(args, evaluate(resolved(args.model), args.data, batch_size=args.batch_size))


def _print_scores_line(args, result: dict) -> int:
    """An embedding model's or reranker's scores: JSON with --json, else one line of them."""
    if _printed_as_json(args, result):
        return 0
    print(_scores_line(result) + f" ({result['kind']})")
    for model, scores in zip((args.model, args.fuse), result.get("models", ())):  # the fused models' own
        print(f"  {model}: {_scores_line(scores)}")
    return 0


def _scores_line(result: dict) -> str:
    return " ".join(f"{name} {value:.4f}" if isinstance(value, float) else f"{name} {value}"
                    for name, value in result.items() if name not in ("kind", "data", "models"))


def _evaluate_classifier(args) -> int:
    from kbert.tasks.classification import evaluate

    result = evaluate(args.model, args.data, batch_size=args.batch_size, bucketing=not args.no_bucketing,
                      columns=parse_columns(args.columns))
    if _printed_as_json(args, result):
        return 0
    print(f"accuracy {result['accuracy']:.4f}\n")
    names = result["labels"]
    _print_scores("label", {name: result["classes"][name] for name in names})
    width = max(8, *(len(name) for name in names))
    print("\nconfusion matrix (rows: true label, columns: predicted)")
    print(" " * width + "".join(f"{name:>9}" for name in names))
    for name, row in zip(names, result["confusion"]):
        print(f"{name:<{width}}" + "".join(f"{count:>9}" for count in row))
    return 0


def _printed_as_json(args, result: dict) -> bool:
    """Prints an evaluation as JSON with --json (True), else the line naming its data (False)."""
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return True
    print(result["data"])
    return False


def _evaluate_tagger(args) -> int:
    from kbert.tasks.ner import evaluate

    result = evaluate(args.model, args.data, batch_size=args.batch_size, bucketing=not args.no_bucketing)
    if _printed_as_json(args, result):
        return 0
    print("entities: exact span and type\n")
    _print_scores("type", result["scores"])
    return 0


def _print_scores(kind: str, scores: dict) -> None:
    """Precision, recall, F1 and support, a row per class or entity type."""
    width = max(8, *(len(name) for name in scores))
    print(f"{kind:<{width}}  precision  recall     f1  support")
    for name, row in scores.items():
        print(f"{name:<{width}}  {row['precision']:9.4f}  {row['recall']:6.4f}  {row['f1']:5.4f}  "
              f"{row['support']:7d}")


def _evaluate_generator(args) -> int:
    from kbert.tasks.seq2seq import evaluate

    result = evaluate(args.model, args.data, beam_size=args.beam_size, max_new_tokens=args.max_new_tokens,
                      batch_size=args.batch_size, columns=parse_columns(args.columns))
    if _printed_as_json(args, result):
        return 0
    print(f"exact match {result['exact_match']:.4f}\ncharacter F1 {result['char_f1']:.4f}")
    return 0


def run_predict(args) -> int:
    from kbert.tasks.predictors import PredictionSettings, load_predictor

    task = _model_task(args)  # before waiting for standard input
    texts, pairs = _prediction_input(args, task)
    settings = PredictionSettings(args.batch_size, not args.no_bucketing, args.beam_size, args.max_new_tokens,
                                  args.top_k, head=args.head)
    predictor = load_predictor(args.model, settings)
    kept = [index for index, text in enumerate(texts) if text.strip()]
    if not kept:
        raise DataError("no texts to predict: every line is blank")
    rows = [predictor.blank(text) for text in texts]
    for index, row in zip(kept, predictor([texts[i] for i in kept], pairs and [pairs[i] for i in kept])):
        rows[index] = row
    for line, row in enumerate(rows, 1):
        print(_json_line(row, line) if args.json else _as_text(task, row))
    return 0


def _json_line(row: dict, line: int) -> str:
    """A row as one line of strict JSON: NaN and infinities, which JSON has no words for, are refused."""
    try:
        return json.dumps(row, ensure_ascii=False, allow_nan=False)
    except ValueError:
        raise KbertError(f"input line {line}: the model's answer holds NaN or an infinite number, which JSON cannot "
                         f"carry ({row}); the model's outputs overflowed (--mixed-precision float16?)") from None


def _as_text(task: str, row: dict) -> str:
    """A prediction without --json: `label<TAB>probability` (classify), the target (seq2seq), or
    `type<TAB>start<TAB>end<TAB>text` a line per entity and a blank line after each text (ner), the
    filled text (mlm);
    a blank text gives a blank line."""
    if task == "classify":
        return f"{row['label']}\t{row['probability']:.4f}" if row["label"] is not None else ""
    if task == "seq2seq":
        return row["target"] or ""
    if task == "mlm":  # the text with each [MASK] filled by its most probable token
        return row["filled"] or ""
    if task == "rerank":
        return f"{row['score']:.4f}" if row["score"] is not None else ""
    if task == "embed":  # a sparse encoder's row: its ids and weights; a multi-vector one's: its token vectors
        if "indices" in row:
            return json.dumps({"indices": row["indices"], "values": row["values"]})
        return json.dumps(row["embedding"] if "embedding" in row else row["embeddings"])
    return "".join(f"{entity['type']}\t{entity['start']}\t{entity['end']}\t{entity['text']}\n"
                   for entity in row["entities"])


def _prediction_input(args, task: str) -> Tuple[List[str], Optional[List[Optional[str]]]]:
    """The texts (and text pairs) to predict; one a line keeps its blank lines as "" so outputs line up."""
    from kbert.tasks.seq2seq import read_sources
    from kbert.training.data import read_examples

    columns = parse_columns(args.columns)
    if task == "rerank":  # query<TAB>passage a line
        return _query_passage_pairs(_input_lines(args.input), "standard input" if args.input == "-" else args.input)
    if args.input == "-":
        return _read_standard_input(), None
    if task == "seq2seq":
        return read_sources(args.input, columns), None
    if task == "mlm":  # plain lines: a text that starts with [MASK] is not a JSON array
        return _input_lines(args.input), None
    examples, report = read_examples(args.input, labelled=False, columns=columns)
    if report.layout != ONE_A_LINE:
        return [e.text for e in examples], [e.text_b for e in examples]
    if all("\t" in e.text for e in examples):
        print(f"kbert: warning: every line of {args.input} holds a tab, and each whole line is one text; "
              "to predict on one column, add a header row naming the columns (e.g. text<TAB>label)",
              file=sys.stderr)
    by_line = {e.line: e.text for e in examples}
    return [by_line.get(line, "") for line in range(1, max(by_line) + 1)], None


def _query_passage_pairs(lines: List[str], source: str) -> Tuple[List[str], List[Optional[str]]]:
    """`query<TAB>passage` lines as queries and passages (a blank line: a blank row)."""
    queries, passages = [], []
    for number, line in enumerate(lines, 1):
        query, tab, passage = line.partition("\t")
        if line.strip() and (not tab or not query.strip() or not passage.strip()):
            raise DataError(f"{source}, line {number}: expected query<TAB>passage, a reranker scores pairs")
        queries.append(query if line.strip() else "")
        passages.append(passage if line.strip() else None)
    return queries, passages


def _input_lines(path: str) -> List[str]:
    """One text a line of a file, or of standard input for `-`."""
    if path == "-":
        return _read_standard_input()
    with open(path, "rb") as handle:
        return _text_lines(handle.read(), path)


def _read_standard_input() -> List[str]:
    """One text a line from standard input (UTF-8)."""
    return _text_lines(sys.stdin.buffer.read(), "standard input")


def _text_lines(data: bytes, source: str) -> List[str]:
    """One text a line (UTF-8): lines end at \\n (or \\r\\n) only; a blank line is ""."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise DataError(f"{source}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    lines = [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]
    if lines and not lines[-1]:
        lines.pop()  # the newline that ends the last line
    if not any(line.strip() for line in lines):
        raise DataError(f"{source}: no texts to predict (expected one text a line)")
    return lines


def run_embed(args) -> int:
    """`kbert embed`: one `{"embedding": [...]}` line per input line, or one `.npy` array."""
    import numpy as np

    from kbert.io import atomic_path
    from kbert.tasks.embedding import Embedder
    from kbert.tasks.embedding_precision import (CALIBRATED, RANGES_FILE, calibration_ranges, load_ranges, quantized,
                                                 save_ranges)

    for path in (args.npy, args.npy and offsets_path(args.npy)):
        if path and os.path.lexists(path):
            raise KbertError(f"{path}: already exists; choose a new path (kbert never writes over an earlier output)")
    _check_precision_options(args)
    onnx = onnx_runtime_chosen(args)
    folder = Embedder.folder(args.model, args.cache_dir)  # before waiting for standard input
    if args.precision in CALIBRATED and not args.ranges and not os.path.isfile(os.path.join(folder, RANGES_FILE)):
        raise KbertError(f"--precision {args.precision} needs each dimension's range: --ranges FILE, or "
                         f"{RANGES_FILE} in {folder}; kbert embed --calibrate OUT.json writes them from texts like "
                         "yours")
    texts = _input_lines(args.input)
    blank = [number for number, text in enumerate(texts, 1) if is_blank(text)]
    if blank:
        raise DataError(f"{args.input}: line {blank[0]} is blank, or invisible characters only ({len(blank)} blank "
                        "lines in all); every line must "
                        "hold a text to embed, so that the vectors line up with the lines")
    embedder = Embedder.load(folder, adapter=args.adapter, head=args.head)
    _check_sparse_options(args, embedder)
    if embedder.multi_vector:
        return _embed_multi_vector(args, embedder, texts)
    # an unknown name is refused before an export; a sparse encoder's --prompt-name query or document is the role
    role = args.prompt_name if embedder.sparse and args.prompt_name in ("query", "document") else None
    if embedder.sparse:
        texts, prompt = embedder.role_prompted(texts, role, None if role else args.prompt_name, args.prompt), ""
    else:  # the prompt goes to encode, which counts its tokens where the pooling leaves them out
        prompt = embedder.prompt_text(args.prompt_name, args.prompt)
    embedder.check_dimensions(args.dimensions)
    ranges = load_ranges(args.ranges, args.dimensions or embedder.dimensions) if args.ranges else embedder.ranges
    if args.precision in CALIBRATED and not args.ranges and args.dimensions not in (None, embedder.dimensions):
        raise KbertError(f"{os.path.join(folder, RANGES_FILE)}: ranges of all {embedder.dimensions} dimensions; "
                         f"--dimensions {args.dimensions} vectors are scaled anew, so they need ranges of their own "
                         f"(kbert embed --dimensions {args.dimensions} --calibrate OUT.json, then --ranges OUT.json)")
    if onnx:
        from kbert.serving.export import onnx_embedder

        embedder.model = onnx_embedder(embedder, args.quantize)
    if embedder.sparse:
        for indices, values in embedder.encode_sparse(texts, args.batch_size, args.top_k, prompt="", role=role):
            print(json.dumps({"indices": indices.tolist(), "values": values.tolist()}))
        return 0
    vectors = embedder.truncated(embedder.encode(texts, args.batch_size, normalize=args.normalize, prompt=prompt),
                                 args.dimensions, args.normalize)
    broken = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
    if broken.size:  # JSON has no NaN, and a NaN in a .npy poisons every search over it
        raise KbertError(f"{args.input}: line {broken[0] + 1} ({broken.size} lines in all) gave NaN or infinite "
                         "values (an overflow in the model's precision, or damaged weights); nothing was written")
    if args.calibrate:
        save_ranges(args.calibrate, calibration_ranges(vectors), args.model, len(texts))
        print(f"kbert: the ranges of {vectors.shape[1]} dimensions over {len(texts)} texts written to "
              f"{args.calibrate}", file=sys.stderr)
        return 0
    vectors = quantized(vectors, args.precision, ranges)
    if args.npy:
        with atomic_path(args.npy) as temporary:
            with open(temporary, "wb") as handle:
                np.save(handle, vectors)
        print(f"kbert: {len(texts)} vectors of {vectors.shape[1]} dimensions written to {args.npy}", file=sys.stderr)
        return 0
    for vector in vectors:
        print(json.dumps({"embedding": vector.tolist()}))
    return 0


def offsets_path(npy: str) -> str:
    """Where `kbert embed --npy OUT` of a multi-vector model writes where each text's rows start."""
    return (npy[:-len(".npy")] if npy.endswith(".npy") else npy) + ".offsets.npy"


def _embed_multi_vector(args, embedder, texts) -> int:
    """`kbert embed` of a multi-vector encoder: each text's token vectors, as `{"embedding": [[...], ...]}` lines or
    `--npy` (every token's rows, and the offsets of each text's first row, `texts + 1` of them)."""
    import numpy as np

    from kbert.io import atomic_path
    from kbert.serving.export import onnx_embedder

    if onnx_runtime_chosen(args):
        embedder.model = onnx_embedder(embedder, args.quantize)
    role = args.prompt_name if args.prompt_name in ("query", "document") else None  # the role picks its prompt
    vectors = embedder.encode_multi_vector(texts, role, args.batch_size, prompt_name=None if role else args.prompt_name,
                                           prompt=args.prompt)
    if not args.npy:
        for tokens in vectors:
            print(json.dumps({"embedding": tokens.tolist()}))
        return 0
    offsets = np.concatenate([[0], np.cumsum([len(tokens) for tokens in vectors])]).astype(np.int64)
    for path, array in ((args.npy, np.concatenate(vectors)), (offsets_path(args.npy), offsets)):
        with atomic_path(path) as temporary:
            with open(temporary, "wb") as handle:
                np.save(handle, array)
    print(f"kbert: {offsets[-1]} token vectors of {vectors[0].shape[1]} dimensions for {len(texts)} texts written "
          f"to {args.npy}, each text's first row in {offsets_path(args.npy)}", file=sys.stderr)
    return 0


def _check_sparse_options(args, embedder) -> None:
    """The options of one dense vector refused for a sparse or multi-vector encoder (and `--top-k` for any but a
    sparse one), naming them."""
    dense_only = [option for option, given in (("--npy", args.npy and not embedder.multi_vector),
                                               ("--normalize", args.normalize),
                                               ("--dimensions", args.dimensions), ("--calibrate", args.calibrate),
                                               ("--ranges", args.ranges), ("--precision", args.precision != "float"))
                  if given]
    if embedder.multi_vector and dense_only:
        raise KbertError(f"{args.model} is a multi-vector encoder (MultiVectorMask): {', '.join(dense_only)} shape "
                         "one vector a text; its token vectors are written as {\"embedding\": [[...], ...]} lines "
                         "(--npy: one array and its offsets)")
    if embedder.sparse and dense_only:
        raise KbertError(f"{args.model} is a sparse encoder (SpladePooling): {', '.join(dense_only)} shape dense "
                         "vectors; its vectors are written as {\"indices\", \"values\"} lines (--top-k K keeps "
                         "the K largest)")
    if args.top_k is not None and not embedder.sparse:
        raise KbertError(f"--top-k: {args.model} is not a sparse encoder; --top-k keeps a sparse encoder's "
                         "largest weights (--dimensions shortens a dense vector)")


def _check_precision_options(args) -> None:
    """`--precision`, `--ranges` and `--calibrate` that cannot go together, refused before anything is read."""
    if args.calibrate and (args.precision != "float" or args.npy or args.ranges):
        raise KbertError("--calibrate writes ranges from float vectors: give it without --precision, --ranges "
                         "or --npy")
    if args.calibrate and os.path.lexists(args.calibrate):
        raise KbertError(f"{args.calibrate}: already exists; choose a new path (kbert never writes over an "
                         "earlier output)")


def run_export(args) -> int:
    import signal

    from kbert.serving.export import export_model

    # SIGTERM (a stopped job, a CI timeout) removes the export's staging folder, then ends the process at once
    # (Python's default for SIGTERM dies without any cleanup; an exception raised wherever the signal lands,
    # inside TensorFlow or a converter, might be turned into another error).
    signal.signal(signal.SIGTERM, _remove_staging_and_exit)
    print(export_model(args.model, args.output, args.format, args.quantize, args.head, args.adapter))
    return 0


def _remove_staging_and_exit(signum, frame) -> None:
    from kbert.serving.conversion import remove_staging

    remove_staging()
    os._exit(128 + signum)
