"""``python -m clusterman.batch.autoscaler``: scale one pool, every period, until stopped.

What supervisord runs as ``autoscaler`` (with ``$CMAN_ARGS``). Each run is one ``Cycle``; runs
start on a grid of the pool's period, offset by a splay derived from the cluster and pool names
(SHA-256, so every process and restart agrees, unlike Python's salted ``hash()``), so that many
pools sharing an account do not call AWS in the same second. One run's failure is logged and
recorded and never ends the loop; SIGTERM or SIGINT stops it after the current run.

Only the holder of the pool's lease acts (``clusterman.state.lease``): the loop renews it while it
waits between runs, so a loop that dies or hangs loses it within one TTL and another autoscaler
takes over. A run longer than its budget (default: the period) is an event and a metric, and
never acts on a snapshot older than the budget. With ``$CMAN_HEARTBEAT_FILE`` set, the file is
replaced after every finished run (``clusterman.tree.liveness.Heartbeat``), for the bootstrap to
notice a loop that stopped finishing runs.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from clusterman.batch.arguments import add_pool_arguments
from clusterman.batch.arguments import add_program_arguments
from clusterman.batch.arguments import configure_logging
from clusterman.batch.arguments import resolve_pool
from clusterman.batch.stopping import stop_on_signals
from clusterman.core.timestamps import format_time
from clusterman.errors import Reported
from clusterman.errors import UserError
from clusterman.events.exporter import ErrorSource
from clusterman.events.recorder import Recorder
from clusterman.events.service import EventService
from clusterman.run.cycle import Cycle
from clusterman.run.report import Outcome
from clusterman.run.report import RunReport
from clusterman.state.lease import Holder
from clusterman.state.lease import LeaseStatus
from clusterman.tree.liveness import Heartbeat
from clusterman.tree.liveness import LivenessRules
from clusterman.tree.liveness import Unwritable
from clusterman.tree.liveness import bootstrap_unwritable
from clusterman.tree.liveness import process_stalled_for
from clusterman.tree.liveness import watch_problem
from clusterman.tree.status_file import follow_tree
from clusterman.tree.status_file import tree_rolled_back
from clusterman.wiring.build import build_cycle

HEARTBEAT_ENV = "CMAN_HEARTBEAT_FILE"

log = logging.getLogger("clusterman.batch.autoscaler")


def splay_seconds(cluster: str, pool: str, period_seconds: float) -> float:
    """A stable offset in [0, period): the same for the same pool in every process."""
    digest = hashlib.sha256(f"{cluster}.{pool}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % max(1, int(period_seconds))


def next_run_time(now: float, period_seconds: float, splay: float) -> float:
    """The first grid point ``k × period + splay`` at or after ``now``."""
    k = math.ceil((now - splay) / period_seconds)
    return k * period_seconds + splay


def run_forever(
    cycle: Cycle,
    recorder: Recorder,
    period_seconds: float,
    splay: float,
    stop: threading.Event,
    clock: Callable[[], float] = time.time,
    on_report: Callable[[RunReport], None] = lambda report: None,
    max_runs: int = 0,
    budget_seconds: float | None = None,
    keep_lease: Callable[[float], LeaseStatus | None] | None = None,
    lease_seconds: float = 0.0,
    heartbeat: Callable[[float], None] | None = None,
    on_overrun: Callable[[str], None] = lambda line: None,
    monotonic: Callable[[], float] = time.monotonic,
    due: Callable[[float], bool] | None = None,
    due_seconds: float = 1.0,
) -> int:
    """Run on the grid until ``stop`` is set (or ``max_runs`` runs, when > 0); returns the run count.
    ``recorder`` hears what the loop sees: runs that failed, how long each took, overruns.

    The grid is on the wall ``clock``; waits and run times are measured on ``monotonic``, so a wall
    clock stepped back (NTP, an operator) neither stretches a wait by the step nor makes a run look
    long or short: the next run comes within one period of the new time.

    ``keep_lease`` is called while waiting: every third of ``lease_seconds`` while it holds the lease,
    every tenth while another holds it (so it takes over soon after the holder stops renewing).

    ``due`` is asked every ``due_seconds`` while waiting: True starts a run at once, off the grid (a
    notice came: the node is tainted and its replacement asked within seconds, not a period)."""
    runs = 0
    held = True  # the lease, as the last run found it: a standby retries more often
    while not stop.is_set():
        now = clock()
        wait = next_run_time(now, period_seconds, splay) - now
        _wait(stop, clock, monotonic, monotonic() + wait, keep_lease, lease_seconds, held, due, due_seconds)
        if stop.is_set():
            break
        started = clock()
        began = monotonic()
        report: RunReport | None = None
        try:
            report = cycle.run_once(started)
            on_report(report)
            held = report.outcome is not Outcome.STANDBY
        except Exception as e:  # a bug in one run must not end the loop: record it and go on
            log.exception("the run at %.0f failed", started)
            recorder.error(ErrorSource.INTERNAL, "autoscaler", f"run failed: {type(e).__name__}: {e}")
        took = monotonic() - began
        recorder.run_took(took)
        if budget_seconds is not None and took > budget_seconds:
            on_overrun(_overran(recorder, started, took, budget_seconds, report))
        if heartbeat is not None:
            try:
                heartbeat(clock())
            except OSError as e:  # the watcher restarts us if this persists: say why
                log.error("cannot write the heartbeat file: %s", e)
        runs += 1
        if max_runs and runs >= max_runs:
            break
        collect_between_runs()
        if monotonic() - began < 1:  # never twice in the same grid slot; the lease kept meanwhile
            _wait(stop, clock, monotonic, monotonic() + 1, keep_lease, lease_seconds, held)
    return runs


def collect_between_runs() -> None:
    """A full pass of the cyclic garbage collector while the loop waits. A big pool's cache keeps
    hundreds of thousands of objects, so a full pass takes tenths of a second; made here, the next
    run starts with nothing put off, and the collector's own full pass seldom falls inside a run."""
    gc.collect()


def _wait(
    stop: threading.Event,
    clock: Callable[[], float],
    monotonic: Callable[[], float],
    until: float,
    keep_lease: Callable[[float], LeaseStatus | None] | None,
    lease_seconds: float,
    held: bool,
    due: Callable[[float], bool] | None = None,
    due_seconds: float = 1.0,
) -> None:
    """Until ``monotonic()`` reaches ``until`` (or ``due`` says a run is due), renewing the lease
    meanwhile (``clock``: its time)."""
    renewal = monotonic() + lease_seconds / (3 if held else 10)
    while not stop.is_set():
        left = until - monotonic()
        if left <= 0:
            return
        if due is not None and held:
            try:
                if due(clock()):
                    return
            except Exception:  # a bug here must not end the loop: the grid's run comes anyway
                log.exception("asking whether a run is due failed")
        if keep_lease is None or lease_seconds <= 0:
            stop.wait(min(left, due_seconds) if due is not None else left)
            continue
        to_renew = renewal - monotonic()
        step = min(left, to_renew, due_seconds) if due is not None else min(left, to_renew)
        if stop.wait(max(step, 0.0)) or monotonic() >= until:
            return
        if step < to_renew:  # woke to ask ``due``, not to renew
            continue
        try:
            status = keep_lease(clock())
        except Exception:  # a bug here must not end the loop; the next run claims the lease again
            log.exception("renewing the pool's lease failed")
            status = None
        else:
            held = status is None or status.held
        renewal = monotonic() + lease_seconds / (3 if held else 10)


def _overran(recorder: Recorder, started: float, seconds: float, budget: float, report: RunReport | None) -> str:
    """Record a run longer than its budget; returns the line to show."""
    if report is None:
        what = "it failed"
    elif report.outcome is Outcome.OVERRUN:
        what = "it held: nothing changed"
    elif report.outcome is Outcome.ACTED:
        what = "it acted on inputs read within the budget"
    else:
        what = f"it ended {report.outcome.value}: nothing changed"
    log.warning("the run took %.1f s, more than its budget of %g s: %s", seconds, budget, what)
    recorder.overrun(seconds, budget, what)
    stamp = format_time(started)
    return f"{stamp} overrun: the run took {seconds:.1f} s > budget {budget:g} s: {what}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m clusterman.batch.autoscaler", description=__doc__.split("\n")[0])
    add_program_arguments(parser)
    add_pool_arguments(parser)
    parser.add_argument("--dry-run", action="store_true", help="decide and log, change nothing")
    parser.add_argument("--once", action="store_true", help="one run now, then exit")
    parser.add_argument("--runs", type=int, default=0, help="stop after this many runs (0: never)")
    parser.add_argument("--period-seconds", type=float, default=None, help="override the pool's period")
    parser.add_argument("--no-splay", action="store_true", help="run on the period's grid without the offset")
    parser.add_argument(
        "--budget-seconds", type=float, default=None, help="a run's wall-clock budget (default: the period)"
    )
    parser.add_argument(
        "--lease-seconds",
        type=float,
        default=None,
        help="TTL of the pool's lease, shorter than the period (default: half the period)",
    )
    parser.add_argument(
        "--collect-metrics",
        action="store_true",
        help="also write the pool's system metrics each run (when no separate collector runs, e.g. simulated pools)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    holder = Holder.this_process(time.time())
    try:
        setup = resolve_pool(args)
        period = args.period_seconds or setup.period_seconds
        budget = args.budget_seconds or period
        lease_seconds = args.lease_seconds or period / 2
        if not 0 < lease_seconds < period or budget <= 0:
            raise UserError(
                f"--lease-seconds {lease_seconds:g} must be positive and shorter than the period {period:g} s, "
                f"and --budget-seconds {budget:g} positive"
            )
        events = EventService(setup.main.events, setup.identity.cluster, setup.identity.pool_with_scheduler)
        cycle = build_cycle(
            setup,
            events.recorder,
            dry_run=args.dry_run,
            collect_metrics=args.collect_metrics,
            holder=holder,
            lease_seconds=lease_seconds,
            budget_seconds=budget,
        )
    except Reported as e:
        print(f"autoscaler: {e}", file=sys.stderr)
        return 1
    splay = 0.0 if args.no_splay else splay_seconds(setup.identity.cluster, setup.identity.pool, period)
    stop = stop_on_signals(log, "stopping after the current run")
    heartbeat_path = os.environ.get(HEARTBEAT_ENV)

    unworkable = ""  # why the last run found the configuration cannot work

    def show(report: RunReport) -> None:
        nonlocal unworkable
        print(report.line(), flush=True)
        if report.unworkable and report.unworkable != unworkable:
            log.error("THE CONFIGURATION CANNOT WORK: %s: this autoscaler cannot act under it", report.unworkable)
        unworkable = report.unworkable
        events.listen()

    started = (time.time(), time.monotonic())
    last = Heartbeat(-math.inf, period, pid=os.getpid(), monotonic=-math.inf)  # none yet: from the start plus the grace

    unwritable = Unwritable("the autoscaler")

    def beat(finished_at: float) -> None:
        nonlocal last
        last = Heartbeat.this_process(finished_at, period, cycle.demand.unanswered(), unworkable)
        if heartbeat_path:
            try:
                why = last.write(Path(heartbeat_path))
            except OSError as e:  # nor in place: the bootstrap will take this for a stall
                why = f"{e.strerror or e}, nor in place"
            unwritable.note("heartbeat", why)
        events.metrics.set_unwritable({**unwritable.now, **bootstrap_unwritable(os.environ)})

    def unwritable_files() -> dict[str, list[str]]:
        """For /healthz, without failing it: files of the tree that cannot be written."""
        theirs = [f"the bootstrap cannot write the {f}: {why}" for f, why in bootstrap_unwritable(os.environ).items()]
        return {"degraded": [f"cannot write the {f}: {why}" for f, why in unwritable.now.items()] + theirs}

    def configuration() -> dict[str, list[str]]:
        """For /healthz, without failing it (a restart does not mend a configuration): why this
        one cannot work, and a change the bootstrap rolled back."""
        rolled_back = tree_rolled_back(os.environ)
        return {
            "degraded": ([f"the configuration cannot work: {unworkable}"] if unworkable else [])
            + ([rolled_back] if rolled_back else [])
        }

    def run_loop_problem() -> str:
        """For /healthz where no bootstrap watches (or it is stopped): runs that stopped finishing
        (on the monotonic clock: a wall clock stepped either way changes nothing)."""
        stalled = process_stalled_for(last, os.getpid(), started, (time.time(), time.monotonic()), LivenessRules())
        return "" if stalled is None else f"no run finished for {stalled:.0f} s (runs every {period:g} s): hung"

    events.server.health_checks += [run_loop_problem, lambda: watch_problem(os.environ, time.time(), time.monotonic())]
    events.server.health_notes += [cycle.signal_outcomes.health, unwritable_files, configuration]
    events.start()
    follow_tree(os.environ, events.recorder, events.metrics, stop)  # config outcomes and fallbacks from the bootstrap
    log.info(
        "%s: every %.0f s (splay %.0f s, budget %g s, lease %g s as %s)%s; events and /metrics %s",
        setup.identity, period, splay, budget, lease_seconds, holder.id, " (dry run)" if args.dry_run else "",
        f"on {events.server.url}" if events.server.listening else "not served yet",
    )  # fmt: skip
    try:
        if args.once:
            show(cycle.run_once(time.time()))
            beat(time.time())
        else:
            run_forever(
                cycle, events.recorder, period, splay, stop, on_report=show, max_runs=args.runs, budget_seconds=budget,
                keep_lease=cycle.keep_lease, lease_seconds=lease_seconds, heartbeat=beat,
                on_overrun=lambda line: print(line, flush=True), due=cycle.due,
                due_seconds=setup.main.notices.poll_seconds,
            )  # fmt: skip
    finally:
        cycle.release_lease()
        cycle.close()
        events.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
