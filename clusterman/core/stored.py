"""Checks for values read back from the state store: JSON an earlier run wrote, or a hand edit."""

from __future__ import annotations

import math
from typing import Any
from typing import TypeGuard


def is_amount(value: Any) -> TypeGuard[int | float]:
    """A finite number >= 0 (a time, a count, a capacity); JSON's true and false are not numbers."""
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value) and value >= 0
