"""Exact numbers for the capacity math, so a ceiling never rounds up a floating-point artefact.

Clusterman computed targets in floats and met artefacts such as 42 / 0.7 = 60.00000000000001,
whose ceiling is one unit too many. Here every figure that reaches a comparison or a ceiling is a
``Fraction`` of the decimal the number stands for: a float is rounded to ``PLACES`` decimal places
(a micro-CPU, a byte in MB) and read back from its shortest decimal form, so 0.7 becomes 7/10.
Per-pod and per-node sums stay in floats (fast) and are made exact once, as totals.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

from clusterman.core.resources import MICRO
from clusterman.core.resources import PLACES

# PLACES and MICRO (core/resources.py): per-node loops count weight in integer millionths, exact
# and far faster than Fraction
ZERO = Fraction(0)


def exact(value: float | int | Fraction) -> Fraction:
    """The decimal ``value`` stands for, to ``PLACES`` places, as an exact fraction."""
    if type(value) is not float:  # exact types first: a check against Fraction's ABC costs more
        if isinstance(value, Fraction):
            return value
        if isinstance(value, int):
            return Fraction(value)
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value!r}")
    return _decimal(value)


@functools.lru_cache(maxsize=4096)
def _decimal(value: float) -> Fraction:
    """Remembered: a pool's totals and weights repeat from run to run, and parsing costs microseconds."""
    if value.is_integer():
        return Fraction(int(value))
    return Fraction(repr(round(value, PLACES)))


def micro(value: float | Fraction) -> int:
    """``value`` in integer millionths of a unit (exact for every figure ``exact`` produces)."""
    if type(value) is Fraction:  # the rounding of round(value * MICRO), in ints, without a Fraction made
        n, d = value.numerator * MICRO, value.denominator
        q, r = divmod(n, d)
        return q + 1 if 2 * r > d or (2 * r == d and q % 2) else q
    return round(value * MICRO)


def from_micro(units: int) -> Fraction:
    return Fraction(units, MICRO)


def ceil(value: Fraction) -> int:
    return math.ceil(value)


def number(value: Fraction) -> int | float:
    """A plain JSON number: an int when whole, else a float rounded to ``PLACES`` places."""
    if value.denominator == 1:
        return int(value)
    return round(float(value), PLACES)


def show(value: Fraction) -> str:
    """A short human form for explanations: whole numbers as such, else up to two decimals."""
    if value.denominator == 1:
        return str(int(value))
    text = f"{float(value):.2f}".rstrip("0").rstrip(".")
    return text or "0"


def percent(value: Fraction) -> str:
    """``show(value * 100)``, in ints: the float of a quotient of ints is the same however reduced."""
    n, d = value.numerator * 100, value.denominator
    if n % d == 0:
        return str(n // d)
    text = f"{n / d:.2f}".rstrip("0").rstrip(".")
    return text or "0"


def signed(value: Fraction) -> str:
    return f"+{show(value)}" if value > 0 else show(value) if value < 0 else "±0"
