"""Is the tree alive and working? Rules over small files its processes write for each other.

supervisord only sees whether a process exists. A stopped (SIGSTOP) or hung autoscaler exists and
scales nothing; one that fails after ``startsecs`` is restarted forever without ever being FATAL.
The bootstrap reads two small files and asks these rules:

- the heartbeat ``$CMAN_HEARTBEAT_FILE``, which the autoscaler rewrites (atomically) after every
  finished run: ``{"finished_at": <unix seconds>, "period_seconds": <seconds>, "pid": <its pid>,
  "monotonic": <the host's CLOCK_MONOTONIC, seconds>}``. A stall is judged by the last two: one
  clock for every process of the host, which no step of the wall clock moves. ``"unanswered":
  {<app>: {"since": <unix s>, "last": <unix s>}}`` names the signals whose runners did not answer
  in time (stopped, or hung in the signal's code, while supervisord sees them RUNNING);
  ``"unworkable": <why>`` says the run could not act because its configuration cannot work (its
  state or metrics store unusable, no usable kubeconfig): a run, but no proof of a good one;
- the starts ``$CMAN_SUPERVISOR_DIR/starts-autoscaler``, one line per start
  (``clusterman.tree.parent_death``).

The other way round, the bootstrap rewrites ``$CMAN_TREE_WATCH_FILE`` after each look at the tree:
``{"at": <unix s>, "poll_seconds": <s>, "monotonic": <s>}``, and ``"unwritable": {<file>: <why>}``
for the files of its own it cannot write. The autoscaler's ``/healthz`` judges it, because nothing
in the tree can restart a stopped bootstrap, but the pod's liveness probe can.

Both liveness files survive a full disk. Each is normally replaced in one step (a new file,
renamed), padded to ``LIVENESS_BYTES``; when the new file cannot be written, the record is written
over the old one, in place, which needs no new block. A file that could not be written is said
so (``cannot write the heartbeat: No space left on device``), and never taken for a stall of the
process that tried.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from pathlib import Path

from clusterman.tree.status_file import write_atomically

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Heartbeat:
    finished_at: float  # unix seconds: the end of the last finished run
    period_seconds: float  # the autoscaler's run period
    unanswered: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # app -> (since, last), unix s
    pid: int = 0  # the writer; 0: an older autoscaler, which wrote neither this nor ``monotonic``
    monotonic: float = 0.0  # the end of the last run on the host's CLOCK_MONOTONIC (seconds)
    unworkable: str = ""  # why the last run found its configuration cannot work ("" when it did not)

    @staticmethod
    def this_process(
        finished_at: float,
        period_seconds: float,
        unanswered: Mapping[str, tuple[float, float]] | None = None,
        unworkable: str = "",
    ) -> Heartbeat:
        """The heartbeat of a run of this process that has just finished (at ``finished_at``, wall clock)."""
        return Heartbeat(finished_at, period_seconds, unanswered or {}, os.getpid(), time.monotonic(), unworkable)

    @staticmethod
    def read(path: Path) -> Heartbeat | None:
        """None when there is no heartbeat (yet), or it is not one (then the watch waits for a good one)."""
        try:
            data = json.loads(path.read_text())
            unanswered = data.get("unanswered", {})
            beat = Heartbeat(
                float(data["finished_at"]),
                float(data["period_seconds"]),
                {str(app): (float(v["since"]), float(v["last"])) for app, v in unanswered.items()},
                int(data.get("pid", 0)),
                float(data.get("monotonic", 0.0)),
                str(data.get("unworkable", "")),
            )
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None
        times = (beat.finished_at, beat.period_seconds, beat.monotonic)
        if not (all(map(math.isfinite, times)) and beat.period_seconds > 0):
            return None
        return beat

    def write(self, path: Path) -> str:
        """Write the heartbeat (``write_liveness``); "" or why a new file could not be written."""
        beat: dict[str, object] = {"finished_at": self.finished_at, "period_seconds": self.period_seconds}
        if self.pid:
            beat.update(pid=self.pid, monotonic=self.monotonic)
        if self.unworkable:
            beat["unworkable"] = self.unworkable[:1000]  # within LIVENESS_BYTES, rewritten in place
        if self.unanswered:
            beat["unanswered"] = {app: {"since": since, "last": last} for app, (since, last) in self.unanswered.items()}
        return write_liveness(path, beat)


LIVENESS_BYTES = 4096  # a liveness file's size at least: a record rewritten in place fits


def write_liveness(path: Path, record: Mapping[str, object]) -> str:
    """Replace ``path`` with ``record`` in one step (a reader never sees half a file); when the new
    file cannot be written (a full disk), write it over the old file in place, where its blocks are
    already. Returns "" or why the new file could not be written; OSError when neither could."""
    text = json.dumps(record)
    padded = text + " " * (LIVENESS_BYTES - len(text))  # JSON allows the trailing spaces
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, padded)
        return ""
    except OSError as e:
        failed = e
    data = padded.encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)  # neither created nor truncated
        try:
            if os.fstat(fd).st_size < len(data) or os.pwrite(fd, data, 0) != len(data):
                raise failed
        finally:
            os.close(fd)
    except OSError:
        raise failed from None
    return failed.strerror or str(failed)


class Unwritable:
    """The files a process could not write (file -> why), each said once when it starts and once
    when it stops failing."""

    def __init__(self, who: str) -> None:
        self.who = who
        self.now: dict[str, str] = {}

    def note(self, what: str, why: str) -> None:
        """``why``: "" when ``what`` was written."""
        if why and self.now.get(what) != why:
            log.error("%s cannot write the %s: %s", self.who, what, why)
        elif not why and what in self.now:
            log.info("%s writes the %s again", self.who, what)
        if why:
            self.now[what] = why
        else:
            self.now.pop(what, None)


@dataclass(frozen=True)
class LivenessRules:
    stale_periods: float = 3.0  # no finished run for this many periods: restart the autoscaler
    start_grace_seconds: float = 60.0  # after a start, on top of the periods, for start-up and the first run
    crash_starts: int = 5  # this many starts ...
    crash_window_seconds: float = 300.0  # ... within this window: a crash loop


def stalled_for(beat: Heartbeat | None, started_at: float, now: float, rules: LivenessRules) -> float | None:
    """Seconds since the last finished run when the autoscaler counts as stalled, else None.

    Without any heartbeat the autoscaler does not write one, and nothing is judged. A run
    finished before the process started (the previous process's) counts from the start plus
    the grace.
    """
    if beat is None:
        return None
    since = beat.finished_at if beat.finished_at >= started_at else started_at + rules.start_grace_seconds
    if now - since <= rules.stale_periods * beat.period_seconds:
        return None
    return now - max(beat.finished_at, started_at)


def on_monotonic(beat: Heartbeat, pid: int) -> Heartbeat:
    """``beat`` for ``stalled_for`` on the host's monotonic clock, as judged for the process ``pid``:
    its own last run, or none yet (another process's heartbeat, an older autoscaler's without times
    of that clock). The wall-clock time is wrong by any step of the wall clock until the next run,
    and a step forward must not make a running autoscaler look stalled."""
    return replace(beat, finished_at=beat.monotonic if beat.pid == pid else -math.inf)


Moment = tuple[float, float]  # (wall clock, the host's monotonic clock), seconds
NEVER: Moment = (-math.inf, -math.inf)


def process_stalled_for(beat: Heartbeat, pid: int, started: Moment, now: Moment, rules: LivenessRules) -> float | None:
    """``stalled_for`` for the process ``pid``, started at ``started``: on the host's monotonic clock
    when the heartbeat gives it (a process of this host wrote it), else on the wall clock."""
    if beat.pid:
        return stalled_for(on_monotonic(beat, pid), started[1], now[1], rules)
    return stalled_for(beat, started[0], now[0], rules)


def heartbeat_problem(path: Path, now: float, monotonic_now: float, rules: LivenessRules) -> str:
    """For an exec liveness probe of a loop that writes a heartbeat after every run (the metrics
    collector's ``--check-heartbeat``, run on the loop's host): why it counts as stopped or hung, ""
    when it does not."""
    beat = Heartbeat.read(path)
    if beat is None:
        return f"no heartbeat in {path}: not started yet, or not writing it"
    stalled = process_stalled_for(beat, beat.pid, NEVER, (now, monotonic_now), rules)
    if stalled is None:
        return ""
    return f"no run finished for {stalled:.0f} s (runs every {beat.period_seconds:g} s): stopped or hung"


def crash_loop(starts: list[Moment], now: Moment, rules: LivenessRules, beat: Heartbeat | None = None) -> list[Moment]:
    """The starts that make a crash loop (enough of them within the window, on the monotonic
    clock, and none followed by a finished run: ``beat`` says when the last one ended), else [].
    An autoscaler killed from outside (an operator's ``kill -9``) between runs is not failing."""
    after = -math.inf if beat is None else (beat.monotonic if beat.pid else beat.finished_at)
    recent = [
        (wall, mono)
        for wall, mono in starts
        if now[1] - rules.crash_window_seconds <= mono <= now[1] + 1 and (mono if beat and beat.pid else wall) > after
    ]
    return recent if len(recent) >= rules.crash_starts else []


def runner_unanswered_for(
    beat: Heartbeat | None, app: str, started_at: float, now: float, rules: LivenessRules
) -> float | None:
    """Seconds the runner of ``app``'s signal has not answered the autoscaler when that counts as
    hung (as long as a stalled autoscaler: ``stale_periods``), else None. A runner started since
    (restarted) is judged afresh, and only once a run has asked it (a standby autoscaler asks
    none: its last word on a runner it no longer asks must not restart it again and again)."""
    if beat is None or app not in beat.unanswered:
        return None
    first, last = beat.unanswered[app]
    if last < started_at:
        return None
    since = max(first, started_at)
    if now - since <= rules.stale_periods * beat.period_seconds:
        return None
    return now - since


WATCH_ENV = "CMAN_TREE_WATCH_FILE"
WATCH_MARGIN_SECONDS = 5.0  # on top of 3 polls: a busy host


def write_watch(
    path: Path, at: float, poll_seconds: float, monotonic: float = math.nan, unwritable: Mapping[str, str] | None = None
) -> str:
    """The bootstrap, after each look at the tree: proof that something still watches it (``at`` on
    the wall clock, for people; ``monotonic`` on the host's, for ``watch_problem``), and the files
    it cannot write. Returns "" or why the file could not be replaced (written in place instead),
    "not written: <why>" when not at all (the autoscaler's /healthz then says the bootstrap stopped)."""
    watch: dict[str, object] = {"at": at, "poll_seconds": poll_seconds}
    if math.isfinite(monotonic):
        watch["monotonic"] = monotonic
    if unwritable:
        watch["unwritable"] = dict(unwritable)
    try:
        return write_liveness(path, watch)
    except OSError as e:
        return f"not written: {e.strerror or e}"


def bootstrap_unwritable(env: Mapping[str, str]) -> dict[str, str]:
    """The files the bootstrap says (in its watch file) it cannot write: file -> why."""
    path = env.get(WATCH_ENV)
    if not path:
        return {}
    try:
        unwritable = json.loads(Path(path).read_text()).get("unwritable", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in unwritable.items()} if isinstance(unwritable, dict) else {}


def watch_problem(env: Mapping[str, str], now: float, monotonic_now: float = math.nan) -> str:
    """For the autoscaler's /healthz: why the bootstrap no longer watches the tree ("" when it does,
    or when there is no bootstrap). A stopped (SIGSTOP) or hung bootstrap restarts no stalled
    autoscaler or runner and applies no edit, while the tree it leaves running looks healthy.
    Judged on the host's monotonic clock when both sides give it, since a stepped wall clock would
    make the last look seem an hour old, or new; else on the wall clock."""
    path = env.get(WATCH_ENV)
    if not path:
        return ""
    try:
        data = json.loads(Path(path).read_text())
        at, poll = float(data["at"]), float(data["poll_seconds"])
        looked = float(data.get("monotonic", math.nan))
    except (OSError, ValueError, TypeError, KeyError):
        return ""  # not written yet, or not one the bootstrap wrote: not judged
    late = monotonic_now - looked if math.isfinite(looked) and math.isfinite(monotonic_now) else now - at
    if late <= 3 * poll + WATCH_MARGIN_SECONDS:
        return ""
    return f"the bootstrap has not looked at the tree for {late:.0f} s (polls every {poll:g} s): stopped or hung"
