"""Synthetic metrics from a small YAML design, for people trying signals and for the simulator.

A design names a time range and a list of series; each series is the sum of a few shapes::

    seed: 7
    start: 2024-03-04T00:00:00Z     # ISO 8601 or Unix seconds
    duration: 2d                    # s, m, h, d, or combined: 1h30m
    interval: 1m
    cluster: local-dev
    pool: default
    scheduler: simulated
    series:
      - name: cpus_allocated        # system metric: cpus_allocated|cluster=local-dev,pool=default.simulated
        shape:
          - steady: {value: 40}
          - diurnal: {amplitude: 15, peak: 15h}
          - noise: {stddev: 1.5}

Shapes: ``steady`` (value), ``diurnal`` (amplitude, period 24h, peak = time of day UTC, 14h),
``step`` (at, value), ``spike`` (at, duration 10m, value), ``ramp`` (at, duration, value: rises
linearly to value and stays), ``random_walk`` (stddev per interval), ``noise`` (stddev). ``at`` is
an offset from ``start``. The sum is clamped to [min, max] (min 0 unless set) and rounded to
``decimals`` (3). ``split: {"<m5.large, us-west-2a>": 2, ...}`` turns each value into a mapping
shared out by weight, as ``fulfilled_capacity`` is stored. The same design and seed always give the
same numbers: each series draws from its own generator seeded by the design's seed and its key.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import os
import random
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clusterman.config.loader import read_yaml
from clusterman.core import durations
from clusterman.core import timestamps
from clusterman.core.config import MetricType
from clusterman.core.config import Scheduler
from clusterman.core.config_schema import ConfigError
from clusterman.core.config_schema import field
from clusterman.core.config_schema import non_negative
from clusterman.core.config_schema import parse
from clusterman.core.config_schema import positive
from clusterman.datastore.datafile import MetricsData
from clusterman.datastore.store import Series
from clusterman.datastore.store import Value
from clusterman.datastore.store import app_key
from clusterman.datastore.store import system_key

# Measured: a generated point costs about 270 bytes of memory until the file is written (its
# offset, its running total, the (timestamp, value) tuple, the JSON text), and a split adds about
# 130 per market. A design that would need more than MAX_GENERATE_BYTES is refused before any work.
BYTES_PER_POINT = 280
BYTES_PER_MARKET = 130
MAX_GENERATE_BYTES = 2 * 1024**3


def whole_seconds(value: Any) -> int:
    """A duration, cut to whole seconds: designs step through time by ``range``."""
    return int(durations.parse_duration(value))


def whole_unix_seconds(value: Any) -> int:
    """A moment, cut to whole Unix seconds: the start of a design's ``range``."""
    return int(timestamps.parse_time(value))


# -- shapes: each adds its contribution at the given offsets (seconds since the design's start) -----


class Shape(abc.ABC):
    @abc.abstractmethod
    def add(self, offsets: Sequence[int], start: int, rng: random.Random) -> list[float]:
        """This shape's part of the value at each offset."""


@dataclass(frozen=True)
class Steady(Shape):
    value: float

    def add(self, offsets: Sequence[int], start: int, rng: random.Random) -> list[float]:
        return [self.value] * len(offsets)


@dataclass(frozen=True)
class Diurnal(Shape):
    """A cosine with its maximum at ``peak`` (time of day, UTC) every ``period``."""

    amplitude: float
    period: int = field(86400, parser=whole_seconds, check=positive)
    peak: int = field(14 * 3600, parser=whole_seconds)

    def add(self, offsets: Sequence[int], start: int, rng: random.Random) -> list[float]:
        return [
            self.amplitude * math.cos(2 * math.pi * ((start + t - self.peak) % self.period) / self.period)
            for t in offsets
        ]


@dataclass(frozen=True)
class Step(Shape):
    value: float
    at: int = field(parser=whole_seconds)

    def add(self, offsets: Sequence[int], start: int, rng: random.Random) -> list[float]:
        return [self.value if t >= self.at else 0.0 for t in offsets]


@dataclass(frozen=True)
class Spike(Shape):
    value: float
    at: int = field(parser=whole_seconds)
    duration: int = field(600, parser=whole_seconds, check=positive)

    def add(self, offsets: Sequence[int], start: int, rng: random.Random) -> list[float]:
        return [self.value if self.at <= t < self.at + self.duration else 0.0 for t in offsets]


@dataclass(frozen=True)
class Ramp(Shape):
    value: float
    at: int = field(parser=whole_seconds)
    duration: int = field(parser=whole_seconds, check=positive)

    def add(self, offsets: Sequence[int], start: int, rng: random.Random) -> list[float]:
        return [self.value * min(max((t - self.at) / self.duration, 0.0), 1.0) for t in offsets]


@dataclass(frozen=True)
class RandomWalk(Shape):
    """Starts at 0 and moves by a normal step (``stddev``) every interval."""

    stddev: float = field(check=non_negative)

    def add(self, offsets: Sequence[int], start: int, rng: random.Random) -> list[float]:
        level, out = 0.0, []
        for _ in offsets:
            out.append(level)
            level += rng.gauss(0.0, self.stddev)
        return out


@dataclass(frozen=True)
class Noise(Shape):
    stddev: float = field(check=non_negative)

    def add(self, offsets: Sequence[int], start: int, rng: random.Random) -> list[float]:
        return [rng.gauss(0.0, self.stddev) for _ in offsets]


SHAPES: dict[str, type[Shape]] = {
    "steady": Steady,
    "diurnal": Diurnal,
    "step": Step,
    "spike": Spike,
    "ramp": Ramp,
    "random_walk": RandomWalk,
    "noise": Noise,
}


# -- the design -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SeriesDesign:
    name: str
    shape: tuple[Shape, ...]
    type: MetricType = MetricType.SYSTEM_METRICS
    app: str = field("", doc="app metrics: the app, giving the key `app,name`")
    key: str = field("", doc="the exact store key, instead of one built from name, cluster and pool")
    min: float = 0.0
    max: float = math.inf
    decimals: int = field(3, check=non_negative)
    split: dict[str, float] = field(default_factory=dict, doc="share each value out by weight into a mapping")

    def __post_init__(self) -> None:
        if self.type is MetricType.APP_METRICS and not (self.app or self.key):
            raise ValueError(f"{self.name}: an app metric needs `app` (or an explicit `key`)")
        if self.min > self.max:
            raise ValueError(f"{self.name}: min ({self.min}) is greater than max ({self.max})")
        if self.split and (min(self.split.values()) < 0 or sum(self.split.values()) <= 0):
            raise ValueError(f"{self.name}: split weights must be at least 0 and not all 0")


@dataclass(frozen=True)
class Design:
    series: tuple[SeriesDesign, ...]
    start: int = field(parser=whole_unix_seconds)
    duration: int = field(parser=whole_seconds, check=positive)
    seed: int = 0
    interval: int = field(60, parser=whole_seconds, check=positive)
    cluster: str = "local-dev"
    pool: str = "default"
    scheduler: Scheduler = Scheduler.SIMULATED

    @property
    def points_per_series(self) -> int:
        return -(-self.duration // self.interval)

    def memory_bytes(self) -> int:
        """About what ``generate`` and writing the file need in memory."""
        per_point = sum(BYTES_PER_POINT + BYTES_PER_MARKET * len(s.split or ()) for s in self.series)
        return self.points_per_series * per_point

    def key_of(self, s: SeriesDesign) -> str:
        if s.key:
            return s.key
        if s.type is MetricType.APP_METRICS:
            return app_key(s.app, s.name)
        return system_key(s.name, self.cluster, f"{self.pool}.{self.scheduler.value}")


def load_design(path: str | os.PathLike[str]) -> Design:
    """Read and check a design file; problems are one ConfigError naming the file and the key."""
    return parse_design(read_yaml(path), str(path))  # read as every srv-config is: one line per problem


def parse_design(raw: Any, source: str) -> Design:
    if not isinstance(raw, Mapping):
        raise ConfigError(source, "", "expected a mapping with start, duration and series")
    raw_series = raw.get("series")
    if not isinstance(raw_series, list) or not raw_series:
        raise ConfigError(source, "series", "expected a non-empty list of series")
    series = tuple(_parse_series(item, source, f"series[{i}]") for i, item in enumerate(raw_series))
    design = parse(Design, {**raw, "series": []}, source)
    keys = [design.key_of(s) for s in series]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise ConfigError(source, "series", f"{', '.join(dupes)} designed more than once")
    design = dataclasses.replace(design, series=series)
    check_size(design, source)
    return design


def check_size(design: Design, source: str) -> None:
    """Refuse, before any work, a design whose data would not fit in memory (a MemoryError after
    minutes of work, or a machine swapping, otherwise)."""
    need = design.memory_bytes()
    if need <= MAX_GENERATE_BYTES:
        return
    points = design.points_per_series
    raise ConfigError(
        source,
        "duration",
        f"{design.duration:,} s at one point every {design.interval:,} s is {points:,} points per series, "
        f"{points * len(design.series):,} in all: about {_size(need)} of memory, more than the "
        f"{_size(MAX_GENERATE_BYTES)} generate-data allows; shorten the duration, lengthen the interval, "
        "or generate several files",
    )


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _parse_series(raw: Any, source: str, path: str) -> SeriesDesign:
    if not isinstance(raw, Mapping):
        raise ConfigError(source, path, "expected a mapping with name and shape")
    raw_shape = raw.get("shape")
    if not isinstance(raw_shape, list) or not raw_shape:
        raise ConfigError(source, f"{path}.shape", "expected a non-empty list such as `- steady: {value: 10}`")
    shapes = tuple(_parse_shape(item, source, f"{path}.shape[{j}]") for j, item in enumerate(raw_shape))
    parsed = parse(SeriesDesign, {**raw, "shape": []}, source, path)
    return dataclasses.replace(parsed, shape=shapes)


def _parse_shape(raw: Any, source: str, path: str) -> Shape:
    if not isinstance(raw, Mapping) or len(raw) != 1:
        raise ConfigError(source, path, "expected a one-key mapping such as `steady: {value: 10}`")
    ((kind, body),) = raw.items()
    cls = SHAPES.get(kind)
    if cls is None:
        raise ConfigError(source, path, f"unknown shape {kind!r} (known: {', '.join(SHAPES)})")
    return parse(cls, body, source, f"{path}.{kind}")


def generate(design: Design) -> MetricsData:
    """Every designed series, as ``{metric type: {key: [(timestamp, value), ...]}}``."""
    offsets = list(range(0, design.duration, design.interval))
    data: MetricsData = {}
    for s in design.series:
        key = design.key_of(s)
        rng = random.Random(f"{design.seed}/{s.type.value}/{key}")
        totals = [0.0] * len(offsets)
        for shape in s.shape:
            totals = [a + b for a, b in zip(totals, shape.add(offsets, design.start, rng), strict=True)]
        series: Series = [(design.start + t, _finish(s, v)) for t, v in zip(offsets, totals, strict=True)]
        data.setdefault(s.type, {})[key] = series
    return data


def _finish(s: SeriesDesign, value: float) -> Value:
    value = min(max(value, s.min), s.max)
    if not s.split:
        return round(value, s.decimals) + 0.0  # + 0.0 turns -0.0 into 0.0
    total = sum(s.split.values())
    return {market: round(value * weight / total, s.decimals) + 0.0 for market, weight in s.split.items()}
