"""Resource amounts and resource requests, with their units written down once.

Units (the same everywhere in clusterman, and the same as Mesos and Yelp's Clusterman):
  cpus  -- CPU shares (1.0 = one core; Kubernetes' "500m" is 0.5)
  mem   -- megabytes (MB, 10**6 bytes; Kubernetes quantities are converted on the way in)
  disk  -- megabytes (MB)
  gpus  -- whole devices, as a float so the arithmetic is uniform

A *request* is what a signal asks for: each resource is either an amount or explicitly
``NO_OPINION``. A *Resources* value is a plain amount of each resource (capacity, usage).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import fields
from typing import Final

RESOURCE_NAMES: Final = ("cpus", "mem", "disk", "gpus")
UNITS: Final = {"cpus": "shares", "mem": "MB", "disk": "MB", "gpus": "devices"}
PLACES: Final = 6  # decimal places of an exact amount (decision/exact.py): a micro-CPU, a byte in MB
MICRO: Final = 10**PLACES  # amounts counted in integer millionths of their unit


class NoOpinion(enum.Enum):
    """A signal that says nothing about a resource: not zero, just silent."""

    NO_OPINION = "no opinion"

    def __repr__(self) -> str:
        return "NO_OPINION"


NO_OPINION: Final = NoOpinion.NO_OPINION
Amount = float | NoOpinion


@dataclass(frozen=True, init=False)
class Resources:
    """An amount of every resource; missing resources are zero.

    Made dozens of times a simulated minute (every node's sums, every pool total), so the fields
    are written straight into the instance's dict, half the cost of a frozen dataclass's
    ``__init__``, and the arithmetic names each field rather than zipping iterators."""

    cpus: float = 0.0
    mem: float = 0.0
    disk: float = 0.0
    gpus: float = 0.0

    def __init__(self, cpus: float = 0.0, mem: float = 0.0, disk: float = 0.0, gpus: float = 0.0) -> None:
        fields = self.__dict__
        fields["cpus"], fields["mem"], fields["disk"], fields["gpus"] = cpus, mem, disk, gpus

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpus + other.cpus, self.mem + other.mem, self.disk + other.disk, self.gpus + other.gpus)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpus - other.cpus, self.mem - other.mem, self.disk - other.disk, self.gpus - other.gpus)

    def __mul__(self, factor: float) -> Resources:
        return Resources(self.cpus * factor, self.mem * factor, self.disk * factor, self.gpus * factor)

    def __iter__(self) -> Iterator[float]:
        return iter((self.cpus, self.mem, self.disk, self.gpus))

    def __getitem__(self, name: str) -> float:
        if name not in RESOURCE_NAMES:
            raise KeyError(name)
        value: float = getattr(self, name)
        return value

    def items(self) -> Iterator[tuple[str, float]]:
        return zip(RESOURCE_NAMES, self, strict=True)

    def clip_negative(self) -> Resources:
        return Resources(*(max(0.0, a) for a in self))

    def maximum(self, other: Resources) -> Resources:
        return Resources(*(max(a, b) for a, b in zip(self, other, strict=True)))

    def as_dict(self) -> dict[str, float]:
        return dict(self.items())

    @staticmethod
    def total(values: Iterable[Resources]) -> Resources:
        cpus = mem = disk = gpus = 0.0
        for r in values:
            cpus += r.cpus
            mem += r.mem
            disk += r.disk
            gpus += r.gpus
        return Resources(cpus, mem, disk, gpus)

    @staticmethod
    def from_mapping(values: Mapping[str, float]) -> Resources:
        unknown = set(values) - set(RESOURCE_NAMES)
        if unknown:
            raise ValueError(f"unknown resource(s): {', '.join(sorted(unknown))}")
        return Resources(**{k: float(v) for k, v in values.items()})


@dataclass(frozen=True)
class ResourceRequest:
    """What one application asks of the pool; each resource is an amount or NO_OPINION."""

    cpus: Amount = NO_OPINION
    mem: Amount = NO_OPINION
    disk: Amount = NO_OPINION
    gpus: Amount = NO_OPINION

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is NO_OPINION:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{f.name}: expected a number or no opinion, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{f.name}: expected a finite number >= 0, got {value!r}")
            object.__setattr__(self, f.name, float(value))

    def opinions(self) -> dict[str, float]:
        """The resources this request has an opinion on, with their amounts."""
        out: dict[str, float] = {}
        for name in RESOURCE_NAMES:
            value = getattr(self, name)
            if not isinstance(value, NoOpinion):
                out[name] = value
        return out

    def has_opinion(self) -> bool:
        return bool(self.opinions())

    def is_all_zero(self) -> bool:
        """True when the request has opinions and every one of them is zero."""
        opinions = self.opinions()
        return bool(opinions) and all(v == 0 for v in opinions.values())

    def __add__(self, other: ResourceRequest) -> ResourceRequest:
        """Sum per resource; NO_OPINION is the identity (an opinion plus silence is that opinion)."""
        summed: dict[str, Amount] = {}
        for name in RESOURCE_NAMES:
            a, b = getattr(self, name), getattr(other, name)
            if isinstance(a, NoOpinion):
                summed[name] = b
            elif isinstance(b, NoOpinion):
                summed[name] = a
            else:
                summed[name] = a + b
        return ResourceRequest(**summed)

    def as_json(self) -> dict[str, float | None]:
        """The wire form: NO_OPINION becomes null, as the signal protocol spells it."""
        return {name: (None if v is NO_OPINION else v) for name, v in zip(RESOURCE_NAMES, self._values(), strict=True)}

    def _values(self) -> tuple[Amount, ...]:
        return (self.cpus, self.mem, self.disk, self.gpus)

    @staticmethod
    def total(requests: Iterable[ResourceRequest]) -> ResourceRequest:
        out = ResourceRequest()
        for r in requests:
            out = out + r
        return out

    def __str__(self) -> str:
        parts = [f"{name}={value:g}" for name, value in self.opinions().items()]
        return "{" + ", ".join(parts) + "}" if parts else "{no opinion}"
