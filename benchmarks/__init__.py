"""kbert's benchmarks: `python -m benchmarks.run` (see docs/performance.md)."""
