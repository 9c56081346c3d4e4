"""`kbert summary` and `kbert params`: a model's parameters, built (with Keras's summary and the analytic
cross-check) or counted analytically alone (no TensorFlow)."""

from __future__ import annotations

import json
import os

from kbert.cli.arguments import checkpoint_argument, fetch_checkpoint_argument, heads, model_arguments, \
    resolve_config
from kbert.models.config import BertConfig

DEFAULT_NUM_LABELS = 2


def add_commands(command) -> None:
    """Adds `summary` and `params` through `command(name, help)`, which returns a sub-parser."""
    summary = command("summary", "build the model, print model.summary() and the analytic cross-check")
    model_arguments(summary, default_labels=None)
    checkpoint_argument(summary, "load these weights before printing (the config beside them unless one is given)")
    summary.add_argument("--style", choices=["keras3", "keras2"], default="keras3",
                         help="keras3: Keras's own model.summary(); keras2: the text layout of "
                              "Keras 2 (and of bert4keras's tables)")
    summary.set_defaults(run=run_summary)

    params = command("params", "the analytic parameter table alone (no TensorFlow)")
    model_arguments(params, default_labels=0)
    params.add_argument("--claim", type=int, metavar="N",
                        help="explain a (wrong) total N as a combination of common mistakes")
    params.add_argument("--json", action="store_true", help="print JSON")
    params.set_defaults(run=run_params)


def _analysis(args, config: BertConfig):
    from kbert.analysis.params import analyze

    return analyze(config, model=args.model, num_labels=args.num_labels, **heads(args))


def run_params(args) -> int:
    from kbert.analysis.params import explain_claim
    from kbert.analysis.summary import format_claim, format_table

    analysis = _analysis(args, resolve_config(args.config, args.model))
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


def run_summary(args) -> int:
    from kbert.analysis.keras2 import keras2_summary
    from kbert.analysis.summary import crosscheck, format_table
    from kbert.builder import build_classifier, build_transformer_model
    from kbert.checkpoints.formats import load_weights
    from kbert.checkpoints.undrawn import forget_undrawn, undrawn_weights

    files = fetch_checkpoint_argument(args)
    args.config = args.config or (files and files.config)
    config = resolve_config(args.config, args.model)
    if args.config is None and args.num_labels is None:
        args.num_labels = DEFAULT_NUM_LABELS
    args.num_labels = args.num_labels or 0
    analysis = _analysis(args, config)
    # A summary reads shapes, not values: nothing is drawn at random (a checkpoint's values are read in).
    with undrawn_weights():
        model = build_transformer_model(config, model=args.model, **heads(args))
    if args.checkpoint:
        load_weights(model, args.checkpoint)
    try:
        if args.num_labels:
            with undrawn_weights():
                model = build_classifier(model, args.num_labels)
        if args.style == "keras2":
            print(keras2_summary(model))
        else:
            _print_keras_summary(model)
        print()
        checked = crosscheck(analysis, model)
        print(format_table(analysis, checked))
    finally:
        forget_undrawn(model.variables)
    return 0 if all(row.ok for row in checked) else 1


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
