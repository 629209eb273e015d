"""A metrics file for ``clusterman signal evaluate``: read once, checked in C, sent as it is.

The file is ``{"metrics": {name: [[ts, value], ...]}, "timestamp": T}`` or the bare mapping. It
is parsed strictly (no NaN or Infinity) with the garbage collector paused. Each series is checked
with whole-list operations (types, finiteness, time order), not a Python loop per point.

When the bytes already are a valid payload, they go onto the wire unchanged: the file itself, the
bare mapping spliced between ``{"metrics":`` and the timestamp, or the file with its trailing
timestamp replaced. Only a series out of time order (sorted here, with a note) is encoded again.
``guess`` predicts the payload from the bytes alone, so it is sent before the check, which runs
while the runner parses the same bytes. A wrong guess is sent again, corrected. Every error is one
line naming the file.

A large file is checked without building a list per point (``_check_without_points``). Each
series' brackets and commas are compared as bytes with the shape ``[[n,n],...]``, and its numbers
are parsed as one flat JSON array, strictly, as the runner will. The rest of the file is parsed
with each series replaced by a placeholder. What that check cannot vouch for (a series out of
order, a string holding ``[[``, an escape, an odd number) goes through the full parse, which names
the error. Both accept the same files and give the same payload.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass
from itertools import islice
from operator import itemgetter
from pathlib import Path
from typing import Any

from clusterman.errors import UserError
from clusterman_signals import wire

_NUMBER_TYPES = frozenset({int, float})
_CONSTANT = re.compile(rb"[\[,:]\s*(NaN|-?Infinity)")
_WRAPPED_HEAD = re.compile(rb'\s*\{\s*"metrics"\s*:')
_TRAILING_TIMESTAMP = re.compile(rb',\s*"timestamp"\s*:\s*(-?[0-9][0-9.eE+-]*)\s*\}\s*\Z')
_TAIL = 256  # bytes of the file's end searched for the trailing timestamp
_SERIES_START = re.compile(rb"\[[ \t\n\r]*\[")
_SERIES_END = re.compile(rb"\][ \t\n\r]*\]")
_NUMBER_BYTES = b"0123456789.eE+- \t\n\r"  # what a series holds besides brackets and commas
_BRACKETS_TO_SPACES = bytes.maketrans(b"[]", b"  ")


class MetricsFileError(UserError):
    """The metrics file cannot be sent; the message names the file and, where known, metric and point."""


@dataclass(frozen=True)
class MetricsFile:
    path: Path
    raw: bytes
    timestamp: float | None  # the file's own, if it has one
    wrapped: bool  # {"metrics": ..., ...} rather than the bare mapping
    newest: float | None  # the newest point's time (each series' last, once in order); None: no points
    notes: tuple[str, ...] = ()  # what was changed (a series sorted), for stderr
    parsed: dict[str, list[Any]] | None = None  # the series, when the full parse built them

    @property
    def metrics(self) -> dict[str, list[Any]]:
        """The series as lists of points; a file checked without them is parsed now (only a payload
        that cannot reuse the file's bytes needs them)."""
        return self.parsed if self.parsed is not None else _load_points(self.path, self.raw).metrics

    def newest_timestamp(self) -> float | None:
        return self.newest

    def when(self, timestamp: float | None) -> float | None:
        """The evaluation time: ``timestamp``, else the file's, else its newest point's."""
        if timestamp is not None:
            return timestamp
        return self.timestamp if self.timestamp is not None else self.newest

    def payload(self, timestamp: float | None) -> bytes:
        when = self.when(timestamp)
        if when is None:
            raise MetricsFileError(f"{self.path}: no timestamp and no points; give --timestamp")
        data = None
        if not self.notes:  # nothing changed: reuse the file's bytes where we can
            data = splice(self.raw, self.wrapped, self.timestamp is not None, when)
            if data is None and when == self.timestamp and type(when) is type(self.timestamp):
                data = self.raw  # the timestamp is not last in the file, but it is the one we want
        if data is None:
            data = wire.encode_payload(self.metrics, when)
        wire.check_payload_size(len(data))
        return data


def splice(raw: bytes, wrapped: bool, has_timestamp: bool, when: float) -> bytes | None:
    """The payload for ``when`` built from the file's own bytes, or None when they cannot be reused."""
    stamp = wire.dumps(when)
    if not wrapped:
        return b'{"metrics":' + raw + b',"timestamp":' + stamp + b"}"
    cut = max(0, len(raw) - _TAIL)
    trailing = _TRAILING_TIMESTAMP.search(raw, cut)
    if has_timestamp:
        if trailing is None:
            return None
        if trailing.group(1) == stamp:
            return raw
        return raw[: trailing.start(1)] + stamp + raw[trailing.end(1) :]
    end = raw.rstrip()
    return end[:-1] + b',"timestamp":' + stamp + b"}"


def guess(raw: bytes, timestamp: float | None) -> bytes | None:
    """The payload ``load`` will most likely give, from the bytes alone (None: cannot tell).

    A wrapped file whose timestamp is its last member, any file with ``--timestamp``, or a compact
    file without a timestamp (the newest of each series' last point, read off the bytes). Only a
    guess (a metric named ``metrics`` in a bare mapping fools it): the caller compares it with
    the checked payload and sends again when they differ.
    """
    wrapped = _WRAPPED_HEAD.match(raw) is not None
    trailing = _TRAILING_TIMESTAMP.search(raw, max(0, len(raw) - _TAIL)) if wrapped else None
    if timestamp is None:
        if trailing is None:
            timestamp = _newest_last_point(raw)
            if timestamp is None:
                return None
        else:
            try:
                timestamp = wire.loads(trailing.group(1))
            except ValueError:
                return None
            if type(timestamp) not in _NUMBER_TYPES:
                return None
    assert timestamp is not None
    return splice(raw, wrapped, trailing is not None, timestamp)


def _newest_last_point(raw: bytes) -> Any:
    """The newest time among the series' last points, found without parsing: each ``]]`` closes
    a series, and its last point starts at the ``[`` before it. Series are promised oldest first;
    when one is not, the check's payload differs from the guess and is sent again."""
    newest: Any = None
    end = raw.find(b"]]")
    while end != -1:
        start = raw.rfind(b"[", 0, end)
        comma = raw.find(b",", start + 1, end)
        if start == -1 or comma == -1:
            return None
        try:
            when = wire.loads(raw[start + 1 : comma])
        except ValueError:
            return None
        if type(when) not in _NUMBER_TYPES:
            return None
        newest = when if newest is None else max(newest, when)
        end = raw.find(b"]]", end + 2)
    return newest


def read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise MetricsFileError(f"{path}: cannot read: {e.strerror or e}") from e


def load(path: Path, raw: bytes | None = None) -> MetricsFile:
    """Parse and check the file (``raw``: its bytes, when already read)."""
    if raw is None:
        raw = read(path)
    return _check_without_points(path, raw) or _load_points(path, raw)


def _load_points(path: Path, raw: bytes) -> MetricsFile:
    """The full check: every point built as a list, each error named (file, metric, point)."""
    try:
        data = wire.loads(raw)
    except UnicodeDecodeError as e:
        raise MetricsFileError(f"{path}: not UTF-8 (byte {e.start})") from e
    except ValueError as e:
        raise MetricsFileError(f"{path}: {_where(raw, e)}{e}") from e
    metrics, timestamp, wrapped = _split(path, data)
    notes = []
    for name, series in metrics.items():
        if check_series(path, name, series):
            series.sort(key=itemgetter(0))  # stable: equal times keep the file's order
            notes.append(f"{path}: metric {name!r} was not in time order; sorted it (oldest first)")
    newest = [series[-1][0] for series in metrics.values() if series]
    return MetricsFile(path, raw, timestamp, wrapped, max(newest) if newest else None, tuple(notes), metrics)


def _split(path: Path, data: Any) -> tuple[dict[str, Any], float | None, bool]:
    """(metrics, the file's timestamp, wrapped) of the parsed file."""
    if isinstance(data, dict) and isinstance(data.get("metrics"), dict):
        metrics, timestamp, wrapped = data["metrics"], data.get("timestamp"), True
    elif isinstance(data, dict):
        metrics, timestamp, wrapped = data, None, False
    else:
        raise MetricsFileError(f"{path}: expected a JSON object of metric name -> [[timestamp, value], ...]")
    if timestamp is not None and (type(timestamp) not in _NUMBER_TYPES or not _finite(timestamp)):
        raise MetricsFileError(f"{path}: timestamp must be a number of seconds, got {timestamp!r}")
    return metrics, timestamp, wrapped


def _check_without_points(path: Path, raw: bytes) -> MetricsFile | None:
    """The check for a file whose series are all well-formed and in time order, without a list per
    point: None whenever it cannot vouch for the file (the full parse then decides and names the
    error). Each series ``[[t,v],...]`` outside a string is checked in three whole-buffer steps:
    its bytes less digits, number signs and whitespace must be exactly ``[[,],...,[,]]``; with the
    brackets blanked it must parse as one flat JSON array (each number strictly, as the runner
    parses it); and the flat list's times must be in order and its sums finite. The file with each
    series replaced by a placeholder ``[[i]]`` (which no series left in it can be) is then parsed and
    read as the full check reads it."""
    if b"\\" in raw:
        return None  # an escaped quote would hide where strings end
    pieces: list[bytes] = []
    newest: list[Any] = []
    position = quotes = 0
    while (start := _SERIES_START.search(raw, position)) is not None:
        quotes += raw.count(b'"', position, start.start())
        end = _SERIES_END.search(raw, start.end())
        if quotes % 2 or end is None:
            return None  # a "[[" inside a string, or a series that never closes
        last = _check_flat_series(raw[start.start() : end.end()])
        if last is None:
            return None
        pieces += (raw[position : start.start()], b"[[%d]]" % len(newest))
        newest.append(last)
        position = end.end()
    try:
        data = wire.loads(b"".join(pieces) + raw[position:])
        metrics, timestamp, wrapped = _split(path, data)
    except (ValueError, MetricsFileError):
        return None
    found = []
    for series in metrics.values():
        if type(series) is not list or (series and not _is_placeholder(series)):
            return None  # a series the check above did not see: let the full check judge it
        if series:
            found.append(series[0][0])
    if found != list(range(len(newest))):
        return None  # a series placed elsewhere (a duplicate key, under "timestamp"): the full parse decides
    return MetricsFile(path, raw, timestamp, wrapped, max(newest) if newest else None)


def _is_placeholder(series: list[Any]) -> bool:
    return len(series) == 1 and type(series[0]) is list and len(series[0]) == 1 and type(series[0][0]) is int


def _check_flat_series(text: bytes) -> Any:
    """The newest time of one ``[[t,v],...]`` series whose points are finite numbers in time order,
    or None when it is not one (or not in order)."""
    shape = text.translate(None, _NUMBER_BYTES)
    points = shape.count(b",]")
    if not points or shape != b"[" + b"[,]," * (points - 1) + b"[,]]":
        return None
    try:
        flat = wire.loads(b"[" + text.translate(_BRACKETS_TO_SPACES) + b"]")
    except ValueError:
        return None
    stamps, values = flat[0::2], flat[1::2]
    if len(stamps) != points or len(values) != points:
        return None
    # Only numbers can come out of these bytes; finite if their sums are (else: the full check names it)
    if not (_finite_sum(stamps) and _finite_sum(values)):
        return None
    if not all(map(operator.le, stamps, islice(stamps, 1, None))):
        return None
    return stamps[-1]


def _finite_sum(numbers: list[Any]) -> bool:
    """True when every number is finite (the sum of finite numbers overflows only when one is huge)."""
    try:
        return math.isfinite(sum(numbers))
    except OverflowError:  # an integer beyond a float's range
        return False


def _finite(number: float) -> bool:
    """``math.isfinite`` that says False, not OverflowError, for an integer too large for a float."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


def check_series(path: Path, name: str, series: Any) -> bool:
    """Raise MetricsFileError for a malformed series; True when it is out of time order.

    Whole-list operations (``map`` over C functions, ``sorted`` of an already sorted list is one
    linear pass): a million points cost tens of milliseconds, not a Python loop's second.
    """
    if type(series) is not list:
        raise MetricsFileError(f"{path}: metric {name!r} must be a list of [timestamp, value] pairs")
    if not series:
        return False
    if set(map(type, series)) != {list} or set(map(len, series)) != {2}:
        i = next(i for i, p in enumerate(series) if type(p) is not list or len(p) != 2)
        raise MetricsFileError(f"{path}: metric {name!r} point {i}: expected [timestamp, value], got {series[i]!r}")
    stamps = list(map(itemgetter(0), series))
    values = list(map(itemgetter(1), series))
    for what, column in (("timestamp", stamps), ("value", values)):
        # The sum of numbers is finite when each is (the parser refused NaN; 1e999 reads as inf);
        # only a sum that overflows looks at each number, to find the bad one or none.
        if not set(map(type, column)) <= _NUMBER_TYPES or not _finite_sum(column):
            bad = [i for i, v in enumerate(column) if type(v) not in _NUMBER_TYPES or not _finite(v)]
            for i in bad[:1]:
                raise MetricsFileError(
                    f"{path}: metric {name!r} point {i}: the {what} must be a finite number, got {column[i]!r}"
                )
    return not all(map(operator.le, stamps, islice(stamps, 1, None)))


def _where(raw: bytes, error: ValueError) -> str:
    """``line L column C: `` of a refused NaN/Infinity (the parser's hook does not say where)."""
    pos = getattr(error, "pos", None)
    if pos is None and ("NaN" in str(error) or "Infinity" in str(error)):
        match = _CONSTANT.search(raw)
        pos = match.start(1) if match else None
        if pos is not None:
            line = raw.count(b"\n", 0, pos) + 1
            column = pos - (raw.rfind(b"\n", 0, pos) + 1) + 1
            return f"line {line} column {column}: "
    return ""
