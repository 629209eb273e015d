"""EventBridge events, in AWS's own shapes, turned into notices (docs/node_lifecycle.md).

  EC2 Spot Instance Interruption Warning   spot_interruption, deadline: the event's time + 120 s
  EC2 Instance Rebalance Recommendation    rebalance_recommendation (what to do: the ``rebalance`` policy)
  AWS Health Event (scheduledChange, EC2)  scheduled_change, deadline: the event's startTime
  EC2 Instance State-change Notification   instance_stopping for stopping, stopped, shutting-down,
                                           terminated (deadline: the event's time); other states: none

An event that is not JSON, or not one of these shapes, is ``Unreadable`` (a poison message to set
aside); one of these shapes that says nothing to act on (an instance starting, a Health event
about another service) gives no notice.
"""

from __future__ import annotations

import email.utils
import enum
import json
from collections.abc import Mapping
from typing import Any

from clusterman.core.model import NO_TIME
from clusterman.core.notices import LeaveReason
from clusterman.core.notices import Notice
from clusterman.core.timestamps import parse_time

SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
HEALTH = "AWS Health Event"
STATE_CHANGE = "EC2 Instance State-change Notification"
DETAIL_TYPES = (SPOT_WARNING, REBALANCE, HEALTH, STATE_CHANGE)
SPOT_WARNING_SECONDS = 120.0
LEAVING_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})


class Rebalance(enum.Enum):
    """What a rebalance recommendation does (``notices.rebalance`` in the main file)."""

    IGNORE = "ignore"  # counted and logged, nothing else: the default (docs/node_lifecycle.md)
    REPLACE_AHEAD = "replace_ahead"  # its replacement is asked now; the node stays until interrupted
    DRAIN = "drain"  # replaced and drained as an interruption without a deadline


class Unreadable(ValueError):
    """Not an event this reader knows: the message says why, in one line."""


def json_object(body: str, what: str) -> Mapping[str, Any]:
    """The message body as a JSON object; Unreadable, naming ``what`` it should be, when not."""
    try:
        data = json.loads(body)
    except ValueError as e:
        raise Unreadable(f"not JSON: {e}") from None
    if not isinstance(data, Mapping):
        raise Unreadable(f"not {what}: {type(data).__name__}")
    return data


def notices_of(body: str, key: str, rebalance: Rebalance = Rebalance.IGNORE) -> tuple[Notice, ...]:
    """The notices one message body (an EventBridge event) gives; ``key`` names them (the message id)."""
    event = json_object(body, "an event")
    kind = event.get("detail-type")
    detail = event.get("detail")
    if kind not in DETAIL_TYPES:
        raise Unreadable(f"detail-type {kind!r} is none of {', '.join(DETAIL_TYPES)}")
    if not isinstance(detail, Mapping):
        raise Unreadable(f"{kind}: no detail object")
    at = _time(event.get("time"), kind, "time")
    if kind == HEALTH:
        return _health(detail, at, key)
    instance = detail.get("instance-id")
    if not isinstance(instance, str) or not instance:
        raise Unreadable(f"{kind}: detail.instance-id is missing")
    if kind == SPOT_WARNING:
        return (Notice(LeaveReason.SPOT_INTERRUPTION, at, instance, deadline=at + SPOT_WARNING_SECONDS, key=key),)
    if kind == REBALANCE:
        if rebalance is Rebalance.IGNORE:
            return ()
        drain = rebalance is Rebalance.DRAIN
        return (Notice(LeaveReason.REBALANCE_RECOMMENDATION, at, instance, drain=drain, key=key),)
    if detail.get("state") in LEAVING_STATES:
        return (Notice(LeaveReason.INSTANCE_STOPPING, at, instance, deadline=at, key=key),)
    return ()


def _health(detail: Mapping[str, Any], at: float, key: str) -> tuple[Notice, ...]:
    if detail.get("service") != "EC2" or detail.get("eventTypeCategory") != "scheduledChange":
        return ()
    start = detail.get("startTime")
    deadline = _time(start, HEALTH, "detail.startTime") if start is not None else NO_TIME
    entities = detail.get("affectedEntities") or []
    if not isinstance(entities, list):
        raise Unreadable(f"{HEALTH}: detail.affectedEntities is not a list")
    instances = [e.get("entityValue") for e in entities if isinstance(e, Mapping)]
    return tuple(
        Notice(LeaveReason.SCHEDULED_CHANGE, at, i, deadline=deadline, key=key)
        for i in instances
        if isinstance(i, str) and i.startswith("i-")
    )


def _time(value: Any, kind: str, field: str) -> float:
    """ISO 8601 (``time``), or the RFC 1123 dates AWS Health writes (``Sat, 05 Jun 2021 15:10:09 GMT``)."""
    if isinstance(value, str) and "," in value:
        try:
            return email.utils.parsedate_to_datetime(value).timestamp()
        except (TypeError, ValueError):
            pass
    try:
        return parse_time(value)
    except ValueError as e:
        raise Unreadable(f"{kind}: {field}: {e}") from None
