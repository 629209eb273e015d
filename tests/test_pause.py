import pytest

from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.state.pause import AUTOSCALER_PAUSED
from clusterman.state.pause import parse_until
from clusterman.state.pause import pause
from clusterman.state.pause import pause_status
from clusterman.state.pause import resume
from clusterman.state.store import NO_EXPIRY
from clusterman.state.store import SqliteStateStore
from clusterman.state.store import StateError

POOL = PoolIdentity("norcal", "batch", Scheduler.KUBERNETES)
NOW = 1_700_000_000


@pytest.mark.parametrize(
    ("text", "expected"),
    [("30m", NOW + 1800), ("2h", NOW + 7200), ("1d 12h", NOW + 129600), ("90", NOW + 90), ("never", NO_EXPIRY),
     ("2023-11-15T00:00:00+00:00", 1700006400)],
)  # fmt: skip
def test_parse_until(text, expected):
    assert parse_until(text, NOW) == expected


@pytest.mark.parametrize("text", ["soon", "-5m", "2020-01-01T00:00:00"])
def test_parse_until_rejects(text):
    with pytest.raises(ValueError, match="--until"):
        parse_until(text, NOW)


def test_pause_expires_and_resumes(tmp_path):
    store = SqliteStateStore(tmp_path / "state.sqlite")
    assert not pause_status(store, POOL, NOW).paused
    pause(store, POOL, NOW, until=NOW + 60, reason="maintenance")
    status = pause_status(store, POOL, NOW + 30)
    assert status.paused and status.until == NOW + 60 and status.reason == "maintenance"
    assert "paused until" in status.describe()
    assert not pause_status(store, POOL, NOW + 60).paused  # expired
    pause(store, POOL, NOW)
    assert pause_status(store, POOL, NOW + 10**6).paused  # no expiry
    resume(store, POOL)
    assert not pause_status(store, POOL, NOW).paused
    # stored under Clusterman's key, so either tool honours the other's pause
    pause(store, POOL, NOW)
    assert store.get(AUTOSCALER_PAUSED, "norcal.batch.kubernetes") is not None


def test_unwritable_state_store_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = SqliteStateStore(blocker / "state.sqlite")
    with pytest.raises(StateError, match="state store"):
        pause_status(store, POOL, NOW)
