"""Bring one tree up in order, watch it, and take it down: signals → autoscaler (the versions are
fetched before, ``clusterman.tree.fetching``).

Every wait has a deadline and ends in a ``TreeError`` naming the version or signal that failed,
with the last lines of its log; a fetch failure never looks like success. ``stop_event`` (set by
the bootstrap's SIGTERM/SIGINT handler) interrupts any wait with ``Stopped``.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from clusterman.errors import UserError
from clusterman.signals.client import SignalAddress
from clusterman.tree.environment import SignalProcess
from clusterman.tree.environment import TreePlan
from clusterman.tree.liveness import Heartbeat
from clusterman.tree.liveness import LivenessRules
from clusterman.tree.liveness import crash_loop
from clusterman.tree.liveness import process_stalled_for
from clusterman.tree.liveness import runner_unanswered_for
from clusterman.tree.parent_death import read_starts
from clusterman.tree.parent_death import starts_file
from clusterman.tree.supervisor import ProcessStatus
from clusterman.tree.supervisor import Supervisor
from clusterman_signals.wire import peer_credentials

log = logging.getLogger(__name__)

SIGNALS_GROUP = "run_signals"
AUTOSCALER = "autoscaler:autoscaler"
DRAINER = "drainer:drainer"
POLL_SECONDS = 0.05
DEFAULT_RULES = LivenessRules()


class TreeError(UserError):
    """The tree could not come up or broke down; the message names the version, signal or program."""


class CrashLoop(TreeError):
    """The autoscaler keeps exiting: the bootstrap rolls back to the last good configuration, or stops."""


class Stopped(Exception):
    """SIGTERM or SIGINT arrived while waiting."""


@dataclass(frozen=True)
class Timeouts:
    """Seconds to wait for each step."""

    supervisor: float = 15.0
    fetch: float = 300.0
    s3_check: float = 60.0  # for S3 to confirm the versions a tree started from their installed copies
    signals: float = 60.0
    stop: float = 60.0


def accepts_from(process: SignalProcess, pid: int) -> bool:
    """True when ``pid`` itself (not a stray process holding the name) accepts on the signal's socket."""
    address = SignalAddress(process.namespace, process.name, process.app)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        try:
            sock.connect(address.socket_name)
        except OSError:
            return False
        return peer_credentials(sock)[0] == pid


def _last_lines(text: str, count: int = 3) -> str:
    """The last distinct lines of a log: a process that failed five times says why once."""
    lines = [line for line in text.splitlines() if line.strip()]
    recent = list(dict.fromkeys(reversed(lines)))[:count]
    return " | ".join(reversed(recent)) or "(no output)"


class ProcessTree:
    def __init__(
        self,
        supervisor: Supervisor,
        plan: TreePlan,
        timeouts: Timeouts,
        stop_event: threading.Event,
        probe: Callable[[SignalProcess, int], bool] = accepts_from,
        heartbeat: Path | None = None,
        rules: LivenessRules = DEFAULT_RULES,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.supervisor = supervisor
        self.plan = plan
        self.timeouts = timeouts
        self.stop_event = stop_event
        self.probe = probe
        self.heartbeat = heartbeat
        self.rules = rules
        self.clock = clock
        self.monotonic = monotonic
        self._seen = (0, 0.0)  # the autoscaler's pid and when a look first saw it (monotonic)
        self.beat: Heartbeat | None = None  # as the last ``check`` read it
        self.starts = starts_file(supervisor.private_dir, "autoscaler")
        self.killed: set[int] = set()  # stalled autoscaler and runner pids already killed (supervisord may lag)
        # supervisord's process name -> the signal it runs (``numprocs``, in the plan's order)
        self.runners = {f"{SIGNALS_GROUP}_{n}": s for n, s in enumerate(plan.signals)}
        self.started_at = math.inf  # wall clock when start() began: runs finished before are not this tree's
        self.started_monotonic = math.inf  # the same on the monotonic clock

    def _wait(self, seconds: float) -> None:
        if self.stop_event.wait(seconds):
            raise Stopped()

    def _failure(self, status: ProcessStatus) -> str:
        log_lines = self.supervisor.log_tail(status.full_name)
        tail = _last_lines("\n".join([log_lines, status.spawnerr]))  # spawnerr: it could not even start
        how = f"exit status {status.exitstatus}" if status.state == "EXITED" else status.state
        return f"{how}: {tail}"

    def start(self) -> None:
        started = time.monotonic()
        self.started_at, self.started_monotonic = self.clock(), self.monotonic()
        self.starts.unlink(missing_ok=True)  # a crash loop is counted per tree
        self.supervisor.start(self.timeouts.supervisor)
        self.supervisor.start_group(SIGNALS_GROUP)
        self.wait_signals()
        log.info("%d signal(s) answering after %.2f s", len(self.plan.signals), time.monotonic() - started)
        self.supervisor.start_process(AUTOSCALER)
        log.info("started the autoscaler after %.2f s", time.monotonic() - started)
        if self.plan.drainer:  # the cluster's notices, filed for every pool (one reads at a time)
            self.supervisor.start_process(DRAINER)
            log.info("started the drainer")

    def _group(self, group: str, expected: int) -> list[ProcessStatus]:
        """The group's processes, which must be as many as the plan says (else the config is not ours)."""
        statuses = self.supervisor.processes(group)
        if len(statuses) != expected:
            raise TreeError(f"supervisord runs {len(statuses)} {group} processes, expected {expected}")
        return statuses

    def wait_signals(self) -> None:
        by_name = self.runners
        deadline = time.monotonic() + self.timeouts.signals
        ready: set[str] = set()
        while True:
            pending = []
            for status in self._group(SIGNALS_GROUP, len(by_name)):
                process = by_name[status.name]
                label = f"signal {process.namespace}.{process.name}@{process.version} for {process.app}"
                if status.state == "FATAL":
                    raise TreeError(f"{label} does not start ({self._failure(status)})")
                if status.name in ready:
                    continue
                started = status.state == "RUNNING" or (status.state == "STARTING" and status.pid)
                if started and self.probe(process, status.pid):
                    ready.add(status.name)
                    continue
                pending.append(f"{label} ({status.state})")
            if not pending:
                return
            if time.monotonic() > deadline:
                raise TreeError(f"not answering after {self.timeouts.signals:g} s: {'; '.join(pending)}")
            self._wait(POLL_SECONDS)

    def check(self) -> None:
        """Between polls: supervisord must live; a signal that gave up is started again; the
        autoscaler must not be crash-looping (TreeError) nor stalled (restarted)."""
        code = self.supervisor.exit_status()
        if code is not None:
            raise TreeError(f"supervisord exited with status {code}")
        now = self.clock()
        beat = self.beat = Heartbeat.read(self.heartbeat) if self.heartbeat is not None else None
        for status in self.supervisor.processes():
            if status.full_name == AUTOSCALER:
                self._check_autoscaler(status, beat, now)
                continue
            if status.state == "RUNNING":
                self._check_runner(status, beat, now)
            if status.state != "FATAL":
                continue
            log.error("%s gave up starting (%s); starting it again", status.full_name, self._failure(status))
            self.supervisor.start_process(status.full_name)

    def _check_autoscaler(self, status: ProcessStatus, beat: Heartbeat | None, now: float) -> None:
        if status.state == "FATAL":
            raise CrashLoop(f"the autoscaler keeps exiting ({self._failure(status)})")
        mono = self.monotonic()
        looping = crash_loop(read_starts(self.supervisor.private_dir, "autoscaler"), (now, mono), self.rules, beat)
        if looping:
            window = mono - min(m for _, m in looping)
            last = _last_lines(self.supervisor.log_tail(AUTOSCALER), 1)
            raise CrashLoop(
                f"the autoscaler keeps exiting: started {len(looping)} times in {window:.0f} s without finishing "
                f"a run; its log ends: {last}"
            )
        if beat is None or status.state != "RUNNING" or status.pid in self.killed:
            return
        if self._seen[0] != status.pid:  # its start on the monotonic clock: when a look first saw it (a poll late)
            self._seen = (status.pid, mono)
        stalled = process_stalled_for(beat, status.pid, (status.start, self._seen[1]), (now, mono), self.rules)
        if stalled is not None:
            log.error(
                "the autoscaler (pid %d) has not finished a run for %.0f s (over %g periods of %g s): restarting it",
                status.pid, stalled, self.rules.stale_periods, beat.period_seconds,
            )  # fmt: skip
            self._kill(status.pid)

    def _check_runner(self, status: ProcessStatus, beat: Heartbeat | None, now: float) -> None:
        """A runner the autoscaler's runs found silent for ``stale_periods`` is killed; supervisord
        starts it again (meanwhile its app was scaled on the default signal)."""
        process = self.runners.get(status.name)
        if process is None or status.pid in self.killed:
            return
        silent = runner_unanswered_for(beat, process.app, status.start, now, self.rules)
        if silent is None:
            return
        log.error(
            "the signal %s.%s@%s for %s (pid %d) has not answered the autoscaler for %.0f s: restarting it",
            process.namespace, process.name, process.version, process.app, status.pid, silent,
        )  # fmt: skip
        self._kill(status.pid)

    def _kill(self, pid: int) -> None:
        """SIGKILL reaches a stopped process too; supervisord starts the program again."""
        self.killed.add(pid)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _this_trees(self) -> Heartbeat | None:
        """The heartbeat the last ``check`` read, when it is of a run of this tree."""
        beat = self.beat
        if beat is None:
            return None
        newer = beat.monotonic >= self.started_monotonic if beat.pid else beat.finished_at >= self.started_at
        return beat if newer else None

    def has_finished_a_run(self) -> bool:
        """Whether the autoscaler of this tree finished a run its configuration could work in (one
        that found it cannot, its state store unusable say, proves nothing of it)."""
        beat = self._this_trees()
        return beat is not None and not beat.unworkable

    def unworkable(self) -> str:
        """Why the last run of this tree found its configuration cannot work ("" when it did not)."""
        beat = self._this_trees()
        return beat.unworkable if beat is not None else ""

    def stop(self) -> None:
        self.supervisor.stop(self.timeouts.stop)
