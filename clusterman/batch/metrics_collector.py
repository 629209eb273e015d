"""``python -m clusterman.batch.metrics_collector``: write every pool's system metrics on a timer.

Every ``batches.cluster_metrics.run_interval_seconds`` it takes each pool's snapshot from its
cluster connector and writes ``clusterman.datastore.pool_metrics.collect``'s points to the metrics
store. A pool that fails (scheduler unreachable, store down, a bug) is logged and skipped; the next
run tries again: one failing run never ends the loop. ``--once`` runs once and exits 1 if any pool
failed. ``clusterman collect-metrics`` is the same program.

A pool with groups in a cloud (``asg``, ``sfr``: each kind whose row in ``cloud/kinds.py`` is not
in-process) is read with the same cloud adapters as its autoscaler, so its capacity figures are
written and a simulated scheduler has instances to turn into nodes. Beside its writes (never
inside them) the collector applies the store's retention once an hour of wall-clock time
(``RetentionPass``).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Sequence
from pathlib import Path

from clusterman.batch.arguments import add_program_arguments
from clusterman.batch.arguments import configure_logging
from clusterman.batch.arguments import reader_left
from clusterman.batch.stopping import stop_on_signals
from clusterman.cloud.groups_view import GroupsCloudView
from clusterman.cloud.kinds import clouds_needed
from clusterman.cluster.connector import ClusterConnector
from clusterman.cluster.connector import ConnectorError
from clusterman.cluster.kubernetes import read_pods_together
from clusterman.config.loader import list_pools
from clusterman.config.loader import load_main_config
from clusterman.config.loader import load_pool_config
from clusterman.core.cloud_view import CloudView
from clusterman.core.config import MainConfig
from clusterman.core.config import MetricType
from clusterman.core.config import PoolIdentity
from clusterman.core.config_schema import ConfigError
from clusterman.datastore.pool_metrics import collect
from clusterman.datastore.store import InMemoryStore
from clusterman.datastore.store import MetricsError
from clusterman.datastore.store import MetricsStore
from clusterman.datastore.store import Point
from clusterman.datastore.store import RetentionPass
from clusterman.datastore.store import Series
from clusterman.run.budget import metrics_timeout
from clusterman.run.budget import scheduler_timeout
from clusterman.tree.liveness import Heartbeat
from clusterman.tree.liveness import LivenessRules
from clusterman.tree.liveness import heartbeat_problem
from clusterman.wiring.build import cloud_for
from clusterman.wiring.metrics_store import open_store as open_configured_store
from clusterman.wiring.schedulers import connector_for_pool
from clusterman.wiring.setup import PoolSetup

log = logging.getLogger(__name__)

Pool = tuple[PoolIdentity, ClusterConnector]


class StdoutStore(MetricsStore):
    """Prints each point as one JSON line: to see what would be written (write only)."""

    def write(self, points: Iterable[Point]) -> None:
        for p in points:
            print(json.dumps({"type": p.metric_type.value, "key": p.key, "timestamp": p.timestamp, "value": p.value}))
        sys.stdout.flush()

    def __repr__(self) -> str:
        return "stdout"

    def read(self, metric_type: MetricType, key: str, start: int, end: int) -> Series:
        raise MetricsError("the stdout store is write-only")

    def keys(self, metric_type: MetricType, prefix: str = "", regex: str | None = None) -> list[str]:
        raise MetricsError("the stdout store is write-only")


# --store NAME opens STORES[NAME](main config): the configured backend (srv-configs' ``metrics``
# block: SQLite, DynamoDB), or, for trying the collector out, stdout or this process's memory.
STORES: dict[str, Callable[[MainConfig], MetricsStore]] = {
    "config": lambda main: open_configured_store(
        main, timeout_seconds=metrics_timeout(main.batches.cluster_metrics.run_interval_seconds)
    ),
    "memory": lambda main: InMemoryStore(),
    "stdout": lambda main: StdoutStore(),
}
DEFAULT_STORE = "config"


def open_store(name: str, main: MainConfig) -> MetricsStore:
    factory = STORES.get(name)
    if factory is None:
        raise ConfigError("--store", name, f"unknown metrics store (known: {', '.join(sorted(STORES))})")
    return factory(main)


class WholeCloud:
    """A simulated scheduler's nodes are its groups' instances: when a group cannot be read, its
    nodes would look gone and the run would write zeros, so the run fails instead, saying why."""

    def __init__(self, cloud: GroupsCloudView) -> None:
        self.cloud = cloud

    def cloud_view(self, now: float) -> CloudView:
        reading = self.cloud.read(now)
        if reading.unreadable:
            raise ConnectorError("cannot read its resource groups: " + "; ".join(map(str, reading.unreadable)))
        return reading.view


def collect_once(
    pools: Sequence[Pool],
    store: MetricsStore,
    clock: Callable[[], float] = time.time,
    retention: Callable[[float], int] | None = None,
    wrote: Callable[[PoolIdentity, int], None] | None = None,
) -> int:
    """Snapshot every pool and write its points, then run ``retention`` (a ``RetentionPass``);
    returns how many pools failed (each is logged). ``wrote`` hears how many points each pool gave."""
    failures = 0
    for identity, connector in pools:
        try:
            snapshot = connector.snapshot(clock())
            if snapshot.stale:  # points from a view that may be old would look fresh to the signals
                raise ConnectorError(snapshot.stale)
            points = collect(snapshot, identity)
            store.write(points)
            log.info("%s: wrote %d points", identity, len(points))
            if wrote is not None:
                wrote(identity, len(points))
        except BrokenPipeError:  # the stdout store's reader left (``| head``): the command ends, quietly
            raise
        except (ConnectorError, MetricsError) as e:
            failures += 1
            log.error("%s: no metrics this run: %s", identity, e)
        except Exception:  # a bug must not stop the other pools, nor the next run
            failures += 1
            log.exception("%s: no metrics this run: unexpected error", identity)
    if retention is not None:
        retention(clock())
    return failures


def run_forever(
    pools: Sequence[Pool],
    store: MetricsStore,
    interval_seconds: float,
    stop: threading.Event,
    clock: Callable[[], float] = time.time,
    retention: Callable[[float], int] | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    heartbeat: Callable[[float], None] = lambda finished_at: None,
) -> None:
    """Run every ``interval_seconds`` on a fixed grid from the first run; a run that overruns skips
    the slots it missed rather than bunching runs up. Returns when ``stop`` is set. The grid is on
    ``monotonic``: a wall ``clock`` stepped back does not stop the metrics for the length of the step
    (points carry the wall clock's time). ``heartbeat`` is called after every run, failed or not: the
    loop goes on (a restart would not reach an API that does not answer)."""
    next_run = monotonic()
    while not stop.is_set():
        collect_once(pools, store, clock, retention)
        heartbeat(clock())
        next_run += interval_seconds
        late = monotonic() - next_run
        if late > 0:
            next_run += math.ceil(late / interval_seconds) * interval_seconds
        stop.wait(max(0.0, next_run - monotonic()))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster", default=os.environ.get("CMAN_CLUSTER"), help="the cluster (default: $CMAN_CLUSTER)"
    )
    parser.add_argument(
        "--pool",
        action="append",
        default=[],
        metavar="POOL[.SCHEDULER]",
        help="collect only this pool (repeatable; default: every pool file of the cluster)",
    )
    parser.add_argument("--once", action="store_true", help="run once and exit (status 1 if a pool failed)")
    parser.add_argument(
        "--heartbeat-file",
        metavar="PATH",
        help="rewrite PATH after every run, for --check-heartbeat (a liveness probe) to judge",
    )
    parser.add_argument(
        "--check-heartbeat",
        metavar="PATH",
        help="only check the heartbeat a collector on this host writes to PATH: exit 1, saying why, "
        f"when no run finished for {LivenessRules().stale_periods:g} intervals (stopped or hung), else 0",
    )
    parser.add_argument(
        "--store",
        default=DEFAULT_STORE,
        help=f"where points go: {', '.join(sorted(STORES))} (default: {DEFAULT_STORE})",
    )


def load_pools(main: MainConfig, cluster: str, wanted: Sequence[str], directory: str | None = None) -> list[Pool]:
    """The pools to collect, each with its connector. A pool whose config is bad is logged and
    left out (the others are still collected); no pool at all is an error."""
    directory = directory or main.cluster_config_directory
    identities = list_pools(directory, cluster)
    if wanted:
        identities = [i for i in identities if i.pool in wanted or f"{i.pool}.{i.scheduler.value}" in wanted]
        missing = set(wanted) - {i.pool for i in identities} - {f"{i.pool}.{i.scheduler.value}" for i in identities}
        if missing:
            raise ConfigError(f"{directory}/{cluster}", "", f"no pool file for {', '.join(sorted(missing))}")
    pools: list[Pool] = []
    timeout = scheduler_timeout(main.batches.cluster_metrics.run_interval_seconds)  # a silent API: one run at most
    for identity in identities:
        try:
            pool_config = load_pool_config(main, identity, directory)
            in_a_cloud = bool(clouds_needed(pool_config.resource_groups))
            cloud = cloud_for(PoolSetup(main, identity, pool_config)) if in_a_cloud else None
            whole = identity.scheduler.traits.nodes_are_instances  # a group not read fails the pool's run
            source = WholeCloud(cloud) if cloud is not None and whole else cloud
            connector = connector_for_pool(main, identity, pool_config, cloud=source, timeout_seconds=timeout)
            pools.append((identity, connector))
        except (ConfigError, ValueError) as e:
            log.error("%s: not collected: %s", identity, e)
    if not pools:
        raise ConfigError(f"{directory}/{cluster}", "", "no pool to collect metrics for")
    read_pods_together(connector for _, connector in pools)  # one list and watch of a cluster's pods
    return pools


def check_heartbeat(path: Path) -> int:
    problem = heartbeat_problem(path, time.time(), time.monotonic(), LivenessRules())
    if problem:
        print(f"metrics_collector: {problem}", file=sys.stderr)
    return 1 if problem else 0


def run(args: argparse.Namespace) -> int:
    if args.check_heartbeat:
        return check_heartbeat(Path(args.check_heartbeat))
    if not args.cluster:
        raise ConfigError("--cluster", "", "required (or set $CMAN_CLUSTER)")
    main = load_main_config(args.env_config_path)
    pools = load_pools(main, args.cluster, args.pool, args.cluster_config_directory)
    store = open_store(args.store, main)
    if args.store == "memory":
        log.warning("--store memory: points stay in this process and are lost when it exits")
    try:
        retention = RetentionPass(store)
        if args.once:

            def wrote(identity: PoolIdentity, count: int) -> None:  # stdout may be the points themselves
                print(f"{identity}: wrote {count} points to {store!r}", file=sys.stderr)

            return 1 if collect_once(pools, store, retention=retention, wrote=wrote) else 0
        stop = stop_on_signals(log, "stopping after this run")
        interval = main.batches.cluster_metrics.run_interval_seconds
        beat = _heartbeat_writer(Path(args.heartbeat_file), interval) if args.heartbeat_file else lambda at: None
        run_forever(pools, store, interval, stop, retention=retention, heartbeat=beat)
        return 0
    finally:
        for _, connector in pools:
            connector.close()
        store.close()


def _heartbeat_writer(path: Path, interval_seconds: float) -> Callable[[float], None]:
    def beat(finished_at: float) -> None:
        try:
            Heartbeat.this_process(finished_at, interval_seconds).write(path)
        except OSError as e:  # the probe then says the loop stopped: say why here
            log.error("cannot write the heartbeat file: %s", e)

    return beat


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m clusterman.batch.metrics_collector", description=__doc__)
    add_program_arguments(parser)
    add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        return run(args)
    except BrokenPipeError:  # ``--store stdout | head``
        return reader_left()
    except (ConfigError, MetricsError, OSError, ValueError) as e:
        print(f"metrics_collector: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
