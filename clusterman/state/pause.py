"""Pausing a pool's autoscaler (``clusterman disable`` / ``enable``), with an expiry.

Stored as Clusterman stores it: state ``autoscaler_paused``, entity
``<cluster>.<pool>.<scheduler>``, ``expiration_timestamp`` in Unix seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from clusterman.core.config import PoolIdentity
from clusterman.core.durations import parse_duration
from clusterman.core.timestamps import format_time
from clusterman.core.timestamps import parse_time
from clusterman.state.store import NO_EXPIRY
from clusterman.state.store import StateItem
from clusterman.state.store import StateStore

AUTOSCALER_PAUSED = "autoscaler_paused"


@dataclass(frozen=True)
class PauseStatus:
    paused: bool
    until: int = NO_EXPIRY  # Unix seconds; NO_EXPIRY = until enabled again
    since: int = 0
    reason: str = ""

    def describe(self) -> str:
        if not self.paused:
            return "enabled"
        until = "until enabled" if self.until == NO_EXPIRY else f"until {format_time(self.until)}"
        return f"paused {until}" + (f" ({self.reason})" if self.reason else "")


NOT_PAUSED = PauseStatus(False)


def entity(identity: PoolIdentity) -> str:
    return f"{identity.cluster}.{identity.pool}.{identity.scheduler.value}"


def parse_until(text: str, now: float, flag: str = "--until") -> int:
    """``30m``, ``2h``, ``1d 12h``, ``90`` (seconds), an ISO time, or ``never``/``forever`` → Unix
    seconds; ``flag`` names the option in the error (``manage --pause`` reads the same)."""
    text = text.strip().lower()
    if text in ("never", "forever", "0"):
        return NO_EXPIRY
    if text.startswith("-"):
        raise ValueError(f"{flag} {text!r}: a pause ends in the future: give a duration such as 30m, or an ISO time")
    try:
        seconds = parse_duration(text)
    except ValueError:
        pass  # not a duration: an ISO time, below
    else:
        if seconds <= 0:
            raise ValueError(f"{flag} {text!r}: the duration must be positive")
        return int(now + seconds)
    try:
        until = int(parse_time(text))
    except ValueError:
        raise ValueError(f"{flag} {text!r}: expected a duration such as 30m, 2h, 1d 12h, or an ISO time") from None
    if until <= now:
        raise ValueError(f"{flag} {text!r} is in the past")
    return until


def pause(store: StateStore, identity: PoolIdentity, now: float, until: int = NO_EXPIRY, reason: str = "") -> None:
    store.put(StateItem(AUTOSCALER_PAUSED, entity(identity), int(now), until, {"reason": reason} if reason else {}))


def resume(store: StateStore, identity: PoolIdentity) -> None:
    store.delete(AUTOSCALER_PAUSED, entity(identity))


def pause_status(store: StateStore, identity: PoolIdentity, now: float) -> PauseStatus:
    item = store.get(AUTOSCALER_PAUSED, entity(identity))
    if item is None or not item.live_at(now):
        return NOT_PAUSED
    return PauseStatus(True, item.expiration_timestamp, item.timestamp, str(item.payload.get("reason", "")))
