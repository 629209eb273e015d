"""What the bootstrap tells the autoscaler it started: config outcomes and signal versions in use.

The event API lives in the autoscaler process, but configuration changes are judged by the
bootstrap. So the bootstrap appends each outcome (a change accepted and running, or rejected
with the error) to ``$CMAN_TREE_STATUS_FILE``, a small JSON file in its private directory, and
the autoscaler follows it and records ``config_reloaded`` / ``config_rejected``. Each outcome
has a sequence number; the autoscaler writes the last one it recorded to ``<file>.ack`` so that
a restarted autoscaler records only what is new. Versions served from the installed copy
because S3 gave no verified one arrive as ``$CMAN_SIGNAL_FALLBACK_VERSIONS`` and become a gauge.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

KEEP = 50  # outcomes kept in the file: an autoscaler that was down longer sees the latest ones
POLL_SECONDS = 2.0


@dataclass(frozen=True)
class ConfigOutcome:
    seq: int
    time: float  # unix seconds
    accepted: bool
    path: str  # the changed file(s)
    message: str  # what changed, or the error naming the key


def write_atomically(path: Path, text: str) -> None:
    fd, staged = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(staged, path)
    except BaseException:
        Path(staged).unlink(missing_ok=True)
        raise


def read_outcomes(path: Path) -> list[ConfigOutcome]:
    try:
        data = json.loads(path.read_text())
        return [ConfigOutcome(**item) for item in data["config_outcomes"]]
    except (OSError, ValueError, TypeError, KeyError):
        return []


class StatusWriter:
    """The bootstrap's side."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.outcomes: list[ConfigOutcome] = []

    def record(self, accepted: bool, path: str, message: str, now: float | None = None) -> None:
        seq = self.outcomes[-1].seq + 1 if self.outcomes else 1
        outcome = ConfigOutcome(seq, time.time() if now is None else now, accepted, path, message)
        self.outcomes = [*self.outcomes, outcome][-KEEP:]
        write_atomically(self.path, json.dumps({"config_outcomes": [asdict(o) for o in self.outcomes]}))


class ConfigEvents(Protocol):
    def config_reloaded(self, path: str, summary: str = "") -> None: ...

    def config_rejected(self, path: str, error: str) -> None: ...


class StatusFeed:
    """The autoscaler's side: record each outcome once, across restarts of the autoscaler."""

    def __init__(self, path: Path, events: ConfigEvents) -> None:
        self.path = path
        self.ack = path.with_name(path.name + ".ack")
        self.events = events

    def _acked(self) -> int:
        try:
            return int(self.ack.read_text())
        except (OSError, ValueError):
            return 0

    def poll(self) -> int:
        """Record the outcomes not recorded yet; return how many."""
        acked = self._acked()
        new = [o for o in read_outcomes(self.path) if o.seq > acked]
        for outcome in new:
            if outcome.accepted:
                self.events.config_reloaded(outcome.path, outcome.message)
            else:
                self.events.config_rejected(outcome.path, outcome.message)
        if new:
            write_atomically(self.ack, str(new[-1].seq))
        return len(new)


class FallbackGauge(Protocol):
    def set_signal_fallbacks(self, versions: list[str]) -> None: ...


def follow_tree(
    env: Mapping[str, str], events: ConfigEvents, metrics: FallbackGauge, stop: threading.Event
) -> threading.Thread | None:
    """In the autoscaler: export the fallback versions, and record config outcomes until ``stop``."""
    fallbacks = env.get("CMAN_SIGNAL_FALLBACK_VERSIONS", "").split()
    metrics.set_signal_fallbacks(fallbacks)
    if fallbacks:
        log.warning("signal version(s) %s run from the installed copy: S3 gave no verified copy", " ".join(fallbacks))
    status = env.get("CMAN_TREE_STATUS_FILE")
    if not status:
        return None
    feed = StatusFeed(Path(status), events)

    def follow() -> None:
        while True:
            try:
                feed.poll()
            except OSError as e:
                log.warning("cannot follow %s: %s", status, e)
            if stop.wait(POLL_SECONDS):
                return

    thread = threading.Thread(target=follow, name="tree-status", daemon=True)
    thread.start()
    return thread
