"""One way to print a moment and one way to read one, for every output and input that names a time.

Printed: ISO 8601 in UTC with ``Z``, to the second (``2026-11-23T08:41:07Z``); lines of which several
fall in one second (event lines, log records) add milliseconds (``2026-11-23T08:41:07.123Z``).
Digits are cut, never rounded, so a printed time is never later than the moment.

Read (``parse_time``): Unix seconds (a number or a numeric string), an ISO 8601 / RFC 3339 string
(UTC unless it says otherwise; ``T``/``Z`` in either case, a date alone is its midnight UTC), a
``datetime``/``date`` (YAML timestamps), or a pickled ``arrow.Arrow`` (``{"timestamp": T}``, as in
Clusterman's metrics files). Moments before 1970 and non-finite numbers are refused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC
from datetime import date
from datetime import datetime
from typing import Any

EXAMPLE = "2026-11-23T08:41:07Z"
EXPECTED = f"Unix seconds or an ISO 8601 time such as {EXAMPLE}"
_SECONDS = "%Y-%m-%dT%H:%M:%S"
# A printed time as a regular expression, for the readers of our own lines (``make run`` tells the
# autoscaler's run lines, stamped to the second, from its log records, stamped to the millisecond).
PRINTED_SECONDS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"
PRINTED_MILLISECONDS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def format_time(seconds: float, digits: int = 0) -> str:
    """``seconds`` (Unix) as ISO 8601 UTC with ``Z``; ``digits`` (0-6) of the fraction of a second."""
    try:
        moment = datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, ValueError, OSError):
        return f"{seconds!r} (out of range)"
    fraction = f".{moment.microsecond:06d}"[: digits + 1] if digits > 0 else ""
    return moment.strftime(_SECONDS) + fraction + "Z"


def parse_time(value: Any, where: str = "") -> float:
    """Unix seconds (finite, >= 0) from any form above, or ValueError (led by ``where``) saying which
    forms are read."""
    lead = f"{where}: " if where else ""
    if isinstance(value, Mapping) and "timestamp" in value:  # an arrow.Arrow, pickled by jsonpickle
        value = value["timestamp"]
    seconds: float | None = None
    if isinstance(value, bool):
        pass
    elif isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, datetime):
        seconds = (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    elif isinstance(value, date):
        seconds = datetime(value.year, value.month, value.day, tzinfo=UTC).timestamp()
    elif isinstance(value, str):
        seconds = _parse_text(value.strip())
    if seconds is None:
        raise ValueError(f"{lead}must be {EXPECTED}, got {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{lead}must be {EXPECTED} (finite, not before 1970), got {value!r}")
    return seconds


def _parse_text(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.upper())
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
