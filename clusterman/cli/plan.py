"""``clusterman plan``: what would the autoscaler do now, and why?

``--snapshot FILE`` reads one JSON document (docs/scaling.md, "clusterman plan"); ``--cluster``
and ``--pool`` read the live pool instead, as its next run would (its groups, its nodes, its
signals, the state kept between runs: a dry run of the autoscaler's own run, which changes
nothing and takes no lease). Either way the decision is printed as JSON. ``--write-snapshot FILE``
writes what the live pool was read as, a document ``--snapshot`` replays to the same decision:
the file to attach to a bug report. A bad document, or a pool that cannot be read, is one line on
stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clusterman.batch.arguments import add_pool_arguments
from clusterman.batch.arguments import add_timeout_argument
from clusterman.cli.plan_input import PlanInputError
from clusterman.cli.plan_input import load_plan
from clusterman.cli.plan_input import plan_document
from clusterman.decision.decide import decide
from clusterman.decision.result import Decision
from clusterman.errors import OperationalError
from clusterman.errors import UserError
from clusterman.run.demand_source import DemandSource
from clusterman.wiring.setup import PoolSetup

SIGNALS = ("in-process", "runners")


class NoPlan(OperationalError):
    """The live pool's run ended before it decided (the pool or its demand could not be read)."""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "plan", help="print what a pool's next run would decide (read live, or from a snapshot), and why"
    )
    parser.add_argument("--snapshot", type=Path, help="the JSON document (- for stdin)")
    add_pool_arguments(parser)
    parser.add_argument(
        "--signals",
        choices=SIGNALS,
        default="in-process",
        help="with --cluster and --pool: run the pool's signals in this process from the clusterman_signals "
        "installed here (default; an app whose signal is not installed here falls back to the default signal, "
        "as in the autoscaler), or ask the runners of the running tree (on its host)",
    )
    parser.add_argument(
        "--write-snapshot", type=Path, metavar="FILE", help="with --cluster and --pool: write the pool as read"
    )
    add_timeout_argument(parser, 30.0, "with --cluster and --pool: seconds for the read, as a run's budget")
    parser.set_defaults(func=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    live = bool(args.cluster or args.pool)
    if args.snapshot is not None and live:
        raise UserError("give --snapshot FILE, or --cluster and --pool to read a live pool, not both")
    if args.snapshot is None and not live:
        raise UserError("give --snapshot FILE (a document, docs/scaling.md), or --cluster and --pool to read one")
    if args.write_snapshot is not None and not live:
        raise UserError("--write-snapshot writes a live pool as read: give --cluster and --pool")
    decision = plan_live(args) if live else plan_document_file(args.snapshot)
    print(json.dumps(decision.as_json(), indent=2, ensure_ascii=False))
    return 0


def plan_document_file(path: Path) -> Decision:
    source = "stdin" if str(path) == "-" else str(path)
    try:
        text = sys.stdin.read() if source == "stdin" else path.read_text()
    except OSError as e:
        raise PlanInputError(source, "", f"cannot read: {e.strerror}") from e
    plan = load_plan(text, source, default_now=time.time())
    return decide(plan.snapshot, plan.requests, plan.policy, plan.state, plan.now, plan.holds, plan.unseen)


def plan_live(args: argparse.Namespace) -> Decision:
    """The pool's next run, as a dry run in this process: its decision (and, with
    ``--write-snapshot``, its inputs written as a plan document)."""
    from clusterman.batch.arguments import resolve_identity
    from clusterman.simulator.quiet_recorder import QuietRecorder
    from clusterman.wiring.build import build_cycle
    from clusterman.wiring.build import demand_for

    target = resolve_identity(args)
    setup = target.setup()
    seen: dict[str, Any] = {}

    def recorded(*inputs: Any, **more: Any) -> Decision:
        seen["inputs"] = inputs
        return decide(*inputs, **more)

    demand = in_process_demand(setup, args.timeout) if args.signals == "in-process" else None
    demand = demand or demand_for(setup, budget_seconds=args.timeout)
    recorder = QuietRecorder(setup.identity.cluster, setup.identity.pool)
    cycle = build_cycle(
        setup, recorder, dry_run=True, demand=demand, budget_seconds=args.timeout, decider=recorded, one_run=True
    )
    try:
        report = cycle.run_once(time.time())
    finally:
        cycle.close()
    if report.decision is None or "inputs" not in seen:
        raise NoPlan(f"{setup.identity}: no decision: the run ended {report.outcome.value}: {report.message}")
    if args.write_snapshot is not None:
        snapshot, requests, _, state, now, holds, unseen = seen["inputs"][:7]
        config = pool_config(setup, target.pool_file, args.env_config_path)
        document = plan_document(config, snapshot, requests, state, now, holds, unseen)
        try:
            args.write_snapshot.write_text(json.dumps(document, indent=1) + "\n")
        except OSError as e:
            raise UserError(f"{args.write_snapshot}: cannot write: {e.strerror or e}") from e
        print(
            f"wrote {args.write_snapshot}: clusterman plan --snapshot {args.write_snapshot} replays it", file=sys.stderr
        )
    decision: Decision = report.decision
    return decision


def in_process_demand(setup: PoolSetup, timeout: float) -> DemandSource | None:
    """The pool's signals run in this process (``--signals in-process``), reading the pool's
    metrics store: as the simulator runs them. An internal pool asks no signal."""
    from clusterman.run.budget import metrics_timeout
    from clusterman.run.demand_source import SignalDemand
    from clusterman.signals.evaluator import SignalEvaluator
    from clusterman.signals.specs import app_signal_specs
    from clusterman.signals.specs import default_signal_spec
    from clusterman.simulator.signals import in_process
    from clusterman.wiring.metrics_store import open_store

    if setup.internal:
        return None
    evaluator = SignalEvaluator(
        setup.identity,
        default_signal_spec(setup.main),
        app_signal_specs(setup.pool, setup.identity),
        lambda spec: in_process(setup.identity, spec),
    )
    store = open_store(setup.main, setup.pool, setup.identity, metrics_timeout(timeout))
    return SignalDemand(evaluator, store, setup.policy)


def pool_config(setup: PoolSetup, pool_file: Path, main_path: str) -> Mapping[str, Any]:
    """The document's ``config``: the pool file's blocks as written (``pool_file``: the one the
    setup was read from), the main file's defaults, and what else makes the policy the pool's (its
    draining, its scheduler)."""
    from clusterman.config.loader import read_pool_file
    from clusterman.config.loader import read_yaml

    raw = read_pool_file(pool_file)
    main = read_yaml(main_path)
    draining = setup.pool.draining
    return {
        "scaling_limits": raw.get("scaling_limits") or {},
        "autoscaling": raw.get("autoscaling") or {},
        "defaults": main.get("autoscaling") or {},
        "draining_enabled": setup.pool.draining_enabled,
        "draining": {
            "draining_time_threshold_seconds": draining.draining_time_threshold_seconds,
            "redraining_delay_seconds": draining.redraining_delay_seconds,
            "force_terminate": draining.force_terminate,
        },
        "scheduler": setup.identity.scheduler.value,
    }
