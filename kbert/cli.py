"""The `kbert` command line.

Each sub-command parses its arguments and calls the library; errors of kbert
(`KbertError`) go to stderr and exit with status 2. TensorFlow is imported
only by the sub-commands that build a model, so `kbert params` stays fast.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import List, Optional

from kbert.config import BertConfig, bundled_config_names, bundled_config_path
from kbert.errors import ConfigError, DataError, KbertError
from kbert.options import TrainingOptions
from kbert.tasks import TASKS

DEFAULT_CONFIG = "bert_base_chinese.json"
DEFAULT_NUM_LABELS = 2


def main(argv: Optional[List[str]] = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="kbert: %(message)s")
    if args.command != "params":
        _import_tensorflow_quietly()
    try:
        if args.command in ("evaluate", "predict", "export"):
            return _run_in_precision(args)
        return args.run(args)
    except (KbertError, OSError) as error:  # OSError names its path: permission, disk full
        print(f"kbert: error: {error}", file=sys.stderr)
        return 2


def _run_in_precision(args) -> int:
    """Runs an inference command with its model built under --mixed-precision."""
    from kbert.precision import precision_policy, warn_if_emulated

    warn_if_emulated(args.mixed_precision)
    with precision_policy(args.mixed_precision):
        return args.run(args)


def _import_tensorflow_quietly() -> None:
    """Imports TensorFlow with its start-up chatter (CUDA probing, absl) kept off stderr.

    Those lines are printed by C++ code before any log level applies, so the
    file descriptor itself is pointed at /dev/null for the import.
    """
    # Level 3 also hides "failed call to cuInit" on machines without a GPU;
    # Python exceptions are unaffected. Set TF_CPP_MIN_LOG_LEVEL to see them.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import tensorflow  # noqa: F401
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _resolve_config(argument: Optional[str], model: Optional[str] = None) -> BertConfig:
    """A config file path, or the name of a bundled config (with or without .json), read as `model`'s config."""
    from kbert.models.registry import resolve

    if argument is None:
        return resolve(bundled_config_path(DEFAULT_CONFIG), model)[1]
    if not os.path.exists(argument):
        name = argument if argument.endswith(".json") else f"{argument}.json"
        bundled = bundled_config_path(name)
        if os.sep not in argument and os.path.exists(bundled):
            return resolve(bundled, model)[1]
        raise ConfigError(f"{argument}: config file not found (bundled configs: "
                          f"{', '.join(bundled_config_names())})")
    return resolve(argument, model)[1]


def _heads(args) -> dict:
    return {"with_pool": args.pool, "with_nsp": args.nsp, "with_mlm": args.mlm,
            "with_discriminator": args.discriminator}


def _analysis(args, config: BertConfig):
    from kbert.params import analyze

    return analyze(config, model=args.model, num_labels=args.num_labels, **_heads(args))


def _run_params(args) -> int:
    from kbert.params import explain_claim
    from kbert.summary import format_claim, format_table

    analysis = _analysis(args, _resolve_config(args.config, args.model))
    if args.json:
        payload = analysis.to_dict()
        if args.claim is not None:
            payload["claim"] = {"claimed": args.claim, "explanations": [
                [{"description": m.description, "formula": m.formula, "params": m.params}
                 for m in combo] for combo in explain_claim(analysis, args.claim)]}
        print(json.dumps(payload, indent=2, ensure_ascii=False))
        return 0
    print(format_table(analysis))
    if args.claim is not None:
        print()
        print(format_claim(analysis, args.claim))
    return 0


def _run_summary(args) -> int:
    config = _resolve_config(args.config, args.model)
    if args.config is None and args.num_labels is None:
        args.num_labels = DEFAULT_NUM_LABELS
    args.num_labels = args.num_labels or 0
    analysis = _analysis(args, config)

    from kbert.builder import build_classifier, build_transformer_model
    from kbert.summary import crosscheck, format_table

    model = build_transformer_model(config, model=args.model, **_heads(args))
    if args.checkpoint:
        from kbert.convert import load_weights

        load_weights(model, args.checkpoint)
    if args.num_labels:
        model = build_classifier(model, args.num_labels)
    if args.style == "keras2":
        from kbert.summary import keras2_summary

        print(keras2_summary(model))
    else:
        _print_keras_summary(model)
    print()
    checked = crosscheck(analysis, model)
    print(format_table(analysis, checked))
    return 0 if all(row.ok for row in checked) else 1


def _run_inspect(args) -> int:
    from kbert.convert import detect_family, inspect_weights, open_weights
    from kbert.weights import GOOGLE

    source = open_weights(args.checkpoint)
    family = detect_family(source, args.model)
    rows = inspect_weights(source, family)
    width = max(len(row.name) for row in rows)
    print(f"{source.path} ({'Google checkpoint' if source.fmt == GOOGLE else 'safetensors'}, "
          f"read as model={family.name!r})")
    print(f"{'variable':<{width}}  {'shape':<14} {'dtype':<8} kbert variable")
    for row in rows:
        target = row.kbert_path or "unused"
        print(f"{row.name:<{width}}  {str(list(row.shape)):<14} {row.dtype:<8} {target}")
    used = sum(row.size for row in rows if row.kbert_path)
    print(f"\n{len(rows)} variables, {sum(row.size for row in rows):,} values in all; "
          f"{used:,} parameters map to kbert layers, "
          f"{sum(1 for row in rows if not row.kbert_path)} variables unused")
    return 0


def _run_convert(args) -> int:
    from kbert.convert import convert

    result = convert(args.source, args.output, config_path=args.config, overwrite=args.overwrite,
                     model=args.model)
    print(f"{result['source']} -> {result['weights']}")
    print(f"  {result['variables']} variables, {result['params']:,} parameters; config {result['config']}")
    return 0


def _run_train(args) -> int:
    from kbert.tasks import get_task
    from kbert.train import TrainingInterrupted, train

    options = TrainingOptions(
        epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.lr, maxlen=args.maxlen,
        warmup_ratio=args.warmup, do_lower_case=not args.cased, strategy=args.strategy,
        mixed_precision=args.mixed_precision, skip_malformed=args.skip_malformed,
        shuffle=not args.no_shuffle, bucketing=not args.no_bucketing, seed=args.seed, ema=args.ema,
        grad_accum=args.grad_accum, task=args.task, head=args.head, crf_lr_multiplier=args.crf_lr_multiplier)
    try:
        state = train(args.config, args.vocab, args.train, args.out, valid_path=args.valid,
                      checkpoint_path=args.checkpoint, num_labels=args.num_labels,
                      options=options, resume=args.resume, overwrite=args.overwrite)
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


def _run_evaluate(args) -> int:
    from kbert.train import read_training_state

    task = _model_task(args, read_training_state(args.model))
    if task == "ner":
        return _evaluate_tagger(args)
    if task == "seq2seq":
        return _evaluate_generator(args)
    from kbert.train import evaluate

    result = evaluate(args.model, args.data, batch_size=args.batch_size, bucketing=not args.no_bucketing)
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return 0
    print(result["data"])
    print(f"accuracy {result['accuracy']:.4f}\n")
    names = result["labels"]
    width = max(8, *(len(name) for name in names))
    print(f"{'label':<{width}}  precision  recall     f1  support")
    for name in names:
        row = result["classes"][name]
        print(f"{name:<{width}}  {row['precision']:9.4f}  {row['recall']:6.4f}  {row['f1']:5.4f}  "
              f"{row['support']:7d}")
    print("\nconfusion matrix (rows: true label, columns: predicted)")
    print(" " * width + "".join(f"{name:>9}" for name in names))
    for name, row in zip(names, result["confusion"]):
        print(f"{name:<{width}}" + "".join(f"{count:>9}" for count in row))
    return 0


def _model_task(args, state: dict) -> str:
    """The model directory's task; a --task that differs is an error."""
    if args.task is not None and args.task != state["task"]:
        raise KbertError(f"{args.model}: a model trained for --task {state['task']}, not {args.task}")
    return state["task"]


def _evaluate_tagger(args) -> int:
    from kbert.tasks.ner import evaluate

    result = evaluate(args.model, args.data, batch_size=args.batch_size, bucketing=not args.no_bucketing)
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return 0
    print(result["data"])
    print("entities: exact span and type\n")
    width = max(8, *(len(name) for name in result["scores"]))
    print(f"{'type':<{width}}  precision  recall     f1  support")
    for name, row in result["scores"].items():
        print(f"{name:<{width}}  {row['precision']:9.4f}  {row['recall']:6.4f}  {row['f1']:5.4f}  "
              f"{row['support']:7d}")
    return 0


def _run_predict(args) -> int:
    from kbert.data import read_examples
    from kbert.train import predict, read_training_state

    task = _model_task(args, read_training_state(args.model))  # before waiting for standard input
    if args.input == "-":
        texts, pairs = _read_standard_input(), None
    else:
        examples, _ = read_examples(args.input, labelled=False)
        texts, pairs = [e.text for e in examples], [e.text_b for e in examples]
    if task == "ner":
        return _predict_entities(args, texts)
    if task == "seq2seq":
        return _predict_targets(args, texts)
    for row in predict(args.model, texts, pairs, batch_size=args.batch_size, bucketing=not args.no_bucketing):
        if args.json:
            print(json.dumps(row, ensure_ascii=False))
        else:
            print(f"{row['label']}\t{row['probability']:.4f}")
    return 0


def _precision_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mixed-precision", choices=["bf16", "fp16"],
                        help="compute in this precision, weights and softmax/loss/CRF in float32 (default: "
                             "none, all float32); bf16 pays on CPUs with avx512_bf16/amx_bf16 and on GPUs")


def _generation_options(command) -> None:
    command.add_argument("--beam-size", type=_positive_int, default=1,
                         help="seq2seq: beam search with this many beams (default: 1, greedy)")
    command.add_argument("--max-new-tokens", type=_positive_int,
                         help="seq2seq: the longest target (default: what --maxlen of training leaves)")


def _evaluate_generator(args) -> int:
    from kbert.tasks.seq2seq import evaluate

    result = evaluate(args.model, args.data, beam_size=args.beam_size, max_new_tokens=args.max_new_tokens,
                      batch_size=args.batch_size)
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return 0
    print(result["data"])
    print(f"exact match {result['exact_match']:.4f}\ncharacter F1 {result['char_f1']:.4f}")
    return 0


def _predict_targets(args, texts: List[str]) -> int:
    """The generated target of each source text, one a line."""
    from kbert.tasks.seq2seq import predict

    targets = predict(args.model, texts, beam_size=args.beam_size, max_new_tokens=args.max_new_tokens,
                      batch_size=args.batch_size)
    for text, target in zip(texts, targets):
        print(json.dumps({"text": text, "target": target}, ensure_ascii=False) if args.json else target)
    return 0


def _predict_entities(args, texts: List[str]) -> int:
    """Each text's entities, `type<TAB>start<TAB>end<TAB>text` a line, a blank line after each text."""
    from kbert.tasks.ner import predict

    for text, entities in zip(texts, predict(args.model, texts, args.batch_size, not args.no_bucketing)):
        if args.json:
            print(json.dumps({"text": text, "entities": entities}, ensure_ascii=False))
            continue
        for entity in entities:
            print(f"{entity['type']}\t{entity['start']}\t{entity['end']}\t{entity['text']}")
        print()
    return 0


def _read_standard_input() -> List[str]:
    """One text a line from standard input (UTF-8), blank lines skipped."""
    data = sys.stdin.buffer.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise DataError(f"standard input: not UTF-8 text ({error.reason} at byte {error.start})") from None
    texts = [line for line in text.splitlines() if line.strip()]
    if not texts:
        raise DataError("standard input: no texts to predict (expected one text a line)")
    return texts


def _run_export(args) -> int:
    from kbert.train import export

    print(f"exported {export(args.model, args.output)}")
    return 0


def _print_keras_summary(model, width: int = 150) -> None:
    """Keras's own `model.summary()`, wide enough that no layer name is cut."""
    # rich sizes its console from COLUMNS (80 when stdout is not a terminal).
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        model.summary(line_length=width, print_fn=lambda line, line_break=True: print(line))
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous


def _model_arguments(parser: argparse.ArgumentParser, default_labels) -> None:
    parser.add_argument("config", nargs="?", default=None,
                        help="bert_config.json / config.json, or a bundled config name "
                             f"(default: {DEFAULT_CONFIG})")
    labels_default = ("2 for the default config, else none" if default_labels is None
                      else default_labels or "none")
    parser.add_argument("--num-labels", type=_non_negative_int, default=default_labels, metavar="N",
                        help="add the classifier head (CLS-token -> dense_output) with N labels "
                             f"(default: {labels_default})")
    parser.add_argument("--pool", action="store_true", help="add the pooler")
    parser.add_argument("--nsp", action="store_true", help="add the NSP head (implies --pool)")
    parser.add_argument("--mlm", action="store_true", help="add the masked-LM head")
    parser.add_argument("--discriminator", action="store_true", help="add ELECTRA's discriminator head")
    _family_argument(parser, "default: the config's model_type, else bert")


def _family_argument(parser: argparse.ArgumentParser, default: str) -> None:
    from kbert.models.registry import FAMILIES

    parser.add_argument("--model", choices=list(FAMILIES), default=None,
                        help=f"the model family, by bert4keras's names ({default})")


def _non_negative_int(text: str) -> int:
    return _whole_number(text, minimum=0)


def _positive_int(text: str) -> int:
    return _whole_number(text, minimum=1)


def _whole_number(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least {minimum}, got {text!r}")
    return value


class _HelpWithDefaults(argparse.HelpFormatter):
    """Ends every option's help with its default (unless the help already names it)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.required or action.default is argparse.SUPPRESS \
                or (not action.option_strings and action.nargs != "?"):
            return text
        if action.default is False:
            shown = "off"
        elif action.default is None:
            shown = "none"
        else:
            shown = "%(default)s"
        return f"{text} (default: {shown})"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kbert", description="Build, load, inspect and fine-tune BERT in Keras 3.",
        formatter_class=_HelpWithDefaults)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help, description=help, formatter_class=_HelpWithDefaults)

    summary = command("summary", "build the model, print model.summary() and the analytic cross-check")
    _model_arguments(summary, default_labels=None)
    summary.add_argument("--checkpoint", metavar="CKPT",
                         help="load a Google checkpoint or safetensors file before printing")
    summary.add_argument("--style", choices=["keras3", "keras2"], default="keras3",
                         help="keras3: Keras's own model.summary(); keras2: the text layout of "
                              "Keras 2 (and of bert4keras's tables)")
    summary.set_defaults(run=_run_summary)

    params = command("params", "the analytic parameter table alone (no TensorFlow)")
    _model_arguments(params, default_labels=0)
    params.add_argument("--claim", type=int, metavar="N",
                        help="explain a (wrong) total N as a combination of common mistakes")
    params.add_argument("--json", action="store_true", help="print JSON")
    params.set_defaults(run=_run_params)

    inspect = command("inspect", "list a checkpoint's variables and the kbert layers they map to")
    inspect.add_argument("checkpoint", metavar="CKPT",
                         help="Google checkpoint (prefix, file or directory) or model.safetensors")
    _family_argument(inspect, "default: recognised from the variable names, else bert")
    inspect.set_defaults(run=_run_inspect)

    convert = command("convert", "convert Hugging Face safetensors <-> Google checkpoint")
    convert.add_argument("source", metavar="SRC", help="Google checkpoint or safetensors (file or directory)")
    convert.add_argument("output", metavar="OUT", help="output directory (new, or empty)")
    convert.add_argument("--config", help="the source's config (default: the one beside SRC)")
    convert.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    _family_argument(convert, "default: the config's model_type, else bert")
    convert.set_defaults(run=_run_convert)

    defaults = TrainingOptions()
    train = command("train", "fine-tune a classifier, or an entity tagger (--task ner), on a data file")
    train.add_argument("--config", required=True, help="the backbone's bert_config.json / config.json")
    train.add_argument("--vocab", required=True, help="its vocab.txt")
    train.add_argument("--task", choices=TASKS, default=defaults.task,
                       help="classify: a label per text; ner: entities in tagged text (token<TAB>tag a line, "
                            "a blank line between sentences; BIO, BIOES or BMES); seq2seq: a target text per "
                            "source text (source<TAB>target, or JSONL with source and target), UniLM")
    train.add_argument("--head", choices=["crf", "softmax", "global_pointer"], default=defaults.head,
                       help="the tagger's head (--task ner)")
    train.add_argument("--crf-lr-multiplier", type=float, default=defaults.crf_lr_multiplier,
                       help="the CRF transitions' learning rate as a multiple of --lr (--head crf)")
    train.add_argument("--train", required=True,
                       help="training data (text<TAB>label, CSV/TSV, JSONL; a tagged file for --task ner)")
    train.add_argument("--valid", help="validation data; the best epoch on it is kept "
                                       "(default: none, every epoch is kept in turn)")
    train.add_argument("--out", required=True,
                       help="model directory to write (written as OUT.partial, moved to OUT at the end)")
    train.add_argument("--overwrite", action="store_true",
                       help="replace an existing --out when the run completes")
    train.add_argument("--checkpoint", help="pre-trained weights, Google checkpoint or safetensors "
                                            "(default: none, random weights)")
    train.add_argument("--num-labels", type=_positive_int,
                       help="number of classes (default: the labels in --train)")
    train.add_argument("--epochs", type=_positive_int, default=defaults.epochs, help="passes over --train")
    train.add_argument("--batch-size", type=_positive_int, default=defaults.batch_size,
                       help="examples per step, over all devices")
    train.add_argument("--lr", type=float, default=defaults.learning_rate, help="peak learning rate")
    train.add_argument("--warmup", type=float, default=defaults.warmup_ratio,
                       help="share of the steps spent warming up, in [0, 1)")
    train.add_argument("--maxlen", type=_positive_int, default=defaults.maxlen,
                       help="longest sequence in tokens, [CLS] and [SEP] included")
    train.add_argument("--cased", action="store_true", help="keep case and accents (cased vocabularies)")
    train.add_argument("--strategy", choices=["auto", "mirrored", "multiworker"], default=defaults.strategy,
                       help="tf.distribute strategy (multiworker reads TF_CONFIG)")
    _precision_option(train)
    train.add_argument("--skip-malformed", action="store_true",
                       help="skip malformed rows (counted, with their lines) instead of stopping")
    train.add_argument("--no-shuffle", action="store_true", help="keep the training file's order")
    train.add_argument("--no-bucketing", action="store_true",
                       help="batch training examples in (shuffled) order instead of with others of similar "
                            "length (more padding; kbert 0.1's batching)")
    train.add_argument("--seed", type=int, default=defaults.seed,
                       help="seed of initialisation, shuffling and dropout")
    train.add_argument("--ema", action="store_true",
                       help="train on an exponential moving average of the weights (Keras's use_ema), "
                            "validated and saved each epoch")
    train.add_argument("--grad-accum", type=_positive_int, default=defaults.grad_accum, metavar="N",
                       help="accumulate the gradients of N batches per update (effective batch N x --batch-size)")
    train.add_argument("--resume", action="store_true",
                       help="continue the interrupted run in OUT.partial from its last completed epoch")
    train.set_defaults(run=_run_train)

    evaluate = command("evaluate", "accuracy, per-class P/R/F1, confusion matrix; a tagger's entity P/R/F1")
    evaluate.add_argument("--model", required=True, help="model directory from kbert train")
    evaluate.add_argument("--data", required=True, help="labelled data file (a tagged file for a tagger)")
    evaluate.add_argument("--task", choices=TASKS,
                          help="the model's task, checked against the model directory (default: its task)")
    evaluate.add_argument("--batch-size", type=_positive_int, default=64, help="examples per step")
    evaluate.add_argument("--no-bucketing", action="store_true",
                         help="batch the texts in input order instead of by length (results are in input "
                              "order either way)")
    evaluate.add_argument("--json", action="store_true", help="print JSON")
    _generation_options(evaluate)
    _precision_option(evaluate)
    evaluate.set_defaults(run=_run_evaluate)

    predict = command("predict", "label and probability for each input text; a tagger's entities")
    predict.add_argument("--model", required=True, help="model directory from kbert train")
    predict.add_argument("--task", choices=TASKS,
                         help="the model's task, checked against the model directory (default: its task); "
                              "a tagger prints type<TAB>start<TAB>end<TAB>text per entity (character "
                              "offsets, end exclusive) and a blank line after each text")
    predict.add_argument("input", nargs="?", default="-",
                         help="file of texts (one a line, or CSV/TSV/JSONL with a text column); "
                              "- for standard input")
    predict.add_argument("--batch-size", type=_positive_int, default=64, help="examples per step")
    predict.add_argument("--no-bucketing", action="store_true",
                         help="batch the texts in input order instead of by length (results are in input "
                              "order either way)")
    predict.add_argument("--json", action="store_true", help="print JSON Lines")
    _generation_options(predict)
    _precision_option(predict)
    predict.set_defaults(run=_run_predict)

    export = command("export", "TF SavedModel for serving (or a .keras file)")
    export.add_argument("--model", required=True, help="model directory from kbert train")
    export.add_argument("output", metavar="OUT", help="SavedModel directory, or a path ending in .keras "
                                                      "(must not exist)")
    _precision_option(export)
    export.set_defaults(run=_run_export)
    return parser


if __name__ == "__main__":
    sys.exit(main())
