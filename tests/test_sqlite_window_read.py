"""The SQLite window read hands SQLite's rows on as they are only when every value is a REAL."""

from __future__ import annotations

import sqlite3

from clusterman.core.config import MetricType
from clusterman.datastore.sqlite import SqliteStore
from clusterman.datastore.store import Point

SYS = MetricType.SYSTEM_METRICS


def test_reals_integers_and_mappings_read_back_as_the_store_promises(tmp_path):
    store = SqliteStore(tmp_path / "m.sqlite3", clock=lambda: 10_000.0)
    store.write([Point(SYS, "real", t, t / 7) for t in (60, 120)] + [Point(SYS, "mixed", 60, 1.5)])
    store.close()
    # another program wrote an INTEGER and a mapping's JSON text into the same series
    with sqlite3.connect(tmp_path / "m.sqlite3") as conn:
        (series,) = conn.execute("SELECT id FROM series WHERE key = 'mixed'").fetchone()
        conn.executemany("INSERT INTO points VALUES (?, ?, ?)", [(series, 120, 3), (series, 180, '{"a": 2.5}')])
    conn.close()
    real = store.read(SYS, "real", 0, 10_000)
    assert real == [(60, 60 / 7), (120, 120 / 7)]
    assert all(type(ts) is int and type(v) is float for ts, v in real)
    mixed = store.read(SYS, "mixed", 0, 10_000)
    assert mixed == [(60, 1.5), (120, 3.0), (180, {"a": 2.5})]
    assert type(mixed[1][1]) is float
    assert store.read(SYS, "nothing", 0, 10_000) == []
