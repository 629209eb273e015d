"""The bootstrap's private directory: made and locked at start, removed at exit, and cleaned up
after a bootstrap that could not remove its own.

It holds supervisord's control socket, the snapshots of the configuration (a copy of the AWS key
file among them), the liveness files and, by default, the logs and fetched versions. A bootstrap
killed with ``kill -9`` (or an OOM) cannot remove it, and a copy of the key must not stay on
disk. Each directory holds ``bootstrap.lock``, locked (``flock``) by its bootstrap for as long as
it lives; the kernel drops the lock however the process ends, so a later bootstrap that can take
the lock knows the owner is gone and removes the directory.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

PREFIX = "clusterman-tree-"
LOCK = "bootstrap.lock"


def make_private_dir(parent: Path | None) -> tuple[Path, int]:
    """A new 0700 directory under ``parent`` (default: the temporary directory), and the open lock
    file that marks it as ours: keep it open for as long as the directory is in use."""
    private = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
    staged = private / f".{LOCK}"
    fd = os.open(staged, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(staged, private / LOCK)  # only ever seen locked: a cleaner never takes a lock being made
    return private, fd


def remove_orphans(parent: Path | None) -> list[Path]:
    """Remove the private directories under ``parent`` whose bootstrap is gone; return them."""
    removed = []
    base = Path(parent or tempfile.gettempdir())
    try:
        candidates = sorted(base.glob(f"{PREFIX}*"))
    except OSError:
        return []
    for private in candidates:
        try:
            if private.is_symlink() or private.stat().st_uid != os.geteuid():
                continue
            fd = os.open(private / LOCK, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            continue  # not a bootstrap's (yet): no lock file to judge by
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its bootstrap lives
        finally:
            os.close(fd)
        shutil.rmtree(private, ignore_errors=True)
        log.info("removed %s, left by a bootstrap that did not stop cleanly", private)
        removed.append(private)
    return removed
