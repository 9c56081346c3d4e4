"""The `kbert` command line, one module per command family.

- `main`: `main()`, the parser, error handling (exit status 2 with the message).
- `models`: `summary`, `params`, `inspect`, `convert`.
- `tasks`: `train`, `evaluate`, `predict`, `export`.
- `arguments`: what the commands share (number types, config and head options).
"""

from kbert.cli.main import main

__all__ = ["main"]
