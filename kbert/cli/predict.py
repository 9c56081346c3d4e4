"""`kbert predict`: each input text's prediction by a model directory (its task's row), as text or JSON Lines."""

from __future__ import annotations

import json
import sys
from typing import List, Optional, Tuple

from kbert.cli.arguments import calibrated_on_input, exported_runtime, inference_arguments, runtime_option, \
    runtime_options
from kbert.cli.inputs import input_lines, model_folder, model_task, read_standard_input
from kbert.errors import DataError, KbertError
from kbert.training.records import ONE_A_LINE, parse_columns


def add_commands(command) -> None:
    """Adds `predict` through `command(name, help)`, which returns a sub-parser."""
    predict = command("predict", "label and probability for each input text; a tagger's entities; "
                                 "a generator's target")
    inference_arguments(predict, "checked against the model directory (default: its task); a tagger "
                                  "prints type<TAB>start<TAB>end<TAB>text per entity (character offsets, "
                                  "end exclusive) and a blank line after each text")
    predict.add_argument("input", nargs="?", default="-",
                         help="file of texts (one a line, or CSV/TSV/JSONL with a text column); "
                              "- for standard input")
    predict.add_argument("--json", action="store_true", help="print JSON Lines")
    runtime_options(predict, "a classifier, an embedding model or a reranker",
                    "worth it for a long file on a CPU (onnxruntime's calls cost less than Keras's)")
    predict.set_defaults(run=run_predict)


def run_predict(args) -> int:
    from kbert.serving.runtimes import check_exported_task, onnx_predictor
    from kbert.tasks.predictors import PredictionSettings, load_predictor

    folder = model_folder(args)  # read once, for its task and its model
    task = model_task(args, folder)  # before waiting for standard input
    runtime = exported_runtime(args)  # None: Keras
    check_exported_task(task, runtime, args.model, runtime_option(args))
    texts, pairs = _prediction_input(args, task)
    settings = PredictionSettings(args.batch_size, not args.no_bucketing, args.beam_size, args.max_new_tokens,
                                  args.top_k, head=args.head)
    kept = [index for index, text in enumerate(texts) if text.strip()]
    if not kept:
        raise DataError("no texts to predict: every line is blank")
    runtime = _calibrated(runtime, task, texts, pairs)
    predictor = load_predictor(folder, settings) if runtime is None else \
        onnx_predictor(folder, task, settings, runtime)
    rows = [predictor.blank(text) for text in texts]
    for index, row in zip(kept, predictor([texts[i] for i in kept], pairs and [pairs[i] for i in kept])):
        rows[index] = row
    for line, row in enumerate(rows, 1):
        print(_json_line(row, line) if args.json else _as_text(task, row))
    return 0


def _calibrated(runtime, task: str, texts: List[str], pairs: Optional[List[Optional[str]]]):
    """`runtime`, its OpenVINO static int8 calibrated on a sample of the input where no --calibration was given (a
    reranker's pairs as query<TAB>passage)."""
    lines = [f"{query}\t{passage}" for query, passage in zip(texts, pairs) if passage is not None] \
        if task == "rerank" else [text for text in texts if text.strip()]
    return calibrated_on_input(runtime, lines)


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
        return _query_passage_pairs(input_lines(args.input), "standard input" if args.input == "-" else args.input)
    if args.input == "-":
        return read_standard_input(), None
    if task == "seq2seq":
        return read_sources(args.input, columns), None
    if task == "mlm":  # plain lines: a text that starts with [MASK] is not a JSON array
        return input_lines(args.input), None
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
