"""SQLite with one writer and several readers at once, as separate processes (WAL mode)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from clusterman.core.config import MetricType
from clusterman.datastore.sqlite import SqliteStore

REPO = Path(__file__).resolve().parents[2]


def test_one_writer_and_three_readers_at_once(tmp_path):
    path = tmp_path / "metrics.sqlite3"
    SqliteStore(path).create()
    roles = ["writer", "reader", "reader", "reader"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "itests.datastore.sqlite_worker", role, str(path), "2.5"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for role in roles
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, f"{out.decode()} {err.decode()}"
        results.append(json.loads(out))
    writes = results[0]["writes"]
    assert writes > 20
    for reader in results[1:]:
        # each reader read many times while the writer wrote, and saw the data grow
        assert reader["reads"] > 20 and reader["distinct_sizes"] > 2, reader
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    series = SqliteStore(path).read(MetricType.SYSTEM_METRICS, "k0|cluster=c,pool=p.kubernetes", 0, 10**9)
    assert [ts for ts, _ in series] == list(range(writes)), "every write is there once the writer is done"


def test_processes_racing_to_create_the_file_all_succeed(tmp_path):
    path = tmp_path / "new" / "metrics.sqlite3"
    code = (
        "import sys; from clusterman.core.config import MetricType;"
        "from clusterman.datastore.sqlite import SqliteStore;"
        "from clusterman.datastore.store import Point;"
        "SqliteStore(sys.argv[1]).write([Point(MetricType.APP_METRICS, 'a,' + sys.argv[2], 1, 1.0)])"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(path), str(i)], cwd=REPO, stderr=subprocess.PIPE)
        for i in range(4)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()
    assert SqliteStore(path).keys(MetricType.APP_METRICS) == ["a,0", "a,1", "a,2", "a,3"]
