"""A progress bar on stderr for long runs: redrawn in place, at most a few times a second."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

WIDTH = 30


class ProgressBar:
    def __init__(self, stream: TextIO, label: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.label = label
        self.clock = clock
        self.started = clock()
        self._drawn = -1.0

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if done < total and now - self._drawn < 0.25:
            return
        self._drawn = now
        filled = WIDTH * done // max(total, 1)
        elapsed = now - self.started
        left = elapsed * (total - done) / done if done else 0.0
        bar = "#" * filled + "." * (WIDTH - filled)
        end = "\n" if done >= total else ""
        share = done / max(total, 1)
        self.stream.write(
            f"\r{self.label} [{bar}] {share:4.0%} {done}/{total} min, {elapsed:.0f} s, ~{left:.0f} s left{end}"
        )
        self.stream.flush()
