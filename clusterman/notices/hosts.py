"""Clusterman's host messages (its drain and termination queues) turned into notices.

Clusterman's autoscaler, its drainer and other tools of its users put a host on
``clusters.<name>.drain_queue_url`` to have it drained then terminated, or on
``termination_queue_url`` to have it terminated. The body is JSON (``instance_id``, ``hostname``,
``group_id``, ``ip``, ``agent_id``, ``pool``, ``attempt``, ``termination_reason``,
``draining_start_time``, ``scheduler``) and the ``Sender`` message attribute names the kind of group
that holds the host (``asg``, ``sfr``). Only the instance and the reason matter here: the drainer
finds the pool by the instance, and the pool's run drains it (docs/node_lifecycle.md):

  drain queue        the reason's drain: ``scaling down`` takes no replacement (the sender wants
                     the pool smaller), ``node migration`` and ``spot interruption`` do; a Spot
                     interruption goes 120 s after ``draining_start_time`` whatever is left
  termination queue  terminated at once, as Clusterman does on receipt (a sender that wanted a
                     wait gave the message a delay): the run taints it and terminates it in the
                     same run, the pods still there counted as lost

A body that is not such a host, or names a reason Clusterman does not have, is ``Unreadable``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from clusterman.core.model import NO_TIME
from clusterman.core.notices import LeaveReason
from clusterman.core.notices import Notice
from clusterman.core.timestamps import parse_time
from clusterman.notices.events import SPOT_WARNING_SECONDS
from clusterman.notices.events import Unreadable
from clusterman.notices.events import json_object

# Clusterman's TerminationReason values, as its messages spell them
TERMINATION_REASONS = {
    "scaling down": LeaveReason.SCALING_DOWN,
    "spot interruption": LeaveReason.SPOT_INTERRUPTION,
    "node migration": LeaveReason.NODE_MIGRATION,
}
DEFAULT_REASON = "scaling down"  # Clusterman's, for a message that names none


class HostQueue(enum.Enum):
    """Which of Clusterman's two host queues a message came from."""

    DRAIN = "drain"
    TERMINATION = "termination"


@dataclass(frozen=True)
class Host:
    """What a host message says that matters here. ``started``: its ``draining_start_time`` (Unix
    seconds; NO_TIME when absent); ``pool`` and ``sender`` as the sender wrote them ("" when not)."""

    instance_id: str
    reason: LeaveReason
    started: float = NO_TIME
    pool: str = ""
    sender: str = ""

    def notice(self, queue: HostQueue, now: float, key: str) -> Notice:
        """The notice filed for this host, read at ``now``."""
        replace = self.reason is not LeaveReason.SCALING_DOWN
        if queue is HostQueue.TERMINATION:
            deadline = now
        elif self.reason is LeaveReason.SPOT_INTERRUPTION:
            deadline = (self.started if self.started != NO_TIME else now) + SPOT_WARNING_SECONDS
        else:
            deadline = NO_TIME
        return Notice(self.reason, now, self.instance_id, deadline=deadline, replace=replace, key=key)


def read_host(body: str, sender: str = "") -> Host:
    """One message's host; ``sender``: its ``Sender`` attribute (else the body's ``sender``).
    Unreadable says what is wrong."""
    data = json_object(body, "a host")
    instance = data.get("instance_id")
    if not isinstance(instance, str) or not instance:
        raise Unreadable("not a host: instance_id is missing")
    said = data.get("termination_reason", DEFAULT_REASON)
    if said not in TERMINATION_REASONS:
        raise Unreadable(f"termination_reason {said!r} is none of {', '.join(map(repr, TERMINATION_REASONS))}")
    started = data.get("draining_start_time")
    try:
        at = NO_TIME if started in (None, "") else parse_time(started, "draining_start_time")
    except ValueError as e:
        raise Unreadable(str(e)) from None
    pool, named = data.get("pool"), data.get("sender")
    sender = sender or (named if isinstance(named, str) else "")
    return Host(instance, TERMINATION_REASONS[said], at, pool if isinstance(pool, str) else "", sender)
