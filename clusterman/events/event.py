"""What one event says: the record, and the enumerations of what can change and why.

The shape is YuniKorn's tracking event (seed 003) adapted to an autoscaler: a *type* names the
kind of object (a signal, the pool's decision, a resource group, a node, ...), a *change type*
says how it changed (SET = the resource is an absolute value, ADD/REMOVE = the resource is a
positive delta, NONE = nothing measurable changed), and a *change detail* says why. Details are
grouped by type: a detail's value divided by 100 is its type's value, so a detail can only be
used with its own type (or DETAILS_NONE with any).

Resource amounts carry the units of ``clusterman.core.resources`` (cpus in shares, mem and disk in
MB, gpus in devices) plus ``capacity`` (resource-group weight units, as in target capacity) and
``nodes`` (a count). At most ``MAX_RESOURCE_KEYS`` of them per event, which bounds the ring's
memory per event.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from typing import Final


class EventType(enum.IntEnum):
    """The kind of object ``objectID`` names."""

    UNKNOWN = 0
    SIGNAL = 1  # an application's signal; objectID = app
    DECISION = 2  # the pool's scaling decision; objectID = pool
    GROUP = 3  # a resource group (ASG, Spot Fleet); objectID = group id
    NODE = 4  # one machine; objectID = node or instance id
    LOCK = 5  # the scale lock; objectID = pool
    BREAKER = 6  # the scale-up breaker; objectID = pool
    POOL = 7  # the pool as a whole (pause, resume); objectID = pool
    CONFIG = 8  # a configuration file; objectID = path
    ERROR = 9  # an error from outside (cloud, scheduler); objectID = what it was about


class ChangeType(enum.IntEnum):
    NONE = 0
    SET = 1  # resource is the new absolute value
    ADD = 2  # resource is the positive amount added
    REMOVE = 3  # resource is the positive amount removed


class ChangeDetail(enum.IntEnum):
    """Why the object changed; the hundreds digit is the EventType it belongs to."""

    DETAILS_NONE = 0
    SIGNAL_REQUEST = 100  # the signal answered; resource = its request; message = latency
    SIGNAL_FAILED = 101  # the signal failed; message = the error
    SIGNAL_FALLBACK = 102  # the request used instead of a failed signal's; referenceID = its source
    DECISION_UTILISATION = 200  # utilisation against the setpoint decided
    DECISION_MIN_CAPACITY = 201  # raised to the pool's minimum
    DECISION_MAX_CAPACITY = 202  # clamped to the pool's maximum
    DECISION_SCALE_LOCK = 203  # no change at all: the scale lock (after a scale-up) holds every change
    DECISION_BREAKER = 204  # scale-up held back by the open breaker
    DECISION_PAUSED = 205  # no change: the pool is paused
    DECISION_NO_DEMAND = 206  # no change: no usable signal answered
    DECISION_CAPACITY_LOSS = 207  # scale-down held back after capacity was lost
    DECISION_STEP_LIMIT = 208  # the change was limited by max_weight_to_add / max_weight_to_remove
    DECISION_HELD = 209  # scale-down held back: part of the pool could not be read this run
    DECISION_NO_GROUPS = 210  # nothing to scale: no resource group, or all stale
    DECISION_ERROR = 211  # no change: the run failed before deciding (the message says where)
    DECISION_STANDBY = 212  # no change: another autoscaler holds the pool's lease (message: who)
    DECISION_OVERRUN = 213  # the run took longer than its budget; it acted on nothing older
    DECISION_CONSOLIDATION = 214  # consolidation removed a node whose pods fit elsewhere
    GROUP_TARGET = 300  # the group's target capacity was set; referenceID = the pool
    NODE_JOIN = 400  # a node joined the scheduler; referenceID = its group
    NODE_UNTAINT = 401  # a tainted node was put back in service
    NODE_TAINT = 402  # a node was tainted (no new work) ahead of removal
    NODE_DRAIN = 403  # a node's work is being moved away
    NODE_TERMINATE = 404  # a node was terminated
    NODE_ORPHAN = 405  # an instance that never joined was cleaned up
    NODE_CONSOLIDATE = 406  # consolidation drains the node, to remove it or to keep it as free places
    NODE_NOTICE = 407  # a notice says the node must go (a Spot interruption, a migration): message = why, when
    NODE_DRAIN_GIVEN_UP = 408  # a drain did not finish in time: the node is back in the pool (message: why)
    LOCK_TAKEN = 500
    LOCK_RELEASED = 501
    BREAKER_OPEN = 600
    BREAKER_CLOSED = 601
    POOL_PAUSE = 700
    POOL_RESUME = 701
    POOL_MIGRATION = 702  # a node migration started, moved on or ended; objectID = pool, referenceID = which
    CONFIG_RELOAD = 800  # a changed file was loaded and is in use
    CONFIG_REJECTED = 801  # a changed file was invalid; the previous one stays in use
    ERROR_CLOUD = 900  # the cloud provider failed a call
    ERROR_SCHEDULER = 901  # the scheduler (Kubernetes, Mesos) failed a call
    ERROR_INTERNAL = 902  # clusterman itself failed (a bug): the loop went on

    @property
    def event_type(self) -> EventType:
        """The type this detail belongs to (UNKNOWN for DETAILS_NONE, which fits every type)."""
        return _DETAIL_TYPE[self]


_DETAIL_TYPE: Final = {d: EventType(d.value // 100) for d in ChangeDetail}


RESOURCE_KEYS: Final = ("cpus", "mem", "disk", "gpus", "capacity", "nodes")
MAX_RESOURCE_KEYS: Final = 4
MAX_MESSAGE_CHARS: Final = 1024
_ELLIPSIS: Final = "…"

Resource = tuple[tuple[str, float], ...]
NO_RESOURCE: Final[Resource] = ()


def resource(amounts: Mapping[str, float] | None = None, **more: float) -> Resource:
    """A resource value from a mapping or keywords, in ``RESOURCE_KEYS`` order.

    A negative amount is a bug in the caller (ADD/REMOVE carry positive deltas), so it raises.
    """
    merged = {**(amounts or {}), **more}
    unknown = set(merged) - set(RESOURCE_KEYS)
    if unknown:
        raise ValueError(f"unknown resource key(s) {sorted(unknown)}: known are {', '.join(RESOURCE_KEYS)}")
    if len(merged) > MAX_RESOURCE_KEYS:
        raise ValueError(f"an event carries at most {MAX_RESOURCE_KEYS} resource amounts, got {sorted(merged)}")
    pairs = []
    for key in RESOURCE_KEYS:
        if key in merged:
            value = float(merged[key])
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"resource {key} must be a finite amount of at least 0, got {merged[key]!r}")
            pairs.append((key, value))
    return tuple(pairs)


def clip_message(message: str) -> str:
    """Messages are capped so one chatty error cannot blow the memory budget."""
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return message[: MAX_MESSAGE_CHARS - len(_ELLIPSIS)] + _ELLIPSIS


@dataclass(frozen=True, slots=True)
class Event:
    """One thing the autoscaler did or saw. Built by ``Recorder``; the ring assigns the id."""

    type: EventType
    change: ChangeType
    detail: ChangeDetail
    timestamp_ns: int
    object_id: str
    reference_id: str = ""
    resource: Resource = NO_RESOURCE
    message: str = ""

    def __post_init__(self) -> None:
        if self.detail and _DETAIL_TYPE[self.detail] is not self.type:
            raise ValueError(
                f"change detail {self.detail.name} belongs to {self.detail.event_type.name}, not {self.type.name}"
            )
        if len(self.message) > MAX_MESSAGE_CHARS:
            object.__setattr__(self, "message", clip_message(self.message))
        if self.resource and self.change is ChangeType.NONE:
            raise ValueError(f"{self.detail.name}: a resource needs a change type (SET, ADD or REMOVE), not NONE")


@dataclass(frozen=True, slots=True)
class EventRecord:
    """An event as stored: its id is unique and increasing from 0 within one process start."""

    id: int
    event: Event

    def to_json(self) -> dict[str, Any]:
        """The wire form used by every endpoint; every record carries its id."""
        e = self.event
        return {
            "id": self.id,
            "type": e.type.name,
            "eventChangeType": e.change.name,
            "eventChangeDetail": e.detail.name,
            "timestampNano": e.timestamp_ns,
            "objectID": e.object_id,
            "referenceID": e.reference_id,
            "resource": dict(e.resource),
            "message": e.message,
        }


def record_from_json(data: Mapping[str, Any]) -> EventRecord:
    """Read a record back (the CLI and tests); unknown enum names are an error naming the field."""
    try:
        event = Event(
            type=EventType[data["type"]],
            change=ChangeType[data["eventChangeType"]],
            detail=ChangeDetail[data["eventChangeDetail"]],
            timestamp_ns=int(data["timestampNano"]),
            object_id=str(data["objectID"]),
            reference_id=str(data.get("referenceID", "")),
            resource=resource(data.get("resource") or {}),
            message=str(data.get("message", "")),
        )
        return EventRecord(int(data["id"]), event)
    except KeyError as e:
        raise ValueError(f"event record: missing or unknown {e.args[0]!r} in {dict(data)!r}") from e
