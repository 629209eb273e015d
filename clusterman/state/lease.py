"""One autoscaler per pool: a lease in the state store that a run must hold to act.

Two autoscalers for one pool (a restarted bootstrap beside an orphan, two replicas during a
rollout, an operator's hand-started loop) must never act at once. Each claims the item state
``autoscaler_lease``, entity ``<cluster>.<pool>.<scheduler>`` (as a pause), with a conditional
write: it succeeds only when nobody holds the lease, the holder's lease expired, or the claimant
holds it already. The payload names the holder (host, pid, start time) and ``expires_at``.

The holder renews it while its loop is alive (between runs and right before acting), with a TTL
shorter than the run period; a loop that stops (``kill -9``, ``SIGSTOP``, a hang) stops renewing,
and another autoscaler takes over once the TTL has run out. Every holder's clock must agree
within a small part of the TTL (NTP): expiry is compared with the claimant's clock.
"""

from __future__ import annotations

import math
import os
import socket
from dataclasses import dataclass

from clusterman.core.config import PoolIdentity
from clusterman.core.timestamps import format_time
from clusterman.state.pause import entity
from clusterman.state.store import StateItem
from clusterman.state.store import StateStore

AUTOSCALER_LEASE = "autoscaler_lease"


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: a process on a host, told apart from a later one with the same pid."""

    host: str
    pid: int
    started_at: float  # Unix seconds

    @property
    def id(self) -> str:
        return f"{self.host}:{self.pid}:{self.started_at:.3f}"

    @staticmethod
    def this_process(started_at: float) -> Holder:
        return Holder(socket.gethostname(), os.getpid(), started_at)

    @staticmethod
    def describe_id(holder_id: str) -> str:
        """``host:pid:start`` as people read it: ``pid 123 on host (started 12:00:01Z)``."""
        parts = holder_id.rsplit(":", 2)
        try:
            return f"pid {int(parts[1])} on {parts[0]} (started {format_time(float(parts[2]))})"
        except (ValueError, IndexError):
            return holder_id or "nobody"


@dataclass(frozen=True)
class LeaseStatus:
    held: bool  # by us
    holder: str  # the holder's id (ours when held)
    expires_at: float  # Unix seconds
    error: str = ""  # the store could not be reached: not held

    def describe(self) -> str:
        """What follows "the pool's lease": ``is held by pid 42 on host-b (started …) until …``."""
        if self.error:
            return f"cannot be read: {self.error}"
        if self.held:
            return f"is ours until {format_time(self.expires_at)}"
        return f"is held by {Holder.describe_id(self.holder)} until {format_time(self.expires_at)}"


class PoolLease:
    """The pool's lease as one autoscaler process sees it; nothing is read until ``claim``."""

    def __init__(self, store: StateStore, identity: PoolIdentity, holder: Holder, ttl_seconds: float) -> None:
        if not ttl_seconds > 0:
            raise ValueError(f"lease TTL must be positive, got {ttl_seconds!r}")
        self.store = store
        self.entity = entity(identity)
        self.holder = holder
        self.ttl_seconds = ttl_seconds
        self.last: LeaseStatus | None = None  # the last claim's answer

    def claim(self, now: float) -> LeaseStatus:
        """Take or renew the lease until ``now + ttl``; StateError when the store cannot be reached."""
        until = now + self.ttl_seconds
        item = StateItem(
            AUTOSCALER_LEASE,
            self.entity,
            int(now),
            math.ceil(until),
            {"holder": self.holder.id, "expires_at": until},
        )
        blocking = self.store.claim(item, self.holder.id, now)
        if blocking is None:
            self.last = LeaseStatus(True, self.holder.id, until)
        else:
            expires = blocking.payload.get("expires_at", 0.0)
            self.last = LeaseStatus(False, str(blocking.payload.get("holder", "")), float(expires))
        return self.last

    def held_at(self, now: float) -> bool:
        """Whether our last claim still covers ``now`` (no store call)."""
        return self.last is not None and self.last.held and now < self.last.expires_at

    def release(self) -> None:
        """Give the lease up at a clean stop, so a successor need not wait for the TTL."""
        self.store.release(AUTOSCALER_LEASE, self.entity, self.holder.id)
        self.last = None
