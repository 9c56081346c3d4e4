"""The commands about models and their weights: `summary`, `params`, `inspect`, `convert`."""

from __future__ import annotations

import json
import os

from kbert.cli.arguments import (checkpoint_argument, family_argument, fetch_checkpoint_argument, heads,
                                 model_arguments, resolve_config)
from kbert.models.config import BertConfig

DEFAULT_NUM_LABELS = 2


def add_commands(command) -> None:
    """Adds the commands through `command(name, help)`, which returns a sub-parser."""
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

    inspect = command("inspect", "list a checkpoint's variables and the kbert layers they map to (or a kbert "
                                 "train/pretrain directory's task and weights)")
    checkpoint_argument(inspect, "the checkpoint", positional=True)
    family_argument(inspect, "default: recognised from the variable names, else bert")
    inspect.set_defaults(run=run_inspect)

    convert = command("convert", "convert Hugging Face safetensors <-> Google checkpoint")
    checkpoint_argument(convert, "the source", positional=True)
    convert.add_argument("output", metavar="OUT", help="output directory (new, or empty)")
    convert.add_argument("--config", help="the source's config (default: the one beside CKPT)")
    convert.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    convert.add_argument("--max-shard-size", metavar="SIZE",
                         help="to safetensors: shards of at most SIZE (5GB, 500MB, 2GiB or bytes) and "
                              "model.safetensors.index.json, as transformers writes large models")
    family_argument(convert, "default: the config's model_type, else bert")
    convert.set_defaults(run=run_convert)

    presets = command("presets", "the known checkpoint names (--checkpoint NAME) and their sources")
    presets.add_argument("--json", action="store_true", help="print JSON")
    presets.set_defaults(run=run_presets)


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

    files = fetch_checkpoint_argument(args)
    args.config = args.config or (files and files.config)
    config = resolve_config(args.config, args.model)
    if args.config is None and args.num_labels is None:
        args.num_labels = DEFAULT_NUM_LABELS
    args.num_labels = args.num_labels or 0
    analysis = _analysis(args, config)
    model = build_transformer_model(config, model=args.model, **heads(args))
    if args.checkpoint:
        load_weights(model, args.checkpoint)
    if args.num_labels:
        model = build_classifier(model, args.num_labels)
    if args.style == "keras2":
        print(keras2_summary(model))
    else:
        _print_keras_summary(model)
    print()
    checked = crosscheck(analysis, model)
    print(format_table(analysis, checked))
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


def run_inspect(args) -> int:
    from kbert.checkpoints.formats import detect_family, inspect_weights, open_weights
    from kbert.models.tables import GOOGLE

    if os.path.isfile(os.path.join(args.checkpoint or "", "training.json")):  # kbert.training.model_dir's
        return _inspect_model_dir(args.checkpoint)
    fetch_checkpoint_argument(args)
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


def _inspect_model_dir(model_dir: str) -> int:
    """A `kbert train` or `kbert pretrain` directory: its task and the model's weights, rebuilt as it is loaded."""
    import numpy as np

    from kbert.tasks import get_task_class
    from kbert.training.model_dir import load_model, read_training_state

    state = read_training_state(model_dir)
    model = load_model(model_dir, get_task_class(state["task"])).model
    rows = [(weight.path, list(weight.shape), weight.dtype) for weight in model.weights]
    width = max(len(path) for path, _, _ in rows)
    options = state["options"]
    print(f"{model_dir} (a kbert {state['task']} model directory: {options.get('model') or 'bert'}, maxlen "
          f"{options['maxlen']}, best epoch {state.get('best_epoch', '-')} of {len(state.get('history', []))})")
    print(f"{'kbert variable':<{width}}  {'shape':<14} dtype")
    for path, shape, dtype in rows:
        print(f"{path:<{width}}  {str(shape):<14} {dtype}")
    print(f"\n{len(rows)} variables, {sum(int(np.prod(shape)) for _, shape, _ in rows):,} values in all")
    return 0


def run_convert(args) -> int:
    from kbert.builder.convert import convert

    fetch_checkpoint_argument(args)
    from kbert.checkpoints.hf import parse_size

    shard_size = parse_size(args.max_shard_size) if args.max_shard_size else None
    result = convert(args.checkpoint, args.output, config_path=args.config, overwrite=args.overwrite,
                     model=args.model, max_shard_size=shard_size)
    print(f"{result['source']} -> {result['weights']}")
    print(f"  {result['variables']} variables, {result['params']:,} parameters; config {result['config']}")
    return 0


def run_presets(args) -> int:
    from kbert.analysis.params import analyze
    from kbert.hub import PRESETS, cache_root

    rows = []
    for preset in PRESETS.values():
        params = analyze(resolve_config(preset.config, preset.family), model=preset.family).total \
            if preset.config else None
        rows.append({"name": preset.name, "family": preset.family, "params": params, "source": preset.source,
                     "sha256": preset.sha256, "about": preset.about})
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    print(f"{'name':37} {'family':8} {'params':>12}  source")
    for row in rows:
        params = f"{row['params']:,}" if row["params"] else "-"
        pinned = "" if row["sha256"] or row["source"].startswith("hf://") else "  (no SHA-256 pinned)"
        print(f"{row['name']:37} {row['family']:8} {params:>12}  {row['source']}{pinned}")
    print(f"\nparams: the backbone's, from the bundled config of the same shape. Archives are cached in "
          f"{cache_root()} ($KBERT_CACHE); hf:// in the Hugging Face cache.")
    return 0
