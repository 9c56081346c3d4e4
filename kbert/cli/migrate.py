"""`kbert migrate`: a bert4keras script, rewritten for kbert and Keras 3 (`kbert.compat.migrate`)."""

from __future__ import annotations

import difflib
import sys

from kbert.compat.migrate import migrate_file


def add_commands(command) -> None:
    """Adds the command through `command(name, help)`, which returns a sub-parser."""
    migrate = command("migrate", "rewrite a bert4keras script for kbert and Keras 3, listing every change "
                                 "and every place that needs a manual one")
    migrate.add_argument("script", metavar="SCRIPT", help="the bert4keras script (.py)")
    migrate.add_argument("-o", "--output", metavar="OUT",
                         help="write the migrated script here (default: only show the changes as a diff)")
    migrate.add_argument("--in-place", action="store_true", help="rewrite SCRIPT itself")
    migrate.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    migrate.set_defaults(run=run_migrate)


def run_migrate(args) -> int:
    migration = migrate_file(args.script, args.output, args.in_place, args.overwrite)
    written = args.script if args.in_place else args.output
    if written is None:
        sys.stdout.writelines(difflib.unified_diff(migration.original.splitlines(keepends=True),
                                                   migration.source.splitlines(keepends=True),
                                                   args.script, f"{args.script} (migrated)"))
    for finding in migration.findings:
        print(finding.format(args.script), file=sys.stderr if written is None else sys.stdout)
    changed = len(migration.findings) - len(migration.manual)
    where = f"; wrote {written}" if written else " (nothing written: pass -o OUT or --in-place)"
    manual = len(migration.manual)
    print(f"kbert migrate: {changed} change{'s' * (changed != 1)}, {manual} "
          f"{'place needs' if manual == 1 else 'places need'} a manual change{where}", file=sys.stderr)
    return 0
