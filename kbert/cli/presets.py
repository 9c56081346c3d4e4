"""`kbert presets`: the checkpoint names kbert knows (`--checkpoint NAME`) and their sources."""

from __future__ import annotations

import json

from kbert.cli.arguments import resolve_config


def add_commands(command) -> None:
    """Adds `presets` through `command(name, help)`, which returns a sub-parser."""
    presets = command("presets", "the known checkpoint names (--checkpoint NAME) and their sources")
    presets.add_argument("--json", action="store_true", help="print JSON")
    presets.set_defaults(run=run_presets)


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
