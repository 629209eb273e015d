"""``clusterman status``: one pool at a glance: pause, lease, groups, nodes, utilisation, last decisions.

Read from the cloud, the scheduler and the state store as the autoscaler reads them, and from the
autoscaler's event API (``--events-url``, default: the main config's ``events`` block) for its
last decisions. A part that cannot be read says why; the rest is still shown, and no part waits
longer than ``--timeout`` (an unreachable cloud or API server is shown as such, not waited on for
minutes). ``--json`` prints one document for tools. Each problem is said once, in the report (the
warnings the readers log on the way show with ``--log-level INFO``).

Exit status, for scripts and checks (docs/operations.md): 0 the autoscaler says ok, 3 degraded,
4 unhealthy, 5 unknown (its event API did not answer; with ``--no-events``, when not even the
pool's groups and nodes could be read); 1 a bad argument or config, 2 a usage error.
"""

from __future__ import annotations

import argparse
import json
import logging
import time

from clusterman.batch.arguments import add_pool_arguments
from clusterman.batch.arguments import add_timeout_argument
from clusterman.batch.arguments import count_argument
from clusterman.batch.arguments import resolve_identity
from clusterman.core.timestamps import format_time
from clusterman.errors import Reported
from clusterman.events.client import EventClient
from clusterman.events.client import api_url
from clusterman.run.budget import scheduler_timeout
from clusterman.run.demand_source import DemandSource
from clusterman.wiring.build import cloud_for
from clusterman.wiring.build import demand_for
from clusterman.wiring.pool_status import PoolStatus
from clusterman.wiring.pool_status import Unavailable
from clusterman.wiring.pool_status import describe_kept
from clusterman.wiring.pool_status import gather
from clusterman.wiring.pool_status import gather_refused
from clusterman.wiring.pool_status import percent_line
from clusterman.wiring.state_store import open_state_store


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("status", help="show a pool's groups, nodes, utilisation and last decisions")
    add_pool_arguments(parser)
    parser.add_argument("--events-url", help="the autoscaler's event API (default: from the main config)")
    parser.add_argument("--no-events", action="store_true", help="do not ask the event API")
    parser.add_argument("--decisions", type=count_argument, default=5, help="how many of the last decisions to show")
    parser.add_argument("--json", action="store_true", help="one JSON document")
    add_timeout_argument(
        parser, 15.0, "seconds each part (the cloud, the scheduler's API, the state store, signals) may take"
    )
    parser.set_defaults(func=run_status)


EXIT_OK, EXIT_DEGRADED, EXIT_UNHEALTHY, EXIT_UNKNOWN = 0, 3, 4, 5


def run_status(args: argparse.Namespace) -> int:
    root = logging.getLogger()
    level = root.level
    if level == logging.WARNING:  # the default: the report says each problem, the readers' warnings again
        root.setLevel(logging.ERROR)
    try:
        return _status(args)
    finally:
        root.setLevel(level)


def _status(args: argparse.Namespace) -> int:
    target = resolve_identity(args)
    timeout = args.timeout
    events = None
    if not args.no_events:
        events = EventClient(args.events_url or api_url(target.main.events), timeout=min(5.0, timeout))
    now = time.time()
    store = open_state_store(target.main, timeout)
    try:
        setup = target.setup()
    except Reported as e:
        if not target.pool_file.is_file():
            raise  # no such pool (a typo): one line, as for an unknown cluster
        status = gather_refused(target.identity, str(e), now, store=store, events=events, decisions=args.decisions)
    else:

        def demand() -> DemandSource:
            return demand_for(setup, budget_seconds=timeout)

        status = gather(
            setup,
            now,
            store=store,
            cloud=cloud_for(setup, budget_seconds=timeout),
            demand=demand,
            events=events,
            decisions=args.decisions,
            scheduler_timeout_seconds=scheduler_timeout(timeout),
        )
    print(json.dumps(status.as_json(), indent=2) if args.json else "\n".join(text_lines(status)))
    return exit_status(status, asked=events is not None)


def exit_status(s: PoolStatus, asked: bool = True) -> int:
    """0 ok, 3 degraded, 4 unhealthy, 5 unknown: the autoscaler's health as its event API says it
    (``asked``: False with ``--no-events``, then unknown only when nothing of the pool was read)."""
    if isinstance(s.health, Unavailable):
        nothing = not s.groups and isinstance(s.nodes, Unavailable)
        return EXIT_UNKNOWN if asked or nothing else EXIT_OK
    if s.health.problems:
        return EXIT_UNHEALTHY
    return EXIT_DEGRADED if s.health.degraded else EXIT_OK


class _Unknowns:
    """Each reason a part is unknown said once: a later part with the same one points back."""

    def __init__(self) -> None:
        self.first: dict[str, str] = {}  # why -> the part that said it

    def __call__(self, part: str, why: str) -> str:
        for earlier, said in self.first.items():  # "no snapshot to measure: <the nodes' reason>"
            if why.endswith(f": {earlier}"):
                return f"unknown: {why.removesuffix(f': {earlier}')} (as {said})"
        said = self.first.setdefault(why, part)
        return f"unknown: {why}" if said == part else f"unknown (as {said})"


def text_lines(s: PoolStatus) -> list[str]:
    unknown = _Unknowns()
    pause = s.pause.why if isinstance(s.pause, Unavailable) else s.pause.describe()
    lease = f"lease: {s.lease.why}" if isinstance(s.lease, Unavailable) else s.lease.describe()
    lines = [f"{s.pool}: {pause}"]
    if s.pool_file_refused:
        lines.append(f"pool file refused: {s.pool_file_refused} (a running autoscaler keeps its last good copy)")
    lines += [lease, "resource groups:"]
    for g in s.groups:
        top = "-" if g.max_capacity == float("inf") else f"{g.max_capacity:g}"
        stale = "  stale (draining)" if g.stale else ""
        lines.append(
            f"  {g.kind} {g.id}: target {g.target_capacity:g}, fulfilled {g.fulfilled_capacity:g}, "
            f"min {g.min_capacity:g}, max {top}{stale}"
        )
    if not s.groups and not s.group_errors:
        lines.append("  none found")
    lines += [f"  cannot read: {e}" for e in s.group_errors]
    lines += [f"  not counted (mistagged): {e}" for e in s.mistagged]
    if isinstance(s.nodes, Unavailable):
        lines.append(f"nodes: {unknown('nodes', s.nodes.why)}")
    else:
        counts = ", ".join(f"{n} {state}" for state, n in s.nodes.by_state.items() if n) or "none"
        lines.append(f"nodes: {counts}; tasks: {s.nodes.running_tasks} running, {s.nodes.pending_tasks} pending")
    if isinstance(s.utilisation, Unavailable):
        lines.append(f"utilisation: {unknown('utilisation', s.utilisation.why)}")
    else:
        u = s.utilisation
        lines.append(f"utilisation ({u.source}): {percent_line(u.ratios)} (setpoint {u.setpoint:.0%})")
    kept = s.kept.why if isinstance(s.kept, Unavailable) else describe_kept(s.kept, s.taken_at)
    lines.append(f"autoscaler state: {kept}")
    c = s.consolidation
    lines.append(f"consolidation budget: unknown: {c.why}" if isinstance(c, Unavailable) else c.describe())
    m = s.migration
    lines.append(f"node migration: unknown: {m.why}" if isinstance(m, Unavailable) else m.describe())
    if isinstance(s.decisions, Unavailable):
        lines.append(f"last decisions: {unknown('last decisions', s.decisions.why)}")
    elif not s.decisions:
        lines.append("last decisions: none recorded for this pool by the autoscaler answering at that address")
    else:
        lines.append("last decisions:")
        lines += [f"  {format_time(d.at)} {d.reason} {d.delta:+g}: {d.message}" for d in s.decisions]
    if not isinstance(s.signals, Unavailable) and s.signals.outcomes:
        lines.append(f"signals ({s.signals.source}):")
        lines += [f"  {o.describe()}" for o in s.signals.outcomes]
    if isinstance(s.health, Unavailable):
        lines.append(f"autoscaler health: {unknown('autoscaler health', s.health.why)}")
    else:
        lines.append(f"autoscaler health: {s.health.describe()}")
    return lines
