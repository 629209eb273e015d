"""One autoscaler per pool: a lease in the state store that a run must hold to act.

Two autoscalers for one pool (a restarted bootstrap beside an orphan, two replicas during a
rollout, an operator's hand-started loop) must never act at once. Each claims the item state
``autoscaler_lease``, entity ``<cluster>.<pool>.<scheduler>`` (as a pause), with a conditional
write: it succeeds only when nobody holds the lease, the holder's lease expired, or the claimant
holds it already. The payload names the holder (host, pid, start time) and ``expires_at``.

The holder renews it while its loop is alive (between runs and right before acting), with a TTL
shorter than the run period. A loop that stops (``kill -9``, ``SIGSTOP``, a hang) stops renewing,
and another autoscaler takes over once the TTL has run out. Hosts' clocks need not agree: as
client-go's leader election does, a claimant judges another's lease by when it saw it renewed, on
its own monotonic clock, never by the ``expires_at`` the holder wrote with its own wall clock. A
lease it has seen unchanged for the lease's TTL is stale, and taken only if it is still that same
lease (a conditional write on it). A standby whose clock runs ahead thus never takes a healthy
holder's lease, and one whose holder died takes over a TTL after the last renewal it saw, however
far ahead the dead holder's clock ran. A process that sees a lease for the first time (a restart)
waits that TTL too.

An operator's command that changes the pool (``clusterman manage``) takes the same lease for its
action. The autoscaler holds it all the time, so the command first writes a request (state
``autoscaler_lease_request``, same entity, with the requester and a deadline). The autoscaler
hands the lease over at its next renewal between runs, never during a run. It stays in standby
while the request or the requester's lease lives. It takes the lease back when the command
releases it or its TTL runs out.
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import replace

from clusterman.core.config import PoolIdentity
from clusterman.core.timestamps import format_time
from clusterman.state.pause import entity
from clusterman.state.store import DamagedItem
from clusterman.state.store import StateItem
from clusterman.state.store import StateStore

AUTOSCALER_LEASE = "autoscaler_lease"
LEASE_REQUEST = "autoscaler_lease_request"
REQUEST_LAPSE_SECONDS = 4.0  # a request lives this long unless its requester renews it while waiting


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
    purpose: str = ""  # what the holder holds it for ("" = an autoscaler), e.g. "clusterman manage by alice"
    requested: bool = False  # not held yet: handed over on request to ``holder``, at most until ``expires_at``
    since: float = 0.0  # Unix seconds: when the holder took it (0: unknown, written by an older version)

    def covers(self, at: float) -> bool:
        """Whether this is our lease and it still runs at ``at``. A claim's answer that came after
        the lease before it ran out finds it lapsed: another may have held it and acted meanwhile."""
        return self.held and at < self.expires_at

    def describe(self) -> str:
        """What follows "the pool's lease": ``is held by pid 42 on host-b (started …) until …``."""
        if self.error:
            return f"cannot be read or written: {self.error}"
        if self.held:
            return f"is ours until {format_time(self.expires_at)}"
        who = Holder.describe_id(self.holder)
        if self.purpose:
            who = f"{self.purpose}, {who}"
        if self.requested:
            return f"is handed over to {who} (requested until {format_time(self.expires_at)})"
        return f"is held by {who} until {format_time(self.expires_at)}"

    @staticmethod
    def of(item: StateItem) -> LeaseStatus:
        """The lease as stored, seen by someone who does not hold it."""
        payload = item.payload
        expires = payload.get("expires_at", 0.0)
        return LeaseStatus(
            False,
            str(payload.get("holder", "")),
            float(expires) if isinstance(expires, int | float) else 0.0,
            purpose=str(payload.get("purpose", "")),
            since=float(since) if isinstance(since := payload.get("since"), int | float) else 0.0,
        )


@dataclass(frozen=True)
class LeaseRequest:
    """Someone (``clusterman manage``) asks the holder to hand the lease over after its run."""

    requester: str  # a Holder id
    purpose: str
    until: float  # Unix seconds: the request lapses then

    @staticmethod
    def of(item: StateItem) -> LeaseRequest:
        until = item.payload.get("until", 0.0)
        return LeaseRequest(
            str(item.payload.get("holder", "")),
            str(item.payload.get("purpose", "")),
            float(until) if isinstance(until, int | float) else 0.0,
        )


class Sighting:
    """A record as this process last read it, and since when it has been so, on this process's
    monotonic clock (client-go's ``observedTime``)."""

    def __init__(self) -> None:
        self.record: StateItem | None = None
        self.since = 0.0

    def see(self, record: StateItem, at: float) -> float:
        """Note ``record`` read at ``at``; seconds it has been unchanged."""
        if self.record is None or record.payload != self.record.payload:
            self.record, self.since = record, at
        return at - self.since

    def forget(self) -> None:
        self.record = None


def lease_ttl(item: StateItem, default: float) -> float:
    """The TTL the holder gave its lease: ``ttl`` in the payload, else what its times say."""
    ttl = item.payload.get("ttl")
    if isinstance(ttl, int | float) and not isinstance(ttl, bool) and 0 < ttl < math.inf:
        return float(ttl)
    written = item.expiration_timestamp - item.timestamp
    return float(written) if written > 0 else default


ON_NOW = None  # ``PoolLease(monotonic=ON_NOW)``: judge on the ``now`` claims are given (tests, simulations)


class PoolLease:
    """The pool's lease as one autoscaler process sees it; nothing is read until ``claim``.

    ``monotonic``: the clock another's lease is judged on (``ON_NOW``: the ``now`` given to
    ``claim``, for callers whose ``now`` is their only clock)."""

    def __init__(
        self,
        store: StateStore,
        identity: PoolIdentity,
        holder: Holder,
        ttl_seconds: float,
        purpose: str = "",
        monotonic: Callable[[], float] | None = time.monotonic,
    ) -> None:
        if not ttl_seconds > 0:
            raise ValueError(f"lease TTL must be positive, got {ttl_seconds!r}")
        self.store = store
        self.entity = entity(identity)
        self.holder = holder
        self.ttl_seconds = ttl_seconds
        self.purpose = purpose
        self.monotonic = monotonic
        self.last: LeaseStatus | None = None  # the last claim's answer
        self.seen = Sighting()  # another's lease, as this process last saw it
        self.asked = Sighting()  # a request to hand the lease over, as this process last saw it

    def claim(self, now: float, hand_over: bool = False) -> LeaseStatus:
        """Take or renew the lease until ``now + ttl``; StateError when the store cannot be reached.

        Another's lease is taken only once this process has seen it unchanged for its TTL. With
        ``hand_over`` (an autoscaler between runs), a live request from someone else is granted
        instead: the lease is released if ours, and not taken while the request lives.
        """
        seen_at = now if self.monotonic is None else self.monotonic()
        if hand_over:
            request = self._pending_request(now, seen_at)
            if request is not None and request.requester != self.holder.id:
                if self.last is not None and self.last.held:
                    self.store.release(AUTOSCALER_LEASE, self.entity, self.holder.id)
                self.last = LeaseStatus(False, request.requester, request.until, "", request.purpose, requested=True)
                return self.last
        until = now + self.ttl_seconds
        since = self.last.since if self.last is not None and self.last.held and self.last.since else now
        payload: dict[str, object] = {
            "holder": self.holder.id, "expires_at": until, "since": since, "ttl": self.ttl_seconds,
        }  # fmt: skip
        if self.purpose:
            payload["purpose"] = self.purpose
        item = StateItem(AUTOSCALER_LEASE, self.entity, int(now), math.ceil(until), payload)
        stale = self.seen.record
        if stale is not None and seen_at - self.seen.since < lease_ttl(stale, self.ttl_seconds):
            stale = None
        blocking = self.store.claim(item, self.holder.id, None, stale)
        if blocking is None:
            self.seen.forget()
            self.last = LeaseStatus(True, self.holder.id, until, purpose=self.purpose, since=since)
            return self.last
        unchanged = self.seen.see(blocking, seen_at)
        left = max(0.0, lease_ttl(blocking, self.ttl_seconds) - unchanged)
        self.last = replace(LeaseStatus.of(blocking), expires_at=now + left)  # when we would take it, our clock
        return self.last

    def _pending_request(self, now: float, seen_at: float) -> LeaseRequest | None:
        """A live request: one this process has seen unchanged for less than its lapse (its
        requester rewrites it while it waits), judged on this process's clock as the lease is;
        ``until`` on our wall clock."""
        try:
            item = self.store.get(LEASE_REQUEST, self.entity)
        except DamagedItem:
            return None  # a request that cannot be read asks for nothing (its command writes it again)
        if item is None:
            self.asked.forget()
            return None
        request = LeaseRequest.of(item)
        lapse = item.payload.get("lapse")
        if not (isinstance(lapse, int | float) and not isinstance(lapse, bool) and 0 < lapse < math.inf):
            lapse = request.until - item.timestamp  # written by an earlier version
        left = lapse - self.asked.see(item, seen_at)
        return replace(request, until=now + left) if left > 0 else None

    def held_at(self, now: float) -> bool:
        """Whether our last claim still covers ``now`` (no store call)."""
        return self.last is not None and self.last.covers(now)

    def release(self) -> None:
        """Give the lease up at a clean stop, so a successor need not wait for the TTL."""
        self.store.release(AUTOSCALER_LEASE, self.entity, self.holder.id)
        self.last = None


def read_lease(store: StateStore, identity: PoolIdentity, now: float) -> LeaseStatus | None:
    """The pool's lease as stored (for ``clusterman status``); None when nobody holds a live one."""
    item = store.get(AUTOSCALER_LEASE, entity(identity))
    if item is None:
        return None
    status = LeaseStatus.of(item)
    return status if status.expires_at > now else None


def take_on_request(
    lease: PoolLease,
    wait_seconds: float,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    poll_seconds: float = 0.2,
    lapse_seconds: float = REQUEST_LAPSE_SECONDS,
) -> LeaseStatus:
    """Ask the holder to hand the lease over, and take it within ``wait_seconds``.

    Returns the held status, or the last answer (who holds it, until when) when the wait ran
    out. A claim answered after the lease it wrote ran out is not the lease taken (a slow store:
    the autoscaler may have taken it back meanwhile): it is claimed again. The request is
    withdrawn either way: once we hold the lease nobody else can take it.
    It lives ``lapse_seconds`` at a time and is renewed while we wait, so a requester killed
    meanwhile (``kill -9``) blocks the autoscaler that handed the lease over that long at most,
    not the whole wait.
    """
    start = clock()
    last_until = start + wait_seconds + 1.0  # never beyond the wait

    def ask(now: float) -> float:
        until = min(last_until, now + lapse_seconds)
        payload: dict[str, object] = {
            "holder": lease.holder.id, "purpose": lease.purpose, "until": until, "lapse": until - now,
        }  # fmt: skip
        payload["expires_at"] = until  # written as a claim so that only its owner withdraws it (DynamoDB too)
        lease.store.claim(
            StateItem(LEASE_REQUEST, lease.entity, int(now), math.ceil(until), payload), lease.holder.id, now
        )
        return until

    deadline = start + wait_seconds
    until = ask(start)
    try:
        while True:
            status = lease.claim(clock())
            now = clock()
            if status.held and not status.covers(now):  # another may hold it by now: claimed again
                status = LeaseStatus(
                    False, lease.holder.id, status.expires_at, "its claim was answered after it ran out"
                )
                lease.last = status
            if status.held or now >= deadline:
                return status
            if until < last_until and until - now < lapse_seconds / 2:
                until = ask(now)
            sleep(min(poll_seconds, max(0.0, deadline - clock())))
    finally:
        lease.store.release(LEASE_REQUEST, lease.entity, lease.holder.id)
