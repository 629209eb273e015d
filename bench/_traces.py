"""Week-long CPU demand traces for the decision-quality scoreboard (``bench/scoreboard.py``).

Each is a list of CPUs per minute, drawn from its own seeded generator, so a trace is the same in
every run. Shapes, in CPUs (the pool runs 8-CPU instances):
  diurnal  a working day (400 ± 250, peak 15:00 UTC) Monday to Friday, a quieter weekend (250 ±
           100), noise of about 2% that persists for a few minutes, and short bursts
  flash    300 with a mild daily swing and noise; four flash crowds of +150 to +300 CPUs in under a
           minute, lasting 20 to 90 minutes, at random times
  batch    150 of services plus a batch wave every 6 hours (±2 minutes): +350 CPUs in 3 minutes
           for 40 minutes, the first hour of each wave fading out
  growth   100 growing to 500 over the week, a small daily swing and noise
  walk     a random walk (±4 CPUs a minute) between 120 and 600, plus noise
  steps    a level that jumps, every 3 hours on average at random times, to a level drawn
           between 120 and 480, plus noise: neither periodic nor gradual (a pool shared by a few
           large jobs that start and stop)
  noisy    300 with a mild daily swing and noise of 6% that hardly persists: the spare is all
           noise
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

MINUTES_PER_DAY = 24 * 60
START = 1709510400  # 2024-03-04T00:00:00Z, a Monday

# (stddev, persistence) of each trace's multiplicative noise: an AR(1) series around 1
NOISE = {
    "diurnal": (0.02, 0.7),
    "flash": (0.02, 0.7),
    "batch": (0.02, 0.7),
    "growth": (0.02, 0.7),
    "walk": (0.01, 0.3),
    "steps": (0.02, 0.7),
    "noisy": (0.06, 0.5),
}
BURSTS = (1 / 240, 10.0, 40.0)  # diurnal: the chance a burst starts in a minute, its CPUs from .. to
CROWDS = (4, 150.0, 300.0)  # flash: crowds in a trace, their CPUs from .. to
WALK_STEP = 4.0  # walk: stddev of the level's step in a minute, CPUs
STEPS = (1 / 180, 120.0, 480.0)  # steps: the chance the level jumps in a minute, its levels from .. to
SURPRISING = ("diurnal", "flash")  # the traces with events no forecast sees coming
# the unforeseeable events of a trace: (first minute, the CPUs it adds in each minute from then on)
Events = list[tuple[int, list[float]]]


def _noise(rng: random.Random, minutes: int, share: float, keep: float = 0.7) -> list[float]:
    """Multiplicative noise around 1 that persists (AR(1) with ``keep``), stddev ``share``."""
    out, x = [], 0.0
    spread = share * math.sqrt(1 - keep * keep)
    for _ in range(minutes):
        x = keep * x + rng.gauss(0, spread)
        out.append(1 + x)
    return out


def _daily(minute: int, peak_hour: float) -> float:
    """cos over the day, 1 at ``peak_hour`` UTC, -1 twelve hours later."""
    return math.cos(2 * math.pi * ((minute % MINUTES_PER_DAY) / 60 - peak_hour) / 24)


def diurnal(minutes: int, rng: random.Random, events: Events | None = None) -> list[float]:
    """``events``: filled with the bursts, when given."""
    noise = _noise(rng, minutes, *NOISE["diurnal"])
    chance, least, most = BURSTS
    out = []
    burst_until, burst = -1, 0.0
    for m in range(minutes):
        weekend = (m // MINUTES_PER_DAY) % 7 >= 5
        base, amplitude = (250.0, 100.0) if weekend else (400.0, 250.0)
        if m > burst_until and rng.random() < chance:  # a burst every four hours or so
            burst_until, burst = m + rng.randint(3, 15), rng.uniform(least, most)
            if events is not None:
                events.append((m, []))
        extra = burst if m <= burst_until else 0.0
        if extra and events is not None:
            events[-1][1].append(extra)
        out.append((base + amplitude * _daily(m, 15)) * noise[m] + extra)
    return out


def flash(minutes: int, rng: random.Random, events: Events | None = None) -> list[float]:
    """``events``: filled with the crowds, when given."""
    noise = _noise(rng, minutes, *NOISE["flash"])
    count, least, most = CROWDS
    crowds = []
    for _ in range(count):
        at = rng.randint(MINUTES_PER_DAY // 2, minutes - 120)
        crowds.append((at, at + rng.randint(20, 90), rng.uniform(least, most)))
    out = []
    for m in range(minutes):
        level = 300 + 60 * _daily(m, 14)
        for start, end, size in crowds:
            if start <= m < end:
                level += size * min(1.0, (end - m) / 10)  # a crowd thins out over its last 10 minutes
        out.append(level * noise[m])
    if events is not None:
        for start, end, size in sorted(crowds):
            events.append((start, [size * min(1.0, (end - m) / 10) * noise[m] for m in range(start, end)]))
    return out


def batch(minutes: int, rng: random.Random) -> list[float]:
    noise = _noise(rng, minutes, *NOISE["batch"])
    period, waves = 360, []
    for k in range(minutes // period + 1):
        waves.append(k * period + 30 + rng.randint(-2, 2))
    out = []
    for m in range(minutes):
        level = 150.0
        for start in waves:
            into = m - start
            if 0 <= into < 3:
                level += 350 * (into + 1) / 3
            elif 3 <= into < 40:
                level += 350
            elif 40 <= into < 100:
                level += 350 * 0.3 * (100 - into) / 60
        out.append(level * noise[m])
    return out


def growth(minutes: int, rng: random.Random) -> list[float]:
    noise = _noise(rng, minutes, *NOISE["growth"])
    return [(100 + 400 * m / minutes) * (1 + 0.15 * _daily(m, 16)) * noise[m] for m in range(minutes)]


def walk(minutes: int, rng: random.Random) -> list[float]:
    noise = _noise(rng, minutes, *NOISE["walk"])
    level, out = 300.0, []
    for m in range(minutes):
        level = min(600.0, max(120.0, level + rng.gauss(0, WALK_STEP)))
        out.append(level * noise[m])
    return out


def steps(minutes: int, rng: random.Random) -> list[float]:
    noise = _noise(rng, minutes, *NOISE["steps"])
    chance, least, most = STEPS
    level, out = 300.0, []
    for m in range(minutes):
        if rng.random() < chance:
            level = rng.uniform(least, most)
        out.append(level * noise[m])
    return out


def noisy(minutes: int, rng: random.Random) -> list[float]:
    noise = _noise(rng, minutes, *NOISE["noisy"])
    return [(300 + 60 * _daily(m, 13)) * noise[m] for m in range(minutes)]


TRACES: dict[str, Callable[..., list[float]]] = {
    "diurnal": diurnal,
    "flash": flash,
    "batch": batch,
    "growth": growth,
    "walk": walk,
    "steps": steps,
    "noisy": noisy,
}


def raw(name: str, days: float, seed: int = 1) -> list[float]:
    """The trace's CPUs per minute as drawn (``trace`` rounds them and floors them at 0)."""
    return draw(name, days, seed)[0]


def draw(name: str, days: float, seed: int = 1) -> tuple[list[float], Events]:
    """``raw`` and ``surprises`` from one run of the generator."""
    events: Events = []
    rng = random.Random(f"{name}-{seed}")
    minutes = int(days * MINUTES_PER_DAY)
    values = TRACES[name](minutes, rng, events) if name in SURPRISING else TRACES[name](minutes, rng)
    return values, events


def noise(name: str, days: float, seed: int = 1) -> list[float]:
    """The multiplicative noise ``trace(name, days, seed)`` was drawn with: each generator draws it
    first from the trace's own generator."""
    return _noise(random.Random(f"{name}-{seed}"), int(days * MINUTES_PER_DAY), *NOISE[name])


def trace(name: str, days: float, seed: int = 1) -> list[tuple[int, float]]:
    """(Unix seconds, CPUs) per minute from ``START``."""
    return [(START + 60 * m, round(max(v, 0.0), 2)) for m, v in enumerate(raw(name, days, seed))]


def surprises(name: str, days: float, seed: int = 1) -> Events:
    """The events of ``trace(name, days, seed)`` that no forecast sees coming: diurnal's bursts and
    flash's crowds; none for the other traces (batch's waves come every 6 hours)."""
    return draw(name, days, seed)[1]
