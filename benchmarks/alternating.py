"""Timing engines in alternating rounds: the comparison method of kbert's benchmarks.

The machines are shared and noisy, so engines are never timed one after the
other: each round times every engine once, in turn, and comparisons use the
median of the per-round ratios, with their range.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Dict, List, Sequence


def alternate(engines: Dict[str, Callable[[], object]], rounds: int, calls: int = 1) -> Dict[str, List[float]]:
    """Seconds per call of each engine in each round (every engine once per round, in turn)."""
    seconds: Dict[str, List[float]] = {name: [] for name in engines}
    for _ in range(rounds):
        for name, engine in engines.items():
            start = time.perf_counter()
            for _ in range(calls):
                engine()
            seconds[name].append((time.perf_counter() - start) / calls)
    return seconds


def median_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> Dict[str, float]:
    """Median, min and max of the per-round ratios numerator / denominator."""
    ratios = [a / b for a, b in zip(numerators, denominators)]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def describe(ratio: Dict[str, float]) -> str:
    """`median_ratio`'s result as text: `1.94x (rounds 1.27-2.36x)`."""
    return f"{ratio['median']:.2f}x (rounds {ratio['min']:.2f}-{ratio['max']:.2f}x)"
