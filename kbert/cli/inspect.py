"""`kbert inspect`: a checkpoint's variables and the kbert layers they map to, or a kbert model directory's task
and weights."""

from __future__ import annotations

import os

from kbert.cli.arguments import checkpoint_argument, family_argument, fetch_checkpoint_argument


def add_commands(command) -> None:
    """Adds `inspect` through `command(name, help)`, which returns a sub-parser."""
    inspect = command("inspect", "list a checkpoint's variables and the kbert layers they map to (or a kbert "
                                 "train/pretrain directory's task and weights)")
    checkpoint_argument(inspect, "the checkpoint", positional=True)
    family_argument(inspect, "default: recognised from the variable names, else bert")
    inspect.set_defaults(run=run_inspect)


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
