"""Read and check everything a simulation needs, before it starts: every problem is one line.

Inputs: the main config (the default signal, the autoscaling defaults), one pool file, and metrics
files (ours from ``generate-data`` and ``metrics``, or Clusterman's simulator files). Which pool
the files describe comes from ``--cluster``/``--pool``/``--scheduler``, else the pool file's name
(``<pool>.<scheduler>``), else the files themselves when they hold one pool. The run spans the
pool's demand series unless ``--start``/``--end`` say otherwise. Refused, each naming the file,
key or value: a file that is not a metrics file or whose time runs backwards, the same series in
two files at the same times, a pool config the autoscaler would reject, an instance type with no
size or price, a signal that cannot be loaded, no demand for the pool, an empty time range.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from pathlib import Path

from clusterman.cloud.simulated_group import SimulatedMarket
from clusterman.cloud.simulated_group import default_task
from clusterman.cloud.simulated_group import groups_from_config
from clusterman.cloud.simulated_group import markets_from_config
from clusterman.config.loader import load_pool_file
from clusterman.config.loader import parse_scheduler
from clusterman.core.config import MainConfig
from clusterman.core.config import MetricsBackend
from clusterman.core.config import MetricType
from clusterman.core.config import PoolConfig
from clusterman.core.config import PoolIdentity
from clusterman.core.config import split_scheduler
from clusterman.core.resources import Resources
from clusterman.core.timestamps import parse_time
from clusterman.datastore.datafile import MetricsData
from clusterman.datastore.datafile import read_metrics_file
from clusterman.datastore.store import MetricsError
from clusterman.datastore.store import split_key
from clusterman.datastore.store import spot_price_key
from clusterman.errors import UserError
from clusterman.signals.specs import default_signal_spec
from clusterman.simulator.clock import STEP_SECONDS
from clusterman.simulator.clock import Steps
from clusterman.simulator.prices import spot_series
from clusterman.simulator.signals import SignalMode
from clusterman.simulator.simulation import Scenario
from clusterman.simulator.workload import demand_keys
from clusterman.simulator.workload import demand_points
from clusterman.wiring.metrics_store import open_store
from clusterman.wiring.metrics_store import sqlite_path
from clusterman.wiring.setup import PoolSetup
from clusterman.wiring.trace_workload import trace_series


class SimulationInputError(UserError):
    """A simulation's input cannot be used; the message names the file, key or argument."""


@dataclasses.dataclass(frozen=True)
class Request:
    """What the command line asked for (``None``: not given)."""

    pool_config: Path
    metrics_files: Sequence[Path]
    cluster: str | None = None
    pool: str | None = None
    scheduler: str | None = None
    start: str | None = None
    end: str | None = None
    join_delay: tuple[float, float] | None = None  # mean, standard deviation (seconds)
    seed: int | None = None
    signals: SignalMode = SignalMode.IN_PROCESS


def load_scenario(main: MainConfig, request: Request) -> Scenario:
    metrics = read_metrics(request.metrics_files)
    source = str(request.pool_config)
    pool = with_overrides(load_pool_file(request.pool_config), request)
    identity = resolve_identity(request, metrics, main)
    points = demand_points(metrics, identity)
    pool, points, notes = with_trace(pool, points, request)
    setup = PoolSetup(main, identity, pool)
    setup.policy  # noqa: B018 - refuse now what the autoscaler would refuse
    if not setup.internal:
        default_signal_spec(main)
    groups = groups_from_config(identity, pool, lambda: 0.0, source, every_kind=True)
    if not points and not pool.simulation.tasks:
        expected = next(iter(demand_keys(identity)))
        found = ", ".join(str(p) for p in sorted(pools_in(metrics), key=str)) or "none"
        files = ", ".join(map(str, request.metrics_files)) or "no --metrics-data-files"
        raise SimulationInputError(
            f"{files}: no demand for {identity}: expected a series such as {expected} (pools in the files: "
            f"{found}), or a pool file with simulation.trace or tasks"
        )
    first = int(points[0][0]) if points else None
    last = int(points[-1][0]) + STEP_SECONDS if points else None
    start = _time("--start", request.start, first)
    end = _time("--end", request.end, last)
    if end <= start:
        raise SimulationInputError(f"the run must end after it starts (--start {start}, --end {end})")
    try:
        task = pool.simulation.demand_task or default_task(markets_from_config(pool.simulation, source))
    except ValueError as e:
        raise SimulationInputError(f"{source}: {e}") from e
    spot = [m for g in groups for m in g.markets if m.spot]
    notes += stored_spot_prices(main, pool, identity, metrics, spot, start, end)
    return Scenario(setup, source, metrics, points, Steps(start, end), task, request.signals, notes)


STORED_PRICES_LOOKBACK_SECONDS = 86400  # the collector writes every market's price at least daily
STORE_TIMEOUT_SECONDS = 10.0


def stored_spot_prices(
    main: MainConfig,
    pool: PoolConfig,
    identity: PoolIdentity,
    metrics: MetricsData,
    markets: Sequence[SimulatedMarket],
    start: int,
    end: int,
) -> tuple[str, ...]:
    """Spot prices the metrics files lack, from the metrics store the spot price collector writes
    (``batches.spot_prices``), added to ``metrics``' metadata: the ledger then bills those markets
    at them. A store that is not there is no note; one that cannot be read is one, and those
    markets are billed at their on-demand price as before."""
    have = spot_series(metrics)
    wanted = sorted({(m.instance_type, m.availability_zone) for m in markets} - have.keys())
    if not wanted or (main.metrics.backend is MetricsBackend.SQLITE and not sqlite_path(main).exists()):
        return ()
    keys = [spot_price_key(t, z) for t, z in wanted]
    store = None
    try:
        store = open_store(main, pool, identity, timeout_seconds=STORE_TIMEOUT_SECONDS)
        found = store.read_many(MetricType.METADATA, keys, start - STORED_PRICES_LOOKBACK_SECONDS, end)
    except MetricsError as e:
        return (f"spot prices not read from the metrics store ({e}): spot markets are billed on demand",)
    finally:
        if store is not None:
            store.close()
    found = {key: series for key, series in found.items() if series}
    if not found:
        return ()
    metrics.setdefault(MetricType.METADATA, {}).update(found)
    return (f"spot prices of {len(found)} of {len(keys)} spot markets read from {store!r}",)


def with_trace(
    pool: PoolConfig, points: list[tuple[float, Resources]], request: Request
) -> tuple[PoolConfig, list[tuple[float, Resources]], tuple[str, ...]]:
    """The pool's ``simulation.trace`` (``make run``'s workload) as the run's demand when the metrics
    files give none, at its own pace (its ``speedup`` is for a live replay). Either way the trace is
    not also replayed beside the files' demand: that counted the demand twice, under the same task ids."""
    trace = pool.simulation.trace
    if trace is None:
        return pool, points, ()
    pool = dataclasses.replace(pool, simulation=dataclasses.replace(pool.simulation, trace=None))
    if points:
        return (
            pool,
            points,
            (f"{request.pool_config}: simulation.trace is not replayed: the metrics files give the demand",),
        )
    path = Path(trace.file)  # absolute: the loader resolved it against the pool file
    resource, series = trace_series(path, trace.metric)
    replayed = [(t, Resources(**{resource: max(0.0, v)})) for t, v in series]
    return pool, replayed, (f"the demand is {path}'s {trace.metric} (simulation.trace), at its own pace",)


def read_metrics(paths: Sequence[Path]) -> MetricsData:
    """Every file's series; a series split over several files is joined, unless they overlap."""
    merged: MetricsData = {}
    seen_in: dict[tuple[MetricType, str], str] = {}
    for path in paths:
        try:
            data = read_metrics_file(path, ordered=True)
        except (OSError, ValueError) as e:
            raise SimulationInputError(str(e)) from e
        for metric_type, by_key in data.items():
            into = merged.setdefault(metric_type, {})
            for key, series in by_key.items():
                if key not in into:
                    into[key], seen_in[(metric_type, key)] = series, str(path)
                    continue
                joined = sorted([*into[key], *series], key=lambda p: p[0])
                if any(a[0] == b[0] for a, b in itertools.pairwise(joined)):
                    raise SimulationInputError(
                        f"{metric_type.value}: {key}: given by both {seen_in[(metric_type, key)]} and {path} "
                        "for the same times"
                    )
                into[key] = joined
    return merged


def pools_in(data: MetricsData) -> set[PoolIdentity]:
    """The pools the files' system metrics and metadata describe (``pool=<name>.<scheduler>`` keys)."""
    found = set()
    for metric_type in (MetricType.SYSTEM_METRICS, MetricType.METADATA):
        for key in data.get(metric_type, {}):
            dims = split_key(key)[1]
            name, scheduler = split_scheduler(dims.get("pool", ""))
            if "cluster" in dims and scheduler is not None:
                found.add(PoolIdentity(dims["cluster"], name, scheduler))
    return found


def resolve_identity(request: Request, data: MetricsData, main: MainConfig) -> PoolIdentity:
    name, named = split_scheduler(request.pool_config.name)
    pool = request.pool or (name if named else None)
    scheduler = parse_scheduler(request.scheduler) if request.scheduler else named
    # a pool file where the srv-configs keep it, <directory>/<cluster>/<pool>.<scheduler>, names its cluster
    in_cluster = request.pool_config.resolve().parent.name
    cluster = request.cluster or (in_cluster if in_cluster in main.clusters and not pools_in(data) else None)
    if cluster and pool and scheduler:
        return PoolIdentity(cluster, pool, scheduler)
    candidates = [
        p
        for p in pools_in(data)
        if (request.cluster is None or p.cluster == request.cluster)
        and (pool is None or p.pool == pool)
        and (scheduler is None or p.scheduler is scheduler)
    ]
    if len(candidates) == 1:
        return candidates[0]
    found = ", ".join(sorted(str(p) for p in pools_in(data))) or "none"
    raise SimulationInputError(
        f"cannot tell which pool to simulate: give --cluster, --pool and --scheduler (the metrics files "
        f"describe: {found})"
    )


def with_overrides(pool: PoolConfig, request: Request) -> PoolConfig:
    """The pool config with the command line's seed and join delay in its ``simulation`` block."""
    sim = pool.simulation
    if request.seed is not None:
        sim = dataclasses.replace(sim, seed=request.seed)
    if request.join_delay is not None:
        mean, stdev = request.join_delay
        if not (0 <= mean < float("inf") and 0 <= stdev < float("inf")):
            raise SimulationInputError(f"--join-delay: expected two finite numbers >= 0, got {mean:g} {stdev:g}")
        sim = dataclasses.replace(sim, join_delay_seconds=mean, join_delay_stdev_seconds=stdev)
    return dataclasses.replace(pool, simulation=sim)


def _time(flag: str, given: str | None, default: int | None) -> int:
    if given is None:
        if default is None:
            raise SimulationInputError(f"{flag}: required when the metrics files hold no demand for the pool")
        return default
    try:
        return int(parse_time(given))
    except ValueError as e:
        raise SimulationInputError(f"{flag}: {e}") from e
