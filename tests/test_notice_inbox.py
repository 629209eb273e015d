"""A pool's inbox of notices in the state store (clusterman/notices/inbox.py), on SQLite."""

from __future__ import annotations

from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.core.model import Node
from clusterman.core.model import NodeState
from clusterman.core.model import PoolSnapshot
from clusterman.core.notices import LeaveReason
from clusterman.core.notices import Notice
from clusterman.core.resources import Resources
from clusterman.notices.inbox import KEEP_SECONDS
from clusterman.notices.inbox import Inbox
from clusterman.notices.inbox import InboxSource
from clusterman.state.store import SqliteStateStore

T = 1_800_000_000.0
POOL = PoolIdentity("c", "p", Scheduler.KUBERNETES)


def spot(instance: str, at: float = T) -> Notice:
    return Notice(LeaveReason.SPOT_INTERRUPTION, at, instance, deadline=at + 120, key=f"m-{instance}")


def test_filed_notices_are_read_by_the_pool_and_the_same_one_again_changes_nothing(tmp_path):
    inbox = Inbox(SqliteStateStore(tmp_path / "state.sqlite3"), POOL)
    assert inbox.file([spot("i-1"), spot("i-2")], T) == [spot("i-1"), spot("i-2")]
    version = inbox.version()
    assert inbox.file([spot("i-1"), spot("i-1")], T + 1) == [] and inbox.version() == version
    source = InboxSource(inbox)
    assert source.waiting()
    pool = PoolSnapshot(T, (Node("n1", NodeState.READY, Resources(), "g", "i-1"),), ())
    assert source.notices(pool, T + 2) == (spot("i-1"),)  # i-2's node is gone: its notice is past
    assert not source.waiting()


def test_a_graver_notice_replaces_a_rebalance_recommendation(tmp_path):
    inbox = Inbox(SqliteStateStore(tmp_path / "state.sqlite3"), POOL)
    ahead = Notice(LeaveReason.REBALANCE_RECOMMENDATION, T, "i-1", drain=False)
    inbox.file([ahead], T)
    assert inbox.file([spot("i-1", T + 60)], T + 60) == [spot("i-1", T + 60)]
    assert inbox.read(T + 61)[0] == (spot("i-1", T + 60),)


def test_a_notice_is_forgotten_an_hour_past_its_deadline(tmp_path):
    inbox = Inbox(SqliteStateStore(tmp_path / "state.sqlite3"), POOL)
    inbox.file([spot("i-1")], T)
    assert inbox.read(T + 120 + KEEP_SECONDS - 1)[0] == (spot("i-1"),)
    assert inbox.read(T + 120 + KEEP_SECONDS)[0] == ()
