"""Damaged state: an item whose fields cannot be read, and a SQLite file that is not a database.

Before, a payload that is not JSON raised a bare JSONDecodeError out of the store: a damaged lease
item blocked every autoscaler of the pool for good, with a traceback every run.
"""

import re
import sqlite3

import pytest

from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.decision.autoscaler_state import AutoscalerState
from clusterman.state.carried import AUTOSCALER_STATE
from clusterman.state.carried import CorruptState
from clusterman.state.carried import StoredState
from clusterman.state.lease import AUTOSCALER_LEASE
from clusterman.state.lease import LEASE_REQUEST
from clusterman.state.lease import Holder
from clusterman.state.lease import PoolLease
from clusterman.state.pause import AUTOSCALER_PAUSED
from clusterman.state.pause import pause
from clusterman.state.pause import pause_status
from clusterman.state.pause import resume
from clusterman.state.store import DamagedItem
from clusterman.state.store import SqliteStateStore
from clusterman.state.store import StateError
from clusterman.state.store import StateItem
from clusterman.state.store import UnusableStore

POOL = PoolIdentity("norcal", "batch", Scheduler.KUBERNETES)
ENTITY = "norcal.batch.kubernetes"
NOW = 1_700_000_000


def damage(path, state, column="payload", value="{not json"):
    with sqlite3.connect(path) as conn:
        assert conn.execute(f"UPDATE state SET {column} = ? WHERE state = ?", (value, state)).rowcount == 1


@pytest.mark.parametrize(("column", "value"), [("payload", "{not json"), ("payload", "[1, 2]"), ("timestamp", "x")])
def test_a_damaged_item_is_a_state_error_naming_it(tmp_path, column, value):
    store = SqliteStateStore(tmp_path / "state.sqlite")
    pause(store, POOL, NOW, reason="maintenance")
    damage(store.path, AUTOSCALER_PAUSED, column, value)
    with pytest.raises(
        DamagedItem, match=re.escape(f"the autoscaler_paused item of {ENTITY} cannot be read")
    ) as caught:
        pause_status(store, POOL, NOW)
    assert isinstance(caught.value, StateError)  # the cycle's "cannot read the pause state": nothing changes
    assert "`clusterman disable` or `enable`" in str(caught.value)
    resume(store, POOL)  # `clusterman enable` deletes it without reading it
    assert not pause_status(store, POOL, NOW).paused


def test_a_damaged_lease_is_no_lease_and_a_claim_writes_over_it(tmp_path):
    store = SqliteStateStore(tmp_path / "state.sqlite")
    a = PoolLease(store, POOL, Holder("host-a", 1, 0.0), ttl_seconds=30)
    b = PoolLease(store, POOL, Holder("host-b", 2, 0.0), ttl_seconds=30)
    assert a.claim(NOW).held
    damage(store.path, AUTOSCALER_LEASE)
    assert b.claim(NOW + 1).held  # nobody provably holds it
    assert store.get(AUTOSCALER_LEASE, ENTITY).payload["holder"] == b.holder.id
    assert not a.claim(NOW + 2).held  # and from then on the lease works as ever


def test_a_damaged_lease_request_asks_for_nothing(tmp_path):
    store = SqliteStateStore(tmp_path / "state.sqlite")
    lease = PoolLease(store, POOL, Holder("host-a", 1, 0.0), ttl_seconds=30)
    store.put(StateItem(LEASE_REQUEST, ENTITY, NOW, NOW + 60, {"holder": "ops", "until": NOW + 60}))
    assert lease.claim(NOW, hand_over=True).requested
    damage(store.path, LEASE_REQUEST)
    assert lease.claim(NOW + 1, hand_over=True).held


def test_a_damaged_carried_state_is_corrupt_state(tmp_path):
    store = SqliteStateStore(tmp_path / "state.sqlite")
    kept = StoredState(store, POOL)
    kept.save(AutoscalerState(), NOW)
    damage(store.path, AUTOSCALER_STATE)
    with pytest.raises(CorruptState, match="cannot be read"):  # the cycle starts afresh and holds scale-down
        kept.load()


def test_a_file_that_is_not_a_database_says_what_to_do(tmp_path):
    path = tmp_path / "state.sqlite"
    path.write_bytes(b"not a database" * 100)
    with pytest.raises(StateError, match="file is not a database") as caught:
        pause_status(SqliteStateStore(path), POOL, NOW)
    assert "the file is damaged: move it aside to start afresh" in str(caught.value)
    path.rename(tmp_path / "state.sqlite.damaged")
    assert not pause_status(SqliteStateStore(path), POOL, NOW).paused


def test_an_unwritable_directory_is_not_called_damaged(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StateError, match="state store") as caught:
        pause_status(SqliteStateStore(blocker / "state.sqlite"), POOL, NOW)
    assert "damaged" not in str(caught.value)


def test_a_store_that_can_never_be_is_unusable_a_damaged_one_is_not(tmp_path):
    """Unusable: the configuration's fault, which the bootstrap rolls back; a damaged file is the
    file's (moved aside, it is made again), and a configuration that meets it is not rolled back."""
    (tmp_path / "file").write_text("")
    for path, why in [
        (tmp_path / "file" / "state.sqlite", f"{tmp_path / 'file'} is not a directory"),
        (tmp_path / "file" / "deeper" / "state.sqlite", f"{tmp_path / 'file'} is not a directory"),
        (tmp_path, f"{tmp_path} is a directory"),
    ]:
        with pytest.raises(UnusableStore, match=r"check state_directory and state\.path") as caught:
            pause_status(SqliteStateStore(path), POOL, NOW)
        assert why in str(caught.value)
    damaged = tmp_path / "damaged.sqlite"
    damaged.write_bytes(b"not a database" * 100)
    with pytest.raises(StateError) as caught:
        pause_status(SqliteStateStore(damaged), POOL, NOW)
    assert not isinstance(caught.value, UnusableStore)
