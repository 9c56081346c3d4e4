"""Timing engines in alternating rounds: the comparison method of kbert's benchmarks.

The machines are shared and noisy, so engines are never timed one after the
other: each round times every engine once, in turn, and comparisons use the
median of the per-round ratios, with their range.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from typing import Callable, Dict, List, Sequence

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_name() -> str:
    """The CPU's model name (`/proc/cpuinfo`) and core count: every table names the machine it was measured on."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            names = [line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")]
    except OSError:
        names = []
    return f"{names[0] if names else 'unknown CPU'}, {os.cpu_count()} cores"


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


def alternate_workers(module: str, arguments: Sequence[str], pythons: Dict[str, str], rounds: int) -> Dict[str, list]:
    """Each engine's answers in each round, from worker processes: `python -m module *arguments --worker NAME` for
    each engine NAME with its interpreter, started at once. A worker prints `ready` once built and warmed up (no
    round starts before all are), then answers each line it reads with one JSON object."""
    command = ["-m", module, *arguments, "--worker"]
    workers = {name: subprocess.Popen([python, *command, name], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True, cwd=REPOSITORY)
               for name, python in pythons.items()}
    answers: Dict[str, list] = {name: [] for name in workers}
    try:
        for name, process in workers.items():
            if process.stdout.readline().strip() != "ready":
                raise SystemExit(f"the {name} worker stopped (run it alone: python -m {module} --worker {name})")
        for _ in range(rounds):
            for name, process in workers.items():
                process.stdin.write("\n")
                process.stdin.flush()
                answer = process.stdout.readline()
                if not answer:
                    raise SystemExit(f"the {name} worker stopped (run it alone: python -m {module} --worker {name})")
                answers[name].append(json.loads(answer))
    finally:
        for process in workers.values():
            process.stdin.close()
            process.wait(timeout=300)
    return answers
