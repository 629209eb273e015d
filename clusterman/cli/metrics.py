"""``clusterman metrics read|keys|write|load|init``: look into the metrics store and fill it by hand."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Iterable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from clusterman.batch.arguments import time_argument
from clusterman.config.loader import load_main_config
from clusterman.config.loader import load_pool_config
from clusterman.config.loader import parse_scheduler
from clusterman.core.config import MetricsBackend
from clusterman.core.config import MetricType
from clusterman.core.config import PoolIdentity
from clusterman.core.timestamps import format_time
from clusterman.core.timestamps import parse_time
from clusterman.datastore.datafile import count_points
from clusterman.datastore.datafile import points_of
from clusterman.datastore.datafile import read_metrics_file
from clusterman.datastore.sqlite import SqliteStore
from clusterman.datastore.store import MetricsStore
from clusterman.datastore.store import Point
from clusterman.datastore.store import Value
from clusterman.datastore.store import split_key
from clusterman.errors import reading_input
from clusterman.wiring.metrics_store import open_store

WRITE_CHUNK = 10_000
TYPES = [t.value for t in MetricType]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("metrics", help="read and write the metrics datastore")
    actions = parser.add_subparsers(dest="metrics_command", metavar="ACTION", required=True)

    read = actions.add_parser("read", help="print one key's window")
    _store_options(read)
    read.add_argument("--type", required=True, choices=TYPES, help="the metric type")
    read.add_argument("--key", required=True, help="the store key, e.g. 'cpus_allocated|cluster=c,pool=p.mesos'")
    read.add_argument("--minutes", type=int, default=60, help="the window's length (default 60)")
    read.add_argument(
        "--end", type=time_argument, default=None, help="the window's end, Unix seconds or ISO 8601 (default: now)"
    )
    read.add_argument("--json", action="store_true", help="print JSON instead of lines")
    read.set_defaults(func=run_read)

    keys = actions.add_parser("keys", help="list keys of a metric type")
    _store_options(keys)
    keys.add_argument("--type", required=True, choices=TYPES)
    keys.add_argument("--prefix", default="", help="only keys starting with this")
    keys.add_argument("--regex", default=None, help="only keys fully matching this regular expression")
    keys.set_defaults(func=run_keys)

    write = actions.add_parser("write", help="write one point")
    _store_options(write)
    write.add_argument("--type", required=True, choices=TYPES)
    write.add_argument("--key", required=True)
    write.add_argument("--value", required=True, help="a number, or a JSON mapping such as '{\"<m5.large, a>\": 3}'")
    write.add_argument("--timestamp", default=None, help="Unix seconds or ISO 8601 (default: now)")
    write.set_defaults(func=run_write)

    load = actions.add_parser("load", help="write a metrics file (from generate-data or Clusterman) into the store")
    _store_options(load)
    load.add_argument("--input", required=True, type=Path, help="a .json.gz or .json metrics file")
    load.set_defaults(func=run_load)

    init = actions.add_parser("init", help="create the SQLite file or the DynamoDB tables")
    _store_options(init)
    init.set_defaults(func=run_init)


def _store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sqlite", type=Path, default=None, help="use this SQLite file, not the configured store")
    parser.add_argument("--cluster", default=None, help="the pool's cluster (the prometheus backend needs it)")
    parser.add_argument("--pool", default=None, help="the pool (the prometheus backend needs it)")
    parser.add_argument("--scheduler", default="kubernetes", help="the pool's scheduler (default kubernetes)")


def store_from_args(args: argparse.Namespace) -> MetricsStore:
    if args.sqlite is not None:
        return SqliteStore(args.sqlite)
    main = load_main_config(args.env_config_path)
    if main.metrics.backend is not MetricsBackend.PROMETHEUS or not (args.cluster and args.pool):
        return open_store(main)  # a Prometheus store without a pool says what it is missing
    identity = PoolIdentity(args.cluster, args.pool, parse_scheduler(args.scheduler))
    return open_store(main, load_pool_config(main, identity, args.cluster_config_directory), identity)


def run_read(args: argparse.Namespace) -> int:
    end = int(args.end) if args.end is not None else int(time.time())
    start = end - args.minutes * 60
    store = store_from_args(args)
    try:
        series = store.read(MetricType(args.type), args.key, start, end)
    finally:
        store.close()
    if args.json:
        body = {"type": args.type, "key": args.key, "start": start, "end": end, "points": [list(p) for p in series]}
        print(json.dumps(body))
        return 0
    if not series:
        print(f"no points for {args.key} between {format_time(start)} and {format_time(end)}", file=sys.stderr)
    for ts, value in series:
        text = json.dumps(value, sort_keys=True) if isinstance(value, dict) else f"{value:g}"
        print(f"{format_time(ts)}  {ts}  {text}")
    return 0


def run_keys(args: argparse.Namespace) -> int:
    store = store_from_args(args)
    try:
        with reading_input():  # the --regex
            keys = store.keys(MetricType(args.type), args.prefix, args.regex)
        for key in keys:
            print(key)
    finally:
        store.close()
    return 0


def parse_value(text: str) -> Value | Any:
    """A number or a JSON mapping; anything else goes to Point, which names the key in its refusal."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def check_key(metric_type: MetricType, key: str) -> None:
    """Refuse a key no reader would ever look up: signals read system metrics and metadata by
    their dimensions, app metrics by their ``<app>,`` prefix."""
    if not key.strip():
        raise ValueError(f"--key: the {metric_type.value} key is empty")
    if metric_type is MetricType.APP_METRICS:
        app, _, name = key.partition(",")
        if not app or not name:
            raise ValueError(f"--key {key!r}: app metrics are keyed <app>,<name> (e.g. 'batchjobs,queue_depth')")
        return
    name, dimensions = split_key(key)
    if not name or not dimensions:
        raise ValueError(
            f"--key {key!r}: {metric_type.value} keys carry dimensions, "
            f"e.g. '{name or 'cpus_allocated'}|cluster=<cluster>,pool=<pool>.<scheduler>' (signals read them by those)"
        )


def run_write(args: argparse.Namespace) -> int:
    with reading_input():
        timestamp = int(time.time()) if args.timestamp is None else int(parse_time(args.timestamp, "--timestamp"))
        metric_type = MetricType(args.type)
        check_key(metric_type, args.key)
        point = Point(metric_type, args.key, timestamp, parse_value(args.value))
    store = store_from_args(args)
    try:
        store.write([point])
    finally:
        store.close()
    return 0


def chunks(points: Iterable[Point], size: int) -> Iterator[list[Point]]:
    it = iter(points)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def run_load(args: argparse.Namespace) -> int:
    with reading_input():
        data = read_metrics_file(args.input)
    store = store_from_args(args)
    try:
        for chunk in chunks(points_of(data), WRITE_CHUNK):
            store.write(chunk)
    finally:
        store.close()
    keys = sum(len(by_key) for by_key in data.values())
    print(f"loaded {count_points(data)} points of {keys} keys from {args.input} into {store!r}")
    if store.retention_seconds:
        cutoff = time.time() - store.retention_seconds
        old = sum(1 for by_key in data.values() for series in by_key.values() for ts, _ in series if ts < cutoff)
        if old:
            days = store.retention_seconds / 86400
            print(
                f"note: {old} points are older than the retention ({days:g} days) and will be removed by the "
                "store's next retention pass (metrics.retention_days; 0 keeps everything)"
            )
    return 0


def run_init(args: argparse.Namespace) -> int:
    store = store_from_args(args)
    try:
        created = store.create()
    finally:
        store.close()
    print(f"created {', '.join(created)}" if created else f"{store!r}: already set up")
    return 0
