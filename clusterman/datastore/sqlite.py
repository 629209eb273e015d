"""The embedded metrics store: one SQLite file under the state directory.

Two tables: ``series`` names each (metric type, key) once and gives it a small integer id;
``points`` holds (series, timestamp, value), clustered on its primary key. So a window read is one
range scan, and an insert touches a compact B-tree: small ids in every entry, not 60-byte keys. A number is stored as
a REAL, a mapping (``fulfilled_capacity`` per market) as its JSON text.

Concurrency: the file is in WAL mode, so one writer (the collector) and several readers (the
autoscaler, ``clusterman metrics read``) work at once; readers see the last committed write and
every ``read_many`` is one consistent snapshot. Ids are looked up inside each write's transaction,
never cached, so nothing goes stale between processes. A writer that finds the file locked waits up
to ``busy_timeout_seconds`` and then raises ``MetricsError``, as does every other SQLite failure.

Retention: a write never deletes. ``prune(now)`` removes the points older than ``now`` minus the
retention, series by series, each delete one primary-key range in one short transaction. ``now``
is the wall clock, never the data's newest timestamp, so one point from the future cannot push
everything else out. ``write`` refuses such points anyway.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
from contextlib import contextmanager
from operator import itemgetter
from pathlib import Path
from typing import Any
from typing import TypeVar

from clusterman.core.config import MetricType
from clusterman.datastore.store import MetricsError
from clusterman.datastore.store import MetricsStore
from clusterman.datastore.store import Point
from clusterman.datastore.store import Series
from clusterman.datastore.store import UnusableStore
from clusterman.datastore.store import Value
from clusterman.datastore.store import check_not_future
from clusterman.datastore.store import matching_keys
from clusterman.paths import unusable_path

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
T = TypeVar("T")

CACHE_KIB = 65536  # SQLite's page cache per connection (grown only as used): inserts stay in memory longer
_SCHEMA = [
    "CREATE TABLE series (id INTEGER PRIMARY KEY, metric_type TEXT NOT NULL, key TEXT NOT NULL, "
    "UNIQUE (metric_type, key))",
    "CREATE TABLE points (series INTEGER NOT NULL, timestamp INTEGER NOT NULL, value NOT NULL, "
    "PRIMARY KEY (series, timestamp)) WITHOUT ROWID",
    f"PRAGMA user_version = {SCHEMA_VERSION}",
]


def _encode(value: dict[str, float]) -> str:
    return json.dumps(value, sort_keys=True)


_FLOAT = {float}


def _decode(stored: Any) -> Value:
    if isinstance(stored, str):
        decoded: dict[str, float] = json.loads(stored)
        return decoded
    return float(stored)


class SqliteStore(MetricsStore):
    """``SqliteStore(path)``; the file is opened on first use and created by the first write."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        retention_days: int = 0,
        busy_timeout_seconds: float = 10.0,
        clock: Callable[[], float] = time.time,
    ):
        self.path = Path(path)
        self.retention_seconds = retention_days * 86400
        self.busy_timeout_seconds = busy_timeout_seconds
        self.clock = clock  # writes refuse points too far ahead of it
        self._conn: sqlite3.Connection | None = None

    # -- connection ---------------------------------------------------------------------------

    def _connect(self, create: bool) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        unusable = unusable_path(self.path)
        if unusable:
            raise UnusableStore(f"{self.path}: {unusable}: check metrics.sqlite_path and state_directory")
        if create:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                error = UnusableStore if unusable_path(self.path, e) else MetricsError
                raise error(f"{self.path}: cannot create the metrics directory: {e.strerror}") from e
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
        conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise MetricsError(
                f"{self.path}: written by a newer clusterman (schema {version}, this one reads {SCHEMA_VERSION})"
            )
        if version == SCHEMA_VERSION:
            return
        if not create:
            self._check_not_foreign(conn)
            raise MetricsError(f"{self.path}: an empty file, not a metrics database yet (nothing was written)")
        if conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] != "wal":
            raise MetricsError(f"{self.path}: SQLite refused WAL mode (is the file on a network filesystem?)")
        with self._transaction(conn, "BEGIN IMMEDIATE"):  # checked again under the lock: others may create it too
            if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
                return
            self._check_not_foreign(conn)
            for statement in _SCHEMA:
                conn.execute(statement)

    def _check_not_foreign(self, conn: sqlite3.Connection) -> None:
        if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            raise MetricsError(f"{self.path}: not a clusterman metrics database (it holds other tables)")

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
            elif "not a database" in text or "malformed" in text:
                hint = (
                    "the file is damaged or not a SQLite database: move it aside and the next write makes a "
                    "new one (signals then start with no history)"
                )
            else:
                raise MetricsError(f"{self.path}: cannot {action} the metrics database: {text}") from e
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
        """Insert or replace the points, all or none; refuses the lot when one is from the future."""
        rows: list[tuple[MetricType, str, int, float | str]] = []
        newest: Point | None = None
        for p in points:
            rows.append((p.metric_type, p.key, p.timestamp, _encode(p.value) if isinstance(p.value, dict) else p.value))
            if newest is None or p.timestamp > newest.timestamp:
                newest = p
        if newest is None:
            return
        check_not_future(newest.key, newest.timestamp, self.clock())
        conn = self._connect(create=True)
        self._guard("write to", lambda: self._write_rows(conn, rows))

    def _write_rows(self, conn: sqlite3.Connection, rows: list[tuple[MetricType, str, int, float | str]]) -> None:
        with self._transaction(conn, "BEGIN IMMEDIATE"):
            names = {(metric_type.value, key) for metric_type, key, _, _ in rows}
            conn.executemany("INSERT OR IGNORE INTO series (metric_type, key) VALUES (?, ?)", names)
            ids = {name: self._series_id(conn, *name) for name in names}
            conn.executemany(
                "INSERT OR REPLACE INTO points VALUES (?, ?, ?)",
                [(ids[metric_type.value, key], ts, value) for metric_type, key, ts, value in rows],
            )

    @staticmethod
    def _series_id(conn: sqlite3.Connection, type_name: str, key: str) -> int | None:
        row = conn.execute("SELECT id FROM series WHERE metric_type = ? AND key = ?", (type_name, key)).fetchone()
        return None if row is None else int(row[0])

    def prune(self, now: float) -> int:
        """Drop points older than ``now`` − retention, series by series (one short transaction each,
        so readers and the writer are not held up); a series left with no point is forgotten."""
        if not self.retention_seconds or not self.path.exists():
            return 0
        conn = self._connect(create=False)
        before = int(now) - self.retention_seconds
        removed = 0
        for (series,) in self._guard("read", lambda: conn.execute("SELECT id FROM series").fetchall()):
            removed += self._guard("prune", functools.partial(self._prune_series, conn, series, before))
        return removed

    def _prune_series(self, conn: sqlite3.Connection, series: int, before: int) -> int:
        with self._transaction(conn, "BEGIN IMMEDIATE"):
            gone = conn.execute("DELETE FROM points WHERE series = ? AND timestamp < ?", (series, before)).rowcount
            if gone and conn.execute("SELECT 1 FROM points WHERE series = ? LIMIT 1", (series,)).fetchone() is None:
                conn.execute("DELETE FROM series WHERE id = ?", (series,))
            return int(gone)

    def read(self, metric_type: MetricType, key: str, start: int, end: int) -> Series:
        return self.read_many(metric_type, [key], start, end)[key]

    def read_many(self, metric_type: MetricType, keys: Sequence[str], start: int, end: int) -> dict[str, Series]:
        conn = self._connect(create=False)
        sql = "SELECT timestamp, value FROM points WHERE series = ? AND timestamp BETWEEN ? AND ? ORDER BY timestamp"

        def read_all() -> dict[str, Series]:
            with self._transaction(conn):  # one snapshot for all keys, even while a writer commits
                window: dict[str, Series] = {}
                for key in keys:
                    series = self._series_id(conn, metric_type.value, key)
                    found = conn.execute(sql, (series, start, end)).fetchall() if series is not None else []
                    # Rows of REALs are (int, float) pairs already; copying them costs a third of
                    # the read. Values another program wrote differently still go through _decode.
                    stored_types = set(map(type, map(itemgetter(1), found)))
                    window[key] = found if stored_types <= _FLOAT else [(ts, _decode(v)) for ts, v in found]
                return window

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
