"""``clusterman manage`` changes the pool only while the lease is its own, from its claim to its
change: a lease that ran out in between (the process stopped, a Ctrl-Z, a slow store) is not."""

from __future__ import annotations

import time

from clusterman.cli.manage import _keep_renewed
from clusterman.cli.manage import still_ours
from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.state.lease import ON_NOW
from clusterman.state.lease import Holder
from clusterman.state.lease import PoolLease
from clusterman.state.store import SqliteStateStore
from clusterman.state.store import StateError
from tests.test_run_guards import after_watching

POOL_ID = PoolIdentity("c", "p", Scheduler.SIMULATED)
T0 = 1_700_000_000.0
MANAGE, AUTOSCALER = Holder("host-a", 100, T0), Holder("host-b", 200, T0)


def lease(store, holder, ttl=10.0):
    return PoolLease(store, POOL_ID, holder, ttl, monotonic=ON_NOW)


def test_the_lease_is_ours_while_renewed_in_time(tmp_path):
    ours = lease(SqliteStateStore(tmp_path / "state.sqlite"), MANAGE)
    assert ours.claim(T0).held
    assert still_ours(ours, lambda: T0 + 3) == ""
    assert still_ours(ours, lambda: T0 + 12) == ""  # renewed at T0 + 3: until T0 + 13


def test_a_lease_taken_back_meanwhile_is_lost(tmp_path):
    store = SqliteStateStore(tmp_path / "state.sqlite")
    ours = lease(store, MANAGE)
    assert ours.claim(T0).held
    assert after_watching(lease(store, AUTOSCALER), T0 + 11).held  # manage stood still past its TTL
    why = still_ours(ours, lambda: T0 + 12)
    assert why.startswith("lost the pool's lease: it is held by pid 200 on host-b"), why


def test_a_lease_that_ran_out_is_not_ours_even_when_claimed_again(tmp_path):
    """Nobody holds it now, but the autoscaler may have taken it, acted and let it go."""
    ours = lease(SqliteStateStore(tmp_path / "state.sqlite"), MANAGE)
    assert ours.claim(T0).held
    why = still_ours(ours, lambda: T0 + 15)
    assert why.startswith("the pool's lease ran out at ") and "was this process stopped?" in why, why


class Unreachable(SqliteStateStore):
    def claim(self, *args, **kwargs):
        raise StateError("the store does not answer")


def test_a_renewal_that_fails_keeps_the_lease_only_until_it_runs_out(tmp_path, capsys):
    ours = lease(SqliteStateStore(tmp_path / "state.sqlite"), MANAGE)
    assert ours.claim(T0).held
    ours.store = Unreachable(tmp_path / "state.sqlite")
    assert still_ours(ours, lambda: T0 + 5) == ""
    assert "cannot renew the pool's lease: the store does not answer" in capsys.readouterr().err
    assert still_ours(ours, lambda: T0 + 11).startswith("cannot renew the pool's lease, and it ran out")


def test_the_renewing_thread_notes_a_lapse_the_main_thread_would_not_see(tmp_path):
    """After a stop the renewing thread may renew first: the lease is ours again by the time the
    change is made, so the lapse it saw must be kept for the check before the change."""
    ours = lease(SqliteStateStore(tmp_path / "state.sqlite"), MANAGE, ttl=1.0)
    jump = [0.0]
    assert ours.claim(time.time()).held
    stop, lapses = _keep_renewed(ours, lambda: time.time() + jump[0])
    try:
        time.sleep(0.5)  # at least one renewal in time
        assert lapses == []
        jump[0] = 3.0  # the process stood still for 3 s
        deadline = time.monotonic() + 5
        while not lapses and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.7)  # renewed in time again since
    finally:
        stop()
    assert lapses[0].startswith("the pool's lease ran out at "), lapses
    assert ours.held_at(time.time() + jump[0])  # ours again: only the list remembers the lapse
