"""What the bootstrap tells the autoscaler it started: config outcomes and signal versions in use.

The event API lives in the autoscaler process, but configuration changes are judged by the
bootstrap. So the bootstrap appends each outcome (a change accepted and running, or rejected
with the error) to ``$CMAN_TREE_STATUS_FILE``, a small JSON file in its private directory, and
the autoscaler follows it and records ``config_reloaded`` / ``config_rejected``. Each outcome
has a sequence number; the autoscaler writes the last one it recorded to ``<file>.ack`` so that
a restarted autoscaler records only what is new. The same file says which signal versions run
from their installed copy because S3 gave no verified one (``fallback_versions``: known only once
S3 was asked, beside the running tree), and the autoscaler exports them as a gauge. While the tree
runs a configuration it rolled back to, ``rolled_back`` says why (the autoscaler's ``/healthz``
shows it, degraded), until a change is accepted.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import asdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any
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


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_outcomes(path: Path) -> list[ConfigOutcome]:
    try:
        return [ConfigOutcome(**item) for item in _read(path)["config_outcomes"]]
    except (TypeError, KeyError):
        return []


def read_signals_disk(path: Path) -> int | None:
    """Bytes the signals directory takes, as the bootstrap last measured it; None when not said."""
    value = _read(path).get("signals_dir_bytes")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_fallbacks(path: Path) -> dict[str, str] | None:
    """Version -> why it runs from its installed copy; None when the file does not say (yet)."""
    fallbacks = _read(path).get("fallback_versions")
    if not isinstance(fallbacks, dict):
        return None
    return {str(version): str(why) for version, why in fallbacks.items()}


def tree_rolled_back(env: Mapping[str, str]) -> str:
    """For the autoscaler's ``/healthz``: why the bootstrap runs a configuration it rolled back to
    ("" when it does not, or there is no bootstrap)."""
    status = env.get("CMAN_TREE_STATUS_FILE")
    why = _read(Path(status)).get("rolled_back") if status else None
    return str(why) if why else ""


class StatusWriter:
    """The bootstrap's side. ``report`` is told after each write: "" or why it failed (a full disk:
    what could not be written is kept, and written with the next change)."""

    def __init__(self, path: Path, report: Callable[[str], None] = lambda why: None) -> None:
        self.path = path
        self.report = report
        self.outcomes: list[ConfigOutcome] = []
        self.fallbacks: dict[str, str] = {}
        self.signals_disk: int | None = None
        self.rolled_back = ""  # why the tree runs a configuration it rolled back to ("" when it does not)

    def record(
        self, accepted: bool, path: str, message: str, now: float | None = None, rolled_back: bool = False
    ) -> None:
        """An outcome; ``rolled_back``: the tree went back to an earlier configuration for it. An
        accepted change ends the rollback."""
        seq = self.outcomes[-1].seq + 1 if self.outcomes else 1
        outcome = ConfigOutcome(seq, time.time() if now is None else now, accepted, path, message)
        self.outcomes = [*self.outcomes, outcome][-KEEP:]
        if accepted or rolled_back:
            self.rolled_back = message if rolled_back else ""
        self._write()

    def set_fallbacks(self, fallbacks: Mapping[str, str]) -> None:
        """The versions the running tree serves from their installed copy, and why."""
        self.fallbacks = dict(fallbacks)
        self._write()

    def set_signals_disk(self, size: int) -> None:
        """Bytes the signals directory takes (the fetched versions)."""
        self.signals_disk = size
        self._write()

    def _write(self) -> None:
        status: dict[str, Any] = {
            "config_outcomes": [asdict(o) for o in self.outcomes],
            "fallback_versions": self.fallbacks,
        }
        if self.signals_disk is not None:
            status["signals_dir_bytes"] = self.signals_disk
        if self.rolled_back:
            status["rolled_back"] = self.rolled_back
        try:
            write_atomically(self.path, json.dumps(status))
        except OSError as e:
            self.report(e.strerror or str(e))
        else:
            self.report("")


class ConfigEvents(Protocol):
    def config_reloaded(self, path: str, summary: str = "") -> None: ...

    def config_rejected(self, path: str, error: str) -> None: ...


class StatusFeed:
    """The autoscaler's side: record each outcome once, across restarts of the autoscaler."""

    def __init__(self, path: Path, events: ConfigEvents) -> None:
        self.path = path
        self.ack = path.with_name(path.name + ".ack")
        self.events = events
        self.recorded = 0  # the last outcome this process recorded, whether or not the ack was written

    def _acked(self) -> int:
        try:
            return max(self.recorded, int(self.ack.read_text()))
        except (OSError, ValueError):
            return self.recorded

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
            self.recorded = new[-1].seq  # a full disk must not have them recorded again every poll
            write_atomically(self.ack, str(new[-1].seq))
        return len(new)


class TreeGauges(Protocol):
    def set_signal_fallbacks(self, versions: list[str]) -> None: ...

    def set_signal_versions_disk(self, size: int) -> None: ...


def follow_tree(
    env: Mapping[str, str], events: ConfigEvents, metrics: TreeGauges, stop: threading.Event
) -> threading.Thread | None:
    """In the autoscaler: record config outcomes and export what the bootstrap says of the signal
    versions (run from their installed copy, the disk they take) until ``stop``."""
    status = env.get("CMAN_TREE_STATUS_FILE")
    if not status:
        return None
    path = Path(status)
    feed = StatusFeed(path, events)
    exported: dict[str, str] | None = None

    def follow() -> None:
        nonlocal exported
        while True:
            try:
                feed.poll()
            except OSError as e:
                log.warning("cannot follow %s: %s", status, e)
            fallbacks = read_fallbacks(path)
            if fallbacks is not None and fallbacks != exported:
                metrics.set_signal_fallbacks(sorted(fallbacks))
                for version, why in fallbacks.items():
                    log.warning("signal version %s runs from its installed copy: %s", version, why)
                exported = fallbacks
            size = read_signals_disk(path)
            if size is not None:
                metrics.set_signal_versions_disk(size)
            if stop.wait(POLL_SECONDS):
                return

    thread = threading.Thread(target=follow, name="tree-status", daemon=True)
    thread.start()
    return thread
