"""This process's memory, from ``/proc/self/status``, for the benchmarks' RSS figures.

The peak is the memory map's high-water mark (``VmHWM``), not ``getrusage``'s ``ru_maxrss``:
Linux carries ``ru_maxrss`` across ``exec``, so a measuring process started by a large parent
(``python -m bench`` runs every benchmark in one process, several GB by the time it starts the
Kubernetes ones) reports the parent's peak as its own. A new map starts its mark afresh.
"""

from __future__ import annotations


def _status_mb(field: str, pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    return 0.0


def rss_mb() -> float:
    """Resident memory now, MB."""
    return _status_mb("VmRSS")


def peak_rss_mb(pid: int | str = "self") -> float:
    """The most resident memory of this process (or ``pid``) since it started or since
    ``reset_peak``, MB."""
    return _status_mb("VmHWM", pid)


def reset_peak() -> bool:
    """Start the peak afresh from what is resident now, so that a measurement made in a process
    that did other work first reports its own peak; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True
