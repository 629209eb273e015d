"""The embedded metrics store: one SQLite file under the state directory.

Layout mirrors Clusterman's DynamoDB tables: one table per metric type, keyed by (key, timestamp),
so a window read is one range scan of the primary key. A number is stored as a REAL, a mapping
(``fulfilled_capacity`` per market) as its JSON text. A small ``series`` table lists the keys, so
``keys()`` needs no scan of the points.

Concurrency: the file is in WAL mode, so one writer (the collector) and several readers (the
autoscaler, ``clusterman metrics read``) work at once; readers see the last committed write and
every ``read_many`` is one consistent snapshot. A writer that finds the file locked waits up to
``busy_timeout_seconds`` and then raises ``MetricsError``, as does every other SQLite failure.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import urllib.parse
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from typing import TypeVar

from clusterman.config.model import MetricType
from clusterman.metrics.store import MetricsError
from clusterman.metrics.store import MetricsStore
from clusterman.metrics.store import Point
from clusterman.metrics.store import Series
from clusterman.metrics.store import Value
from clusterman.metrics.store import matching_keys

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
PRUNE_EVERY_SECONDS = 3600  # of data time: retention is applied at most once per hour of points written
T = TypeVar("T")

_SCHEMA = [
    *(
        f"CREATE TABLE IF NOT EXISTS {t.value} "
        "(key TEXT NOT NULL, timestamp INTEGER NOT NULL, value NOT NULL, PRIMARY KEY (key, timestamp)) WITHOUT ROWID"
        for t in MetricType
    ),
    "CREATE TABLE IF NOT EXISTS series "
    "(metric_type TEXT NOT NULL, key TEXT NOT NULL, PRIMARY KEY (metric_type, key)) WITHOUT ROWID",
    f"PRAGMA user_version = {SCHEMA_VERSION}",
]


def _encode(value: dict[str, float]) -> str:
    return json.dumps(value, sort_keys=True)


def _decode(stored: Any) -> Value:
    if isinstance(stored, str):
        decoded: dict[str, float] = json.loads(stored)
        return decoded
    return float(stored)


class SqliteStore(MetricsStore):
    """``SqliteStore(path)``; the file is opened on first use and created by the first write."""

    def __init__(self, path: str | os.PathLike[str], retention_days: int = 0, busy_timeout_seconds: float = 10.0):
        self.path = Path(path)
        self.retention_seconds = retention_days * 86400
        self.busy_timeout_seconds = busy_timeout_seconds
        self._conn: sqlite3.Connection | None = None
        self._pruned_at: int | None = None  # newest data timestamp at the last retention pass

    # -- connection ---------------------------------------------------------------------------

    def _connect(self, create: bool) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        if create:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise MetricsError(f"{self.path}: cannot create the metrics directory: {e.strerror}") from e
        elif not self.path.exists():
            raise MetricsError(
                f"{self.path}: no metrics database here (the metrics collector or `clusterman metrics load` "
                "creates it; check metrics.sqlite_path and state_directory)"
            )
        uri = f"file:{urllib.parse.quote(str(self.path))}?mode={'rwc' if create else 'rw'}"
        conn = self._guard(
            "open", lambda: sqlite3.connect(uri, uri=True, timeout=self.busy_timeout_seconds, isolation_level=None)
        )
        try:
            self._guard("open", lambda: self._prepare(conn, create))
        except MetricsError:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _prepare(self, conn: sqlite3.Connection, create: bool) -> None:
        conn.execute("PRAGMA synchronous = NORMAL")  # safe with WAL: a crash loses at most the last commits
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise MetricsError(f"{self.path}: written by a newer clusterman (schema {version}, this one reads 1)")
        if version == SCHEMA_VERSION:
            return
        tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if tables:
            raise MetricsError(f"{self.path}: not a clusterman metrics database (it holds other tables)")
        if not create:
            raise MetricsError(f"{self.path}: an empty file, not a metrics database yet (nothing was written)")
        if conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] != "wal":
            raise MetricsError(f"{self.path}: SQLite refused WAL mode (is the file on a network filesystem?)")
        with self._transaction(conn, "BEGIN IMMEDIATE"):
            for statement in _SCHEMA:
                conn.execute(statement)

    def _guard(self, action: str, fn: Callable[[], T]) -> T:
        """Run ``fn``, turning any SQLite failure into one MetricsError naming the file."""
        try:
            return fn()
        except sqlite3.Error as e:
            text = str(e)
            if "no such table" in text:
                hint = "a metrics table is missing; was the file changed by something else?"
            elif "locked" in text or "busy" in text:
                hint = f"another process held the database for more than {self.busy_timeout_seconds:g} s"
            elif "not a database" in text:
                hint = "this file is not a SQLite database"
            else:
                hint = text
            raise MetricsError(f"{self.path}: cannot {action} the metrics database: {hint} ({text})") from e

    @contextmanager
    def _transaction(self, conn: sqlite3.Connection, begin: str = "BEGIN") -> Iterator[None]:
        conn.execute(begin)
        try:
            yield
        except BaseException:
            if conn.in_transaction:  # SQLite may already have rolled back (e.g. on SQLITE_FULL)
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def create(self) -> list[str]:
        existed = self.path.exists()
        self._connect(create=True)
        return [] if existed else [str(self.path)]

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- the store interface ------------------------------------------------------------------

    def write(self, points: Iterable[Point]) -> None:
        rows: dict[MetricType, list[tuple[str, int, float | str]]] = {t: [] for t in MetricType}
        newest = -1
        for p in points:
            rows[p.metric_type].append((p.key, p.timestamp, _encode(p.value) if isinstance(p.value, dict) else p.value))
            if p.timestamp > newest:
                newest = p.timestamp
        if not any(rows.values()):
            return
        conn = self._connect(create=True)
        self._guard("write to", lambda: self._write_rows(conn, rows, newest))

    def _write_rows(
        self, conn: sqlite3.Connection, rows: dict[MetricType, list[tuple[str, int, float | str]]], newest: int
    ) -> None:
        with self._transaction(conn, "BEGIN IMMEDIATE"):
            for metric_type, table_rows in rows.items():
                if not table_rows:
                    continue
                conn.executemany(f"INSERT OR REPLACE INTO {metric_type.value} VALUES (?, ?, ?)", table_rows)
                conn.executemany(
                    "INSERT OR IGNORE INTO series VALUES (?, ?)",
                    [(metric_type.value, key) for key in {r[0] for r in table_rows}],
                )
            if self.retention_seconds and (self._pruned_at is None or newest - self._pruned_at >= PRUNE_EVERY_SECONDS):
                self._prune(conn, newest - self.retention_seconds)
                self._pruned_at = newest

    def _prune(self, conn: sqlite3.Connection, before: int) -> None:
        """Drop points older than ``before``, key by key, so each delete is a primary-key range."""
        for type_name, key in conn.execute("SELECT metric_type, key FROM series").fetchall():
            conn.execute(f"DELETE FROM {type_name} WHERE key = ? AND timestamp < ?", (key, before))
            if conn.execute(f"SELECT 1 FROM {type_name} WHERE key = ? LIMIT 1", (key,)).fetchone() is None:
                conn.execute("DELETE FROM series WHERE metric_type = ? AND key = ?", (type_name, key))

    def read(self, metric_type: MetricType, key: str, start: int, end: int) -> Series:
        return self.read_many(metric_type, [key], start, end)[key]

    def read_many(self, metric_type: MetricType, keys: Sequence[str], start: int, end: int) -> dict[str, Series]:
        conn = self._connect(create=False)
        sql = (
            f"SELECT timestamp, value FROM {metric_type.value} "
            "WHERE key = ? AND timestamp BETWEEN ? AND ? ORDER BY timestamp"
        )

        def read_all() -> dict[str, Series]:
            with self._transaction(conn):  # one snapshot for all keys, even while a writer commits
                return {
                    key: [(ts, _decode(v)) for ts, v in conn.execute(sql, (key, start, end)).fetchall()] for key in keys
                }

        return self._guard("read", read_all)

    def keys(self, metric_type: MetricType, prefix: str = "", regex: str | None = None) -> list[str]:
        conn = self._connect(create=False)
        rows = self._guard(
            "read",
            lambda: conn.execute("SELECT key FROM series WHERE metric_type = ?", (metric_type.value,)).fetchall(),
        )
        return matching_keys((r[0] for r in rows), prefix, regex)

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r})"
