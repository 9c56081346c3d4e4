"""`python -m kbert` runs the command line."""

import sys

from kbert.cli import main

sys.exit(main())
