"""A pool's inbox of notices, in the state store: the drainer writes it, the pool's run reads it.

One item per pool: state ``notices``, entity ``<cluster>.<pool>.<scheduler>`` (as a pause), its
payload ``{"notices": {<instance id>: <notice>}, "version": n}``. A notice is kept until it no longer
matters (``KEEP_SECONDS`` past its deadline, or past its arrival when it has none), so a run that
starts late, or a process that comes back after a kill, still finds it; the same notice filed
again changes nothing. Only the drainer that holds the cluster's drainer lease writes it, so no
write is lost to another's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

from clusterman.core.config import PoolIdentity
from clusterman.core.model import NO_TIME
from clusterman.core.model import PoolSnapshot
from clusterman.core.notices import KEEP_SECONDS
from clusterman.core.notices import NO_NOTICES
from clusterman.core.notices import DrainOutcome
from clusterman.core.notices import LeaveReason
from clusterman.core.notices import Notice
from clusterman.core.notices import NoticeError
from clusterman.state.pause import entity
from clusterman.state.store import StateError
from clusterman.state.store import StateItem
from clusterman.state.store import StateStore

log = logging.getLogger(__name__)

INBOX = "notices"
# notices kept per pool at most, the newest: about 190 bytes each, so the item stays under
# DynamoDB's 400 KB (a pool would need 1,500 interruptions within an hour and two minutes)
MOST = 1500


def as_json(notice: Notice) -> dict[str, Any]:
    return {
        "reason": notice.reason.value,
        "noticed_at": notice.noticed_at,
        "instance": notice.instance_id,
        "node": notice.node_id,
        "deadline": None if notice.deadline == NO_TIME else notice.deadline,
        "drain": notice.drain,
        "replace": notice.replace,
        "key": notice.key,
    }


def from_json(data: Any) -> Notice:
    """ValueError naming what is wrong."""
    if not isinstance(data, Mapping):
        raise ValueError(f"expected an object, got {data!r}")
    try:
        deadline = data.get("deadline")
        return Notice(
            LeaveReason(data["reason"]),
            float(data["noticed_at"]),
            str(data.get("instance", "")),
            str(data.get("node", "")),
            NO_TIME if deadline is None else float(deadline),
            bool(data.get("drain", True)),
            bool(data.get("replace", True)),
            str(data.get("key", "")),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"not a notice: {type(e).__name__}: {e}") from None


def expires(notice: Notice) -> float:
    return (notice.deadline if notice.deadline != NO_TIME else notice.noticed_at) + KEEP_SECONDS


class Inbox:
    """One pool's notices in ``store``; nothing is read until asked."""

    def __init__(self, store: StateStore, identity: PoolIdentity) -> None:
        self.store = store
        self.identity = identity
        self.entity = entity(identity)

    def read(self, now: float) -> tuple[tuple[Notice, ...], int]:
        """The notices still in force at ``now`` and the inbox's version (0: none was ever filed).
        StateError when the store cannot be read; an entry that is not a notice is skipped (logged)."""
        item = self.store.get(INBOX, self.entity)
        if item is None:
            return NO_NOTICES, 0
        found = []
        entries = item.payload.get("notices")
        for subject, data in (entries if isinstance(entries, Mapping) else {}).items():
            try:
                notice = from_json(data)
            except ValueError as e:
                log.warning("%s: notice for %s skipped: %s", self.identity, subject, e)
                continue
            if expires(notice) > now:
                found.append(notice)
        version = item.payload.get("version")
        return tuple(found), version if isinstance(version, int) else 0

    def version(self) -> int:
        """Cheap enough to ask every second: has anything been filed since?"""
        item = self.store.get(INBOX, self.entity)
        version = item.payload.get("version") if item is not None else 0
        return version if isinstance(version, int) else 0

    def file(self, notices: Iterable[Notice], now: float) -> list[Notice]:
        """Add ``notices`` (the same one again changes nothing; a graver one for the same instance
        replaces it); drop the expired. The notices new to the inbox. StateError when it cannot be
        read or written."""
        item = self.store.get(INBOX, self.entity)
        payload = item.payload if item is not None else {}
        kept: dict[str, dict[str, Any]] = {}
        for subject, data in (payload.get("notices") or {}).items():
            try:
                if expires(from_json(data)) > now:
                    kept[subject] = data
            except ValueError:
                continue
        new: list[Notice] = []
        for notice in notices:
            subject = notice.instance_id or f"node:{notice.node_id}"
            before = kept.get(subject)
            data = as_json(notice)
            if before is not None and not _graver(notice, from_json(before)):
                continue
            kept[subject] = data
            new.append(notice)
        if not new and item is not None and len(kept) == len(payload.get("notices") or {}):
            return []
        if len(kept) > MOST:
            kept = dict(sorted(kept.items(), key=lambda kv: kv[1]["noticed_at"])[-MOST:])
        version = payload.get("version")
        version = version if isinstance(version, int) else 0
        self.store.put(StateItem(INBOX, self.entity, int(now), payload={"notices": kept, "version": version + 1}))
        return new


def _graver(notice: Notice, before: Notice) -> bool:
    """Whether ``notice`` says more than ``before``: a deadline where there was none or an earlier
    one, or a drain where there was only a replacement."""
    if notice.deadline != NO_TIME and (before.deadline == NO_TIME or notice.deadline < before.deadline):
        return True
    return notice.drain and not before.drain


class InboxSource:
    """The pool's run reads its inbox (``NoticeSource``). ``last`` keeps what it read last, for a
    run whose read failed."""

    def __init__(self, inbox: Inbox) -> None:
        self.inbox = inbox
        self.last: tuple[Notice, ...] = NO_NOTICES
        self.seen = 0  # the inbox's version as last read

    def notices(self, snapshot: PoolSnapshot, now: float) -> tuple[Notice, ...]:
        """The notices for instances still in the pool: the drainer filed only this pool's, so one
        whose instance is no longer there is for a node already gone (it stays until it expires, for
        a run that reads an older snapshot)."""
        try:
            filed, self.seen = self.inbox.read(now)
        except StateError as e:
            raise NoticeError(f"the pool's inbox of notices: {e}") from e
        present = {n.instance_id for n in snapshot.nodes} | {n.id for n in snapshot.nodes}
        self.last = tuple(n for n in filed if (n.instance_id or n.node_id) in present)
        return self.last

    def waiting(self) -> bool:
        """Whether notices were filed since the last run read them (an early run is due)."""
        try:
            return self.inbox.version() != self.seen
        except StateError:
            return False  # the next run reads it, and says so

    def settle(self, outcome: DrainOutcome) -> None:
        """Nothing to give back: notices expire on their own, and the run keeps its own record."""

    def close(self) -> None:
        pass
