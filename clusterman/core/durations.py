"""One duration grammar for every place a person writes one (srv-configs, metric designs, pauses),
and the one way a duration is printed (``format_duration``, which the grammar reads back).

A number is seconds (``90``, ``1.5``). Otherwise a sequence of ``<number><unit>`` parts, spaces
allowed between them: Go's units as Escalator writes them (``ns``, ``us``/``µs``, ``ms``, ``s``,
``m``, ``h``) plus ``d`` and ``w`` (``90s``, ``2m``, ``1h30m``, ``1d 12h``, ``2w``), and the unit
words Clusterman's parser took (``3 minutes``, ``2 hours``, ``1 day``, ``30 secs``), so its pool
files load unchanged.
"""

from __future__ import annotations

import math
import re
from typing import Any

UNIT_SECONDS = {
    "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0,
}  # fmt: skip
WORD_UNIT = {
    "seconds": "s", "second": "s", "secs": "s", "sec": "s",
    "minutes": "m", "minute": "m", "mins": "m", "min": "m",
    "hours": "h", "hour": "h", "hrs": "h", "hr": "h",
    "days": "d", "day": "d", "weeks": "w", "week": "w",
}  # fmt: skip
# Longest first, so "minutes" is not read as "m" followed by garbage.
_UNITS = "|".join(sorted([*UNIT_SECONDS, *WORD_UNIT], key=len, reverse=True))
_PART = re.compile(rf"\s*(\d+(?:\.\d*)?|\.\d+)\s*({_UNITS})\s*")
EXAMPLES = "90s, 2m, 1h30m, 1d 12h or 90 (seconds)"


def parse_duration(value: Any) -> float:
    """Seconds (finite, >= 0), or ValueError naming the grammar."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a duration such as {EXAMPLES}, got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            parts = list(_PART.finditer(text))
            if not parts or "".join(p.group(0) for p in parts) != text:
                raise ValueError(f"expected a duration such as {EXAMPLES}, got {value!r}") from None
            seconds = sum(float(p.group(1)) * UNIT_SECONDS[WORD_UNIT.get(p.group(2), p.group(2))] for p in parts)
    else:
        seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"expected a finite duration >= 0, got {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """Whole seconds in the grammar's units, largest first: ``90`` -> ``1m30s``, ``93784`` ->
    ``1d2h3m4s``, ``0`` -> ``0s`` (rounded to the second; ``parse_duration`` reads it back)."""
    left = max(0, round(seconds))
    parts: list[str] = []
    for unit in ("d", "h", "m", "s"):
        size = int(UNIT_SECONDS[unit])
        if left >= size or (unit == "s" and not parts):
            parts.append(f"{left // size}{unit}")
            left %= size
    return "".join(parts)
