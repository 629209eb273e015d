"""``--compare RUN.json``: this run and an earlier one side by side, figure by figure."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from clusterman.errors import UserError
from clusterman.simulator.report import FORMAT


class CompareError(UserError):
    """The run to compare with cannot be read; the message names the file."""


def load_summary(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except OSError as e:
        raise CompareError(f"--compare {path}: cannot read: {e.strerror}") from e
    except ValueError as e:
        raise CompareError(f"--compare {path}: not JSON: {e}") from e
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CompareError(f'--compare {path}: not a simulation summary (no "format": "{FORMAT}")')
    return document


def side_by_side(this: dict[str, Any], other: dict[str, Any], other_name: str) -> str:
    """One line per figure either run has: its value in each run, and the change (numbers only)."""
    mine, theirs = dict(_leaves(this)), dict(_leaves(other))
    names = [n for n in dict.fromkeys([*mine, *theirs]) if n != "format"]
    rows = [("", "this run", other_name, "change")]
    for name in names:
        a, b = mine.get(name), theirs.get(name)
        rows.append((name, _show(a), _show(b), _change(a, b)))
    widths = [max(len(row[k]) for row in rows) for k in range(4)]
    return (
        "\n".join(
            f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]:>{widths[3]}}".rstrip() for r in rows
        )
        + "\n"
    )


def _leaves(document: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key in sorted(document):
        value = document[key]
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield prefix + key, value


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.4f}".rstrip("0").rstrip(".")
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "-"
    return str(value)


def _change(a: Any, b: Any) -> str:
    """How this run differs from the other: a percentage of the other's value, or = / ≠."""
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        if a == b:
            return "="
        return f"{(a - b) / abs(b):+.1%}" if b else f"{a - b:+g}"
    return "=" if a == b else "differs"
