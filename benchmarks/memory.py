"""Resident-memory readings of this process (Linux /proc)."""

from __future__ import annotations


def _status_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def rss_mib() -> float:
    """Current resident set size."""
    return _status_kib("VmRSS") / 1024


def peak_rss_mib() -> float:
    """Peak resident set size since start, or since the last `reset_peak`."""
    return _status_kib("VmHWM") / 1024


def reset_peak() -> None:
    """Restarts the peak count at the current size (writes 5 to clear_refs)."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
        handle.write("5")
