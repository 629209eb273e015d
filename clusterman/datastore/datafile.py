"""Metrics files: what ``clusterman generate-data`` writes and the simulator and ``metrics load`` read.

Our format is gzip'd JSON, ``{metric type: {key: [[timestamp, value], ...]}}``, points oldest
first. Reading also accepts Clusterman's simulator files (jsonpickle: each point a
``{"py/tuple": [{"py/object": "arrow.arrow.Arrow", "timestamp": T}, value]}``, plus bookkeeping
entries such as ``default_factory``), and plain (not gzip'd) JSON. Bad content is one
``ValueError`` naming the file, the metric type, the key and the point. Points out of order are
sorted, unless the reader asks for ``ordered`` files (the simulator: a file whose time runs
backwards, or has two values at one time, is more likely broken than merely unsorted).
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clusterman.core.config import MetricType
from clusterman.core.timestamps import parse_time
from clusterman.datastore.store import Point
from clusterman.datastore.store import Series
from clusterman.datastore.store import check_value

MetricsData = dict[MetricType, dict[str, Series]]
GZIP_MAGIC = b"\x1f\x8b"


def write_metrics_file(path: str | os.PathLike[str], data: MetricsData) -> None:
    """Write ``data`` as gzip'd JSON, keys sorted, so equal data gives byte-equal files."""
    body = {
        metric_type.value: {key: [[ts, value] for ts, value in series] for key, series in sorted(by_key.items())}
        for metric_type, by_key in data.items()
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    with open(path, "wb") as f, gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as z:
        z.write(text)  # no name, no time in the header: equal data, equal bytes


def read_metrics_file(path: str | os.PathLike[str], *, ordered: bool = False) -> MetricsData:
    """``ordered``: every series must be strictly oldest first, else a ValueError naming the point."""
    source = str(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"{source}: metrics file not found") from None
    except OSError as e:
        raise ValueError(f"{source}: cannot read: {e.strerror}") from e
    try:
        text = gzip.decompress(raw) if raw.startswith(GZIP_MAGIC) else raw
        body = json.loads(text)
    except (OSError, EOFError, ValueError) as e:
        raise ValueError(f"{source}: not a metrics file (gzip'd or plain JSON): {e}") from e
    return parse_metrics(body, source, ordered=ordered)


def parse_metrics(body: Any, source: str, *, ordered: bool = False) -> MetricsData:
    if not isinstance(body, Mapping):
        raise ValueError(f"{source}: expected a mapping of metric type -> key -> points")
    known = {t.value: t for t in MetricType}
    data: MetricsData = {}
    for type_name, by_key in body.items():
        if type_name not in known:
            raise ValueError(f"{source}: unknown metric type {type_name!r} (known: {', '.join(known)})")
        if not isinstance(by_key, Mapping):
            raise ValueError(f"{source}: {type_name}: expected a mapping of key -> points")
        data[known[type_name]] = {
            key: _parse_series(series, f"{source}: {type_name}: {key}", ordered)
            for key, series in by_key.items()
            if not _is_jsonpickle_bookkeeping(key)
        }
    return data


def _is_jsonpickle_bookkeeping(key: str) -> bool:
    """jsonpickle writes a defaultdict's factory and class beside its items."""
    return key == "default_factory" or key.startswith("py/")


def _parse_series(series: Any, where: str, ordered: bool) -> Series:
    if not isinstance(series, list):
        raise ValueError(f"{where}: expected a list of [timestamp, value] points")
    points: Series = []
    for i, point in enumerate(series):
        if isinstance(point, Mapping) and "py/tuple" in point:
            point = point["py/tuple"]
        if not isinstance(point, list) or len(point) != 2:
            raise ValueError(f"{where}[{i}]: expected [timestamp, value], got {point!r}")
        stamp, value = point
        try:
            second = int(parse_time(stamp))  # Unix seconds, an arrow.Arrow pickled, or ISO 8601
        except ValueError as e:
            raise ValueError(f"{where}[{i}]: timestamp {e}") from None
        if ordered and points and second <= points[-1][0]:
            raise ValueError(
                f"{where}[{i}]: timestamp {second} is not after the previous point's ({points[-1][0]}): "
                "points must be oldest first, one per timestamp"
            )
        points.append((second, check_value(f"{where}[{i}]", value)))
    points.sort(key=lambda p: p[0])
    return points


def points_of(data: MetricsData) -> Iterator[Point]:
    for metric_type, by_key in data.items():
        for key, series in by_key.items():
            for ts, value in series:
                yield Point(metric_type, key, ts, value)


def count_points(data: MetricsData) -> int:
    return sum(len(series) for by_key in data.values() for series in by_key.values())
