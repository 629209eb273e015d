"""One process of the SQLite concurrency test: ``python -m itests.datastore.sqlite_worker writer|reader PATH SECONDS``.

The writer commits one timestamp for all KEYS per write. A reader checks, on every ``read_many``,
that it saw whole writes only: every key has the same timestamps, 0..n-1 with no gap. Each prints
one JSON line of what it did and exits 1 on the first inconsistency or error.
"""

from __future__ import annotations

import json
import sys
import time

from clusterman.core.config import MetricType
from clusterman.datastore.sqlite import SqliteStore
from clusterman.datastore.store import MetricsError
from clusterman.datastore.store import Point

KEYS = [f"k{i}|cluster=c,pool=p.kubernetes" for i in range(10)]
SYS = MetricType.SYSTEM_METRICS


def writer(store: SqliteStore, deadline: float) -> dict[str, int]:
    t = 0
    while time.monotonic() < deadline:
        store.write(Point(SYS, key, t, float(t)) for key in KEYS)
        t += 1
    return {"writes": t}


def reader(store: SqliteStore, deadline: float) -> dict[str, int]:
    reads, sizes = 0, set()
    while time.monotonic() < deadline:
        window = store.read_many(SYS, KEYS, 0, 10**9)
        stamps = {key: [ts for ts, _ in series] for key, series in window.items()}
        first = stamps[KEYS[0]]
        if first != list(range(len(first))) or any(s != first for s in stamps.values()):
            raise AssertionError(f"a torn read: {[len(s) for s in stamps.values()]} points per key")
        reads += 1
        sizes.add(len(first))
    return {"reads": reads, "distinct_sizes": len(sizes)}


def main() -> int:
    role, path, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    store = SqliteStore(path, busy_timeout_seconds=5)
    deadline = time.monotonic() + seconds
    try:
        result = writer(store, deadline) if role == "writer" else reader(store, deadline)
    except (MetricsError, AssertionError) as e:
        print(json.dumps({"error": str(e)}))
        return 1
    finally:
        store.close()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
