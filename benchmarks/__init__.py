"""kbert's benchmarks: `python -m benchmarks.run` (see benchmarks/README.md)."""
