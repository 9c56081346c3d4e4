"""`kbert evaluate`: a model directory scored on labelled data by its task's measure; an embedding model's
MTEB-style scores; a reranker's ranking scores.

It reads the model directory's task and hands over to that task's module (`kbert.tasks.classification`, `.ner`,
`.seq2seq`, `.reranking`; `kbert.embeddings.evaluation`).
"""

from __future__ import annotations

import json

from kbert.cli.arguments import adapter_names, inference_arguments
from kbert.cli.inputs import model_folder, model_task
from kbert.errors import KbertError
from kbert.training.records import parse_columns


def add_commands(command) -> None:
    """Adds `evaluate` through `command(name, help)`, which returns a sub-parser."""
    evaluate = command("evaluate", "accuracy, per-class P/R/F1, confusion matrix; a tagger's entity P/R/F1; "
                                   "a generator's exact match and character F1; an embedding model's MTEB-style "
                                   "scores (STS, retrieval, classification, clustering)")
    inference_arguments(evaluate, "checked against the model directory (default: its task)")
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


def run_evaluate(args) -> int:
    from kbert.tasks.predictors import is_embedding_model

    folder = model_folder(args)  # what it holds, read once
    if is_embedding_model(folder):
        return _evaluate_embedder(args)
    if args.fuse:
        raise KbertError(f"--fuse: fuses two embedding models' retrieval rankings; {args.model} is not an embedding "
                         "model")
    for option in ("head", "adapter"):
        if getattr(args, option):
            raise KbertError(f"--{option}: an embedding model's option (bge-m3's output, jina-embeddings-v3's task "
                             f"adapters); {args.model} is not an embedding model")
    task = model_task(args, folder)
    if task == "rerank":
        return _evaluate_reranker(args)
    if args.train:
        raise KbertError("--train: for an embedding model (a logistic regression on its vectors); "
                         f"{args.model} is a model directory of kbert train")
    if task == "ner" and args.columns:
        raise KbertError("--columns: a tagger reads token<TAB>tag files, which have no named columns")
    if task == "ner":
        return _evaluate_tagger(args)
    if task == "seq2seq":
        return _evaluate_generator(args)
    return _evaluate_classifier(args)


def _evaluate_embedder(args) -> int:
    from kbert.embeddings.evaluation import evaluate

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
