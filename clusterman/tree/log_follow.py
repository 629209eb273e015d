"""Every program's log on one stream, each line prefixed with its program, for ``kubectl logs``.

supervisord writes each program's output to ``$CMAN_LOG_DIR/<program>.log`` (rotating it by
renaming) and the bootstrap rewrites ``fetch_signals_N.log`` for each fetch. The bootstrap follows
those files and copies each new line as ``autoscaler | <line>``. Following the files, rather than
sending the programs' output through supervisord to stdout, means a slow reader of the container's
output never blocks supervisord (a full pipe would stop it), and the files stay for ``make run`` and
for a look inside the pod.
"""

from __future__ import annotations

import errno
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MAX_LINE = 64 * 1024  # a longer line is cut into pieces of this size
PROGRAMS = (
    (re.compile(r"autoscaler\.log"), "autoscaler"),
    (re.compile(r"run_signals_(\d+)\.log"), "runner-{}"),
    (re.compile(r"fetch_signals_(\d+)\.log"), "fetch-{}"),
    (re.compile(r"supervisord\.log"), "supervisord"),
)


def program_of(file_name: str) -> str | None:
    """The prefix of a log file's lines; None for a file that is not a program's current log."""
    for pattern, name in PROGRAMS:
        found = pattern.fullmatch(file_name)
        if found:
            return name.format(*found.groups())
    return None


@dataclass
class _Followed:
    fd: int
    inode: int
    offset: int
    partial: bytes = b""


class LogFollower:
    """Copies new lines of the programs' logs in ``log_dir`` to ``write``, one call per line."""

    def __init__(self, log_dir: Path, write: Callable[[bytes], None]) -> None:
        self.log_dir = log_dir
        self.write = write
        self._files: dict[str, _Followed] = {}
        self._started = False

    def poll(self) -> None:
        """Copy what was written since the last poll. Files there at the first poll are followed
        from their end (a restarted container does not repeat its predecessor's lines)."""
        try:
            names = sorted(n for n in os.listdir(self.log_dir) if program_of(n))
        except OSError:
            names = []
        for name in names:
            try:
                self._poll_file(name)
            except OSError:
                self._forget(name)  # gone or unreadable this time: tried again next poll
        self._started = True

    def close(self) -> None:
        for name in list(self._files):
            self._forget(name)

    def _poll_file(self, name: str) -> None:
        path = self.log_dir / name
        followed = self._files.get(name)
        if followed is None:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            stat = os.fstat(fd)
            followed = self._files[name] = _Followed(fd, stat.st_ino, stat.st_size if not self._started else 0)
        self._copy(name, followed)
        # Rotated (a new file under the name: the old one was read to its end above) or rewritten
        # (shorter than what was read): start again from the beginning of what is there now.
        current = os.stat(path)
        if current.st_ino != followed.inode or current.st_size < followed.offset:
            self._flush_partial(name, followed)
            self._forget(name)
            self._files[name] = replacement = _Followed(os.open(path, os.O_RDONLY | os.O_CLOEXEC), current.st_ino, 0)
            self._copy(name, replacement)

    def _copy(self, name: str, followed: _Followed) -> None:
        prefix = f"{program_of(name)} | ".encode()
        while True:
            chunk = os.pread(followed.fd, 1 << 16, followed.offset)
            if not chunk:
                return
            followed.offset += len(chunk)
            *lines, followed.partial = (followed.partial + chunk).split(b"\n")
            while len(followed.partial) >= MAX_LINE:
                lines.append(followed.partial[:MAX_LINE])
                followed.partial = followed.partial[MAX_LINE:]
            for line in lines:
                self.write(prefix + line + b"\n")

    def _flush_partial(self, name: str, followed: _Followed) -> None:
        if followed.partial:
            self.write(f"{program_of(name)} | ".encode() + followed.partial + b"\n")
            followed.partial = b""

    def _forget(self, name: str) -> None:
        followed = self._files.pop(name, None)
        if followed is not None:
            os.close(followed.fd)


def write_to(fd: int) -> Callable[[bytes], None]:
    """A writer that never fails the bootstrap: a closed or full-disk stream loses lines, not the tree."""

    def write(data: bytes) -> None:
        try:
            while data:
                data = data[os.write(fd, data) :]
        except OSError as e:
            if e.errno not in (errno.EPIPE, errno.EBADF, errno.ENOSPC, errno.EIO):
                raise

    return write


def start_following(log_dir: Path, write: Callable[[bytes], None], every: float = 0.25) -> Callable[[], None]:
    """Follow ``log_dir`` in a thread from now on; returns what stops it, after a last poll (the
    tree's last lines). What the files hold already is a previous container's: not repeated."""
    follower = LogFollower(log_dir, write)
    follower.poll()
    stop = threading.Event()

    def run() -> None:
        try:
            while not stop.wait(every):
                follower.poll()
            follower.poll()
        finally:
            follower.close()

    thread = threading.Thread(target=run, name="log-follow", daemon=True)
    thread.start()

    def finish() -> None:
        stop.set()
        thread.join(timeout=5)

    return finish
