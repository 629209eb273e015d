"""The metrics datastore interface, and Clusterman-compatible metric keys.

Keys (so data written by a Clusterman deployment reads back unchanged):
  system metrics  ``name|cluster=<cluster>,pool=<pool>.<scheduler>`` (dimensions sorted by name)
  app metrics     ``<app>,<name>``
  metadata        ``name|cluster=...,pool=...`` like system metrics; spot prices
                  ``spot_prices|aws_availability_zone=<zone>,aws_instance_type=<type>``
Timestamps are whole Unix seconds, never negative; a store refuses points more than
``MAX_FUTURE_SECONDS`` ahead of its clock (a millisecond timestamp is one). A value is a number, or
for a few metadata metrics (``fulfilled_capacity``) a mapping such as ``{"<m5.large, us-west-2a>": 7}``.

Retention is never applied by a write: ``prune(now)`` removes what is older than the retention by
the wall clock, and the collector calls it (``RetentionPass``), so one bad point cannot delete data.
"""

from __future__ import annotations

import abc
import bisect
import functools
import logging
import math
import re
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass

from clusterman.core.config import MetricType
from clusterman.core.timestamps import format_time
from clusterman.errors import Unworkable
from clusterman.errors import UserError

Value = float | dict[str, float]
Series = list[tuple[int, Value]]

MAX_FUTURE_SECONDS = 300  # clock skew between hosts; anything further ahead is a wrong unit or a wrong clock
MILLISECONDS_FROM = 10**11  # Unix seconds reach this in the year 5138; millisecond timestamps passed it in 1973
log = logging.getLogger(__name__)


class MetricsError(UserError):
    """The store could not be reached, read or written; the message says which store and why.

    Every backend turns its own failures (sqlite3, botocore, requests) into this, so the autoscaler
    needs one ``except`` to keep the current target when its metrics are out of reach.
    """


class UnusableStore(MetricsError, Unworkable):
    """The metrics store the configuration names cannot work (its directory a regular file, a table
    that does not exist, no access): no retry mends it."""


@dataclass(frozen=True, slots=True)
class Point:
    metric_type: MetricType
    key: str
    timestamp: int
    value: Value

    def __post_init__(self) -> None:
        # Exact-type checks first: bulk loads build a million points, most of them plain floats and ints.
        if type(self.value) is not float or not math.isfinite(self.value):
            object.__setattr__(self, "value", check_value(self.key, self.value))
        if type(self.timestamp) is not int:
            if isinstance(self.timestamp, bool) or not isinstance(self.timestamp, (int, float)):
                raise ValueError(f"{self.key}: timestamp must be a number, got {self.timestamp!r}")
            if not math.isfinite(self.timestamp):
                raise ValueError(f"{self.key}: timestamp must be finite Unix seconds, got {self.timestamp!r}")
            object.__setattr__(self, "timestamp", int(self.timestamp))
        if not self.key:
            raise ValueError(f"{self.metric_type.value}: the metric key is empty")
        if self.timestamp < 0:
            raise ValueError(f"{self.key}: timestamp must be Unix seconds, at least 0, got {self.timestamp}")


def check_not_future(key: str, timestamp: int, now: float) -> None:
    """Refuse a point too far ahead of ``now``: a store's retention and its readers' windows are
    measured on the wall clock, so a future point would sit outside every window (or, measured from
    the data, push everything else out). Milliseconds get their own hint."""
    if timestamp <= now + MAX_FUTURE_SECONDS:
        return
    if timestamp >= MILLISECONDS_FROM:
        raise MetricsError(
            f"{key}: timestamp {timestamp} is in milliseconds? Timestamps are Unix seconds "
            f"({timestamp // 1000} would be {format_time(timestamp // 1000)}); nothing was written"
        )
    ahead = timestamp - now
    raise MetricsError(
        f"{key}: timestamp {timestamp} ({format_time(timestamp)}) is {ahead:.0f} s ahead of this host's clock "
        f"(at most {MAX_FUTURE_SECONDS} s allowed); nothing was written"
    )


def check_value(key: str, value: object) -> Value:
    """Reject what is not a finite number (or a mapping of them), naming the key."""
    if isinstance(value, Mapping):
        return {str(k): _number(f"{key}[{k}]", v) for k, v in value.items()}
    return _number(key, value)


def _number(where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: metric value must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{where}: metric value must be finite, got {value!r}")
    return float(value)


def key_with_dimensions(name: str, dimensions: Mapping[str, str]) -> str:
    if not dimensions:
        return name
    return name + "|" + ",".join(f"{k}={dimensions[k]}" for k in sorted(dimensions))


@functools.lru_cache(maxsize=4096)  # the collector builds the same few dozen keys every minute
def system_key(name: str, cluster: str, pool_with_scheduler: str) -> str:
    return key_with_dimensions(name, {"cluster": cluster, "pool": pool_with_scheduler})


SPOT_PRICES = "spot_prices"


def spot_price_key(instance_type: str, availability_zone: str) -> str:
    """A market's spot price series (metadata), dollars per instance-hour."""
    return key_with_dimensions(
        SPOT_PRICES, {"aws_instance_type": instance_type, "aws_availability_zone": availability_zone}
    )


def app_key(app: str, name: str) -> str:
    return f"{app},{name}"


def split_key(key: str) -> tuple[str, dict[str, str]]:
    """``name|k1=v1,k2=v2`` -> (name, {k1: v1, k2: v2})."""
    name, _, dims = key.partition("|")
    dimensions = dict(part.split("=", 1) for part in dims.split(",") if "=" in part) if dims else {}
    return name, dimensions


def matching_keys(keys: Iterable[str], prefix: str = "", regex: str | None = None) -> list[str]:
    """The sorted, distinct ``keys`` that start with ``prefix`` and fully match ``regex`` (when given)."""
    try:
        pattern = re.compile(regex) if regex is not None else None
    except re.error as e:
        raise ValueError(f"key pattern {regex!r} is not a valid regular expression: {e}") from e
    return sorted({k for k in keys if k.startswith(prefix) and (pattern is None or pattern.fullmatch(k))})


class MetricsStore(abc.ABC):
    """Where signals' metrics live. Implementations: SQLite (default), DynamoDB, Prometheus (read)."""

    retention_seconds: int = 0  # points older than this by the wall clock are removed (0: kept)

    @abc.abstractmethod
    def write(self, points: Iterable[Point]) -> None: ...

    @abc.abstractmethod
    def read(self, metric_type: MetricType, key: str, start: int, end: int) -> Series:
        """Points of ``key`` with start <= timestamp <= end, oldest first; empty when there are none."""

    def read_many(self, metric_type: MetricType, keys: Sequence[str], start: int, end: int) -> dict[str, Series]:
        """``read`` for several keys at once; backends override it to batch or parallelise."""
        return {key: self.read(metric_type, key, start, end) for key in keys}

    @abc.abstractmethod
    def keys(self, metric_type: MetricType, prefix: str = "", regex: str | None = None) -> list[str]:
        """Keys of this type starting with ``prefix`` and, when given, fully matching ``regex``."""

    def create(self) -> list[str]:
        """Create what the store needs before its first write (file, tables); returns what was new."""
        return []

    def prune(self, now: float) -> int:
        """Remove points older than the retention, measured back from ``now`` (the wall clock), in
        every series; returns how many were removed. Stores that expire points themselves (DynamoDB's
        TTL) or hold none (Prometheus) have nothing to do."""
        return 0

    def close(self) -> None:  # noqa: B027 - most stores hold nothing to release
        """Release connections; the default holds none."""


class InMemoryStore(MetricsStore):
    """For unit tests and the simulator (nothing outlives the process); the stores a deployment uses
    live in ``clusterman.datastore``' backend modules."""

    def __init__(self) -> None:
        # per series its timestamps (for bisect) and its points, each point one tuple made once: a
        # read is a slice of pointers, not a new tuple per point (the simulator reads a day of
        # points every simulated minute)
        self._data: dict[tuple[MetricType, str], tuple[list[int], list[tuple[int, Value]]]] = {}

    def __repr__(self) -> str:
        return "this process's memory"

    def load(self, metric_type: MetricType, key: str, series: Series) -> None:
        """Put a whole series in at once (a metrics file's), replacing what the key held."""
        ordered = [(int(t), v) for t, v in sorted(series, key=lambda p: p[0])]
        self._data[(metric_type, key)] = ([t for t, _ in ordered], ordered)

    def write(self, points: Iterable[Point]) -> None:
        for p in points:
            times, pairs = self._data.setdefault((p.metric_type, p.key), ([], []))
            i = bisect.bisect_left(times, p.timestamp)
            if i < len(times) and times[i] == p.timestamp:
                pairs[i] = (p.timestamp, p.value)
            else:
                times.insert(i, p.timestamp)
                pairs.insert(i, (p.timestamp, p.value))

    def read(self, metric_type: MetricType, key: str, start: int, end: int) -> Series:
        times, pairs = self._data.get((metric_type, key), ([], []))
        return pairs[bisect.bisect_left(times, start) : bisect.bisect_right(times, end)]

    def keys(self, metric_type: MetricType, prefix: str = "", regex: str | None = None) -> list[str]:
        return matching_keys((key for (t, key) in self._data if t == metric_type), prefix, regex)


class RetentionPass:
    """Calls ``store.prune(now)`` at most once per ``every_seconds`` of wall-clock time: the writers
    (the collector, an autoscaler with ``--collect-metrics``) run it beside their writes, never in them."""

    def __init__(self, store: MetricsStore, every_seconds: float = 3600.0) -> None:
        self.store = store
        self.every_seconds = every_seconds
        self._last: float | None = None

    def __call__(self, now: float) -> int:
        if self._last is not None and now - self._last < self.every_seconds:
            return 0
        self._last = now
        try:
            removed = self.store.prune(now)
        except MetricsError as e:  # retention can wait for the next pass; the points were written
            log.warning("retention pass failed (tried again in %g s): %s", self.every_seconds, e)
            return 0
        if removed:
            log.info("retention: removed %d points older than the retention from %r", removed, self.store)
        return removed
