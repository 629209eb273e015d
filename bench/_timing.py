"""Small timing helpers shared by the benchmarks."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def best_of(fn: Callable[[], object], repeat: int = 5) -> float:
    """The fastest of ``repeat`` runs, in seconds: the least disturbed by the rest of the machine."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def median_of(fn: Callable[[], object], repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)
