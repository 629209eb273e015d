"""``python -m clusterman.batch.autoscaler``: scale one pool, every period, until stopped.

What supervisord runs as ``autoscaler`` (with ``$CMAN_ARGS``). Each run is one ``Cycle``; runs
start on a grid of the pool's period, offset by a splay derived from the cluster and pool names
(SHA-256, so every process and restart agrees, unlike Python's salted ``hash()``), so that many
pools sharing an account do not call AWS in the same second. One run's failure is logged and
recorded and never ends the loop; SIGTERM or SIGINT stops it after the current run.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import math
import sys
import threading
import time
from collections.abc import Callable

from clusterman.batch.stopping import stop_on_signals
from clusterman.cli.common import add_pool_arguments
from clusterman.cli.common import resolve_pool
from clusterman.config.loader import default_env_config_path
from clusterman.errors import Reported
from clusterman.events.exporter import ErrorSource
from clusterman.events.service import EventService
from clusterman.manager.cycle import Cycle
from clusterman.manager.cycle import RunReport
from clusterman.manager.wiring import build_cycle

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
    period_seconds: float,
    splay: float,
    stop: threading.Event,
    clock: Callable[[], float] = time.time,
    on_report: Callable[[RunReport], None] = lambda report: None,
    max_runs: int = 0,
) -> int:
    """Run on the grid until ``stop`` is set (or ``max_runs`` runs, when > 0); returns the run count."""
    runs = 0
    while not stop.is_set():
        stop.wait(max(0.0, next_run_time(clock(), period_seconds, splay) - clock()))
        if stop.is_set():
            break
        started = clock()
        try:
            on_report(cycle.run_once(started))
        except Exception as e:  # a bug in one run must not end the loop: record it and go on
            log.exception("the run at %.0f failed", started)
            cycle.recorder.error(ErrorSource.INTERNAL, "autoscaler", f"run failed: {type(e).__name__}: {e}")
        cycle.recorder.metrics.observe_run(clock() - started)
        runs += 1
        if max_runs and runs >= max_runs:
            break
        if clock() - started < 1:  # never twice in the same grid slot
            stop.wait(1)
    return runs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m clusterman.batch.autoscaler", description=__doc__.split("\n")[0])
    parser.add_argument("--env-config-path", default=default_env_config_path())
    parser.add_argument("--cluster-config-directory", default=None)
    add_pool_arguments(parser)
    parser.add_argument("--dry-run", action="store_true", help="decide and log, change nothing")
    parser.add_argument("--once", action="store_true", help="one run now, then exit")
    parser.add_argument("--runs", type=int, default=0, help="stop after this many runs (0: never)")
    parser.add_argument("--period-seconds", type=float, default=None, help="override the pool's period")
    parser.add_argument("--no-splay", action="store_true", help="run on the period's grid without the offset")
    parser.add_argument(
        "--collect-metrics",
        action="store_true",
        help="also write the pool's system metrics each run (when no separate collector runs, e.g. simulated pools)",
    )
    parser.add_argument("--log-level", default="INFO")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    try:
        setup = resolve_pool(args)
        events = EventService(setup.main.events, setup.identity.cluster, setup.identity.pool_with_scheduler)
        cycle = build_cycle(setup, events.recorder, dry_run=args.dry_run, collect_metrics=args.collect_metrics)
    except Reported as e:
        print(f"autoscaler: {e}", file=sys.stderr)
        return 1
    period = args.period_seconds or setup.period_seconds
    splay = 0.0 if args.no_splay else splay_seconds(setup.identity.cluster, setup.identity.pool, period)
    stop = stop_on_signals(log, "stopping after the current run")

    def show(report: RunReport) -> None:
        print(report.line(), flush=True)

    events.start()
    log.info(
        "%s: every %.0f s (splay %.0f s)%s; events and /metrics on http://%s:%d",
        setup.identity, period, splay, " (dry run)" if args.dry_run else "", events.config.host, events.server.port,
    )  # fmt: skip
    try:
        if args.once:
            show(cycle.run_once(time.time()))
        else:
            run_forever(cycle, period, splay, stop, on_report=show, max_runs=args.runs)
    finally:
        cycle.close()
        events.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
