"""Metrics stores: write N points, then read a one-day window at one-minute resolution for 100 keys.

Each backend is measured next to a plain loop of the same inserts into an empty SQLite table (and,
for reads, a plain SELECT loop over that table once indexed), run on the same points in the same
run, so the ratios travel between machines. Points arrive minute by minute, every key at each
minute, as the collector writes them. DynamoDB runs over moto's server on loopback, whose Python
request handling bounds it far below real DynamoDB: it gets a smaller N (still a full day for
every key read), and its figures describe our client's overhead against moto, not AWS.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from clusterman.aws.session import AwsSettings
from clusterman.core.config import DynamoDBMetricsConfig
from clusterman.core.config import MetricType
from clusterman.datastore.dynamodb import DynamoDBStore
from clusterman.datastore.sqlite import SqliteStore
from clusterman.datastore.store import MetricsStore
from clusterman.datastore.store import Point
from clusterman.datastore.store import system_key
from clusterman.local.moto_server import FAKE_CREDENTIALS
from clusterman.local.moto_server import MotoServer

SYS = MetricType.SYSTEM_METRICS
START = 1_700_000_000
DAY_MINUTES = 1440
CHUNK = 10_000  # points per store.write, as a collector or `metrics load` batches them


def keys_for(count: int) -> list[str]:
    return [system_key("cpus_allocated", "bench", f"pool{i:03d}.kubernetes") for i in range(count)]


def rows(keys: list[str], minutes: int) -> Iterator[tuple[str, int, float]]:
    for minute in range(minutes):
        ts = START + minute * 60
        for i, key in enumerate(keys):
            yield key, ts, float((minute * 7 + i) % 1000) / 10


def baseline(directory: Path, keys: list[str], minutes: int) -> dict[str, float]:
    """A plain loop of the same inserts into an empty SQLite table, then plain indexed SELECTs."""
    conn = sqlite3.connect(directory / "plain.sqlite3", isolation_level=None)
    conn.execute("CREATE TABLE plain (key TEXT, timestamp INTEGER, value REAL)")
    started = time.perf_counter()
    conn.execute("BEGIN")
    for key, ts, value in rows(keys, minutes):
        conn.execute("INSERT INTO plain VALUES (?, ?, ?)", (key, ts, value))
    conn.execute("COMMIT")
    insert_seconds = time.perf_counter() - started
    conn.execute("CREATE INDEX plain_by_key ON plain (key, timestamp)")  # not timed: a plain table has none
    start, end = window(minutes)
    started = time.perf_counter()
    read = 0
    for key in keys:
        sql = "SELECT timestamp, value FROM plain WHERE key = ? AND timestamp BETWEEN ? AND ? ORDER BY timestamp"
        read += len(conn.execute(sql, (key, start, end)).fetchall())
    select_seconds = time.perf_counter() - started
    conn.close()
    return {
        "insert_points_per_second": len(keys) * minutes / insert_seconds,
        "select_points_per_second": read / select_seconds,
    }


def window(minutes: int) -> tuple[int, int]:
    """The last day of the data: the window ``[t - 1440 minutes, t]`` an autoscaler would read."""
    end = START + (minutes - 1) * 60
    return end - DAY_MINUTES * 60, end


def measure(store: MetricsStore, keys: list[str], minutes: int, plain: dict[str, float]) -> dict[str, Any]:
    points = (Point(SYS, key, ts, value) for key, ts, value in rows(keys, minutes))
    started = time.perf_counter()
    while chunk := list(itertools.islice(points, CHUNK)):
        store.write(chunk)
    write_seconds = time.perf_counter() - started
    start, end = window(minutes)
    started = time.perf_counter()
    got = store.read_many(SYS, keys, start, end)
    read_seconds = time.perf_counter() - started
    points_read = sum(len(series) for series in got.values())
    if points_read != len(keys) * (DAY_MINUTES + 1):
        raise RuntimeError(f"{store!r} read {points_read} points, expected {len(keys) * (DAY_MINUTES + 1)}")
    write_pps = len(keys) * minutes / write_seconds
    read_pps = points_read / read_seconds
    return {
        "points_written": len(keys) * minutes,
        "keys_read": len(keys),
        "points_read": points_read,
        "write_points_per_second": round(write_pps),
        "baseline_plain_sqlite_insert_points_per_second": round(plain["insert_points_per_second"]),
        "write_ratio_to_baseline": round(write_pps / plain["insert_points_per_second"], 3),
        "read_points_per_second": round(read_pps),
        "read_seconds": round(read_seconds, 3),
        "baseline_plain_sqlite_select_points_per_second": round(plain["select_points_per_second"]),
        "read_ratio_to_baseline": round(read_pps / plain["select_points_per_second"], 3),
    }


def run(quick: bool) -> dict[str, Any]:
    results: dict[str, Any] = {}
    sqlite_keys, sqlite_minutes = keys_for(100), (DAY_MINUTES + 60 if quick else 10_000)  # full: 1,000,000 points
    dynamo_keys, dynamo_minutes = keys_for(10 if quick else 100), DAY_MINUTES + 60
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
        directory = Path(tmp)
        (directory / "sqlite").mkdir()
        plain = baseline(directory / "sqlite", sqlite_keys, sqlite_minutes)
        store = SqliteStore(directory / "sqlite" / "metrics.sqlite3")
        results["sqlite"] = measure(store, sqlite_keys, sqlite_minutes, plain)
        store.close()

        (directory / "dynamodb").mkdir()
        plain = baseline(directory / "dynamodb", dynamo_keys, dynamo_minutes)
        os.environ.update(FAKE_CREDENTIALS)
        with MotoServer() as moto:
            # moto answers one request at a time (~1.2 ms per item queried): parallel requests only queue
            # there, so the store talks to it serially, with time to wait for a full day's query.
            settings = AwsSettings("us-west-2", moto.url)
            dynamo = DynamoDBStore(settings, DynamoDBMetricsConfig(), concurrency=1, read_timeout_seconds=120)
            dynamo.create()
            results["dynamodb_over_moto"] = measure(dynamo, dynamo_keys, dynamo_minutes, plain)
            dynamo.close()
    return results
