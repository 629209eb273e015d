"""Simulated time: every adapter reads the one clock, and only the simulation moves it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

STEP_SECONDS = 60  # the simulation advances, and accounts, one minute at a time


class SimClock:
    """Callable like ``time.time`` (simulated groups take it as their clock), but set by the run."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class Steps:
    """The minutes of a run: ``start``, ``start + step``, ... up to but not including ``end`` (Unix seconds)."""

    start: int
    end: int
    step_seconds: int = STEP_SECONDS

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise ValueError(f"the run must end after it starts (start {self.start}, end {self.end})")

    def __len__(self) -> int:
        return -(-(self.end - self.start) // self.step_seconds)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.end, self.step_seconds))

    @property
    def step_hours(self) -> float:
        return self.step_seconds / 3600
