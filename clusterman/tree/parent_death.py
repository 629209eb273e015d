"""Every program of the tree dies with its parent: an orphan must never keep calling the cloud.

``prctl(PR_SET_PDEATHSIG)`` survives ``exec``, so the helper programs set it at start-up before
they replace themselves with the real program. ``python -m clusterman.batch.parent_death NAME
COMMAND...`` does that for any command (supervisord's ``autoscaler`` program runs through it),
and also notes each start in ``$CMAN_SUPERVISOR_DIR/starts-NAME`` so that the bootstrap can count
starts itself: supervisord cannot see a crash loop of a program that starts slower than
``startsecs``.
"""

from __future__ import annotations

import ctypes
import os
import runpy
import signal
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int, signum: int = signal.SIGTERM) -> None:
    """Get ``signum`` when ``parent`` dies; exit now if it already has (then we were re-parented)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        os._exit(1)


def starts_file(supervisor_dir: Path, name: str) -> Path:
    return supervisor_dir / f"starts-{name}"


def note_start(supervisor_dir: str | None, name: str) -> None:
    """Append this start's wall-clock and monotonic times (one line, O_APPEND: a single write,
    never interleaved)."""
    if not supervisor_dir:
        return
    fd = os.open(starts_file(Path(supervisor_dir), name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{time.time():.3f} {time.monotonic():.3f}\n".encode())
    finally:
        os.close(fd)


def read_starts(supervisor_dir: Path, name: str) -> list[tuple[float, float]]:
    """(wall clock, monotonic) of each start noted."""
    try:
        text = starts_file(supervisor_dir, name).read_text()
    except OSError:
        return []
    starts = []
    for line in text.splitlines():
        try:
            wall, mono = map(float, line.split())
        except ValueError:
            continue  # a line cut short
        starts.append((wall, mono))
    return starts


if __name__ == "__main__":  # the path supervisord configs written by earlier versions name
    runpy.run_module("clusterman.batch.parent_death", run_name="__main__", alter_sys=True)
