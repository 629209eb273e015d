"""Where each ``make run`` keeps its files: ``.local-stack/<run id>/``, owned through a lock.

Every run gets a directory of its own (``<UTC time>-<pid>``) and points ``.local-stack/latest`` at
it, so a second ``make run`` never touches the first one's logs, state or sockets. A run owns its
directory by holding an exclusive ``flock`` on ``<dir>/stack.lock`` (the file also names the owner's
pid, for people); the kernel drops the lock when the owner dies, however it dies, so a dead run's
directory is taken over or cleaned without guessing from pids, which get reused. Old directories
are removed only when nobody holds their lock, and the newest few finished ones are kept to read.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

LOCK_NAME = "stack.lock"
LATEST = "latest"
RUN_ID = re.compile(r"^\d{8}-\d{6}-\d+$")
KEEP_FINISHED = 3  # finished runs kept for their logs, besides the live ones


class StackBusy(RuntimeError):
    """The directory belongs to a stack that is still running."""


def new_run_id(now: float, pid: int) -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + f"-{pid}"


def socket_prefix(run_id: str) -> str:
    """The signal socket name prefix of one run (``CMAN_SIGNAL_SOCKET_PREFIX``): abstract socket
    names are shared by the whole host, so two stacks must never connect to each other's signals."""
    return f"cman-{run_id}-"


@dataclass
class RunDir:
    """A claimed run directory; ``release()`` (or the process's death) gives it up."""

    path: Path
    run_id: str
    fd: int

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def owner(path: Path) -> int | None:
    """The pid of the live stack holding ``path``, or None when nobody does (or it is not a run)."""
    lock = path / LOCK_NAME
    try:
        fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def claim(path: Path, run_id: str | None = None) -> RunDir:
    """Lock ``path`` (made if missing) for this process, or raise StackBusy naming the owner. A
    directory left by a dead run is emptied and reused; one that is not a run's is refused."""
    path.mkdir(parents=True, exist_ok=True)
    lock = path / LOCK_NAME
    if not lock.exists() and any(path.iterdir()):
        raise StackBusy(f"{path} is not empty and not a local stack's directory: give a new or empty one")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        raise StackBusy(
            f"{path} belongs to a running local stack (pid {text or '?'}): stop it (Ctrl-C in its terminal, "
            f"or kill {text or '<pid>'}) or start another one without --run-dir"
        ) from None
    for entry in path.iterdir():  # a dead run's leftovers: this run starts clean
        if entry.name != LOCK_NAME:
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return RunDir(path, run_id or path.name, fd)


def claim_new(base: Path, now: float | None = None) -> RunDir:
    """A fresh ``base/<run id>``, claimed, with ``base/latest`` pointing at it; finished runs
    beyond the newest ``KEEP_FINISHED`` are removed (live ones never)."""
    base.mkdir(parents=True, exist_ok=True)
    run_id = new_run_id(time.time() if now is None else now, os.getpid())
    run = claim(base / run_id, run_id)
    point_latest(base, run_id)
    clean_finished(base, keep=KEEP_FINISHED, current=run_id)
    return run


def point_latest(base: Path, run_id: str) -> None:
    tmp = base / f".{LATEST}.{os.getpid()}"
    if tmp.is_symlink():
        tmp.unlink()
    tmp.symlink_to(run_id)
    os.replace(tmp, base / LATEST)  # atomic: a reader sees the old or the new run, never none


def clean_finished(base: Path, keep: int, current: str) -> list[Path]:
    """Remove finished runs' directories, oldest first, keeping the newest ``keep`` of them."""
    runs = sorted(
        (p for p in base.iterdir() if RUN_ID.match(p.name) and p.is_dir() and p.name != current),
        key=lambda p: p.stat().st_mtime,
    )
    finished = [p for p in runs if owner(p) is None]
    removed = []
    for path in finished[: max(0, len(finished) - keep)]:
        if owner(path) is None:  # checked again just before: a run may have started meanwhile
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
