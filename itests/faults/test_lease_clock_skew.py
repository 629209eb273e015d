"""Two real autoscalers on one pool whose wall clocks disagree by 120 s, on each lease backend.

Before, a claimant compared the expiry the holder wrote (with the holder's clock) with its own
clock: a standby 120 s ahead took a healthy holder's lease at its first claim, and a killed holder
whose clock ran ahead left the pool with no actor for its TTL plus the skew. Now a claimant judges
another's lease by when it saw it renewed, on its own monotonic clock (as client-go's leader
election does): the standby ahead never takes it while the holder renews, a holder stepped ahead
keeps it, and once that holder is killed the standby takes over about a TTL after the last renewal
it saw. The clocks are faked per process (``itests/faketime.py``): SQLite (one file), DynamoDB
(moto's server) and Kubernetes Leases (a fake Lease API on loopback, through the real client).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from itests.aws_world import REGION
from itests.aws_world import World
from itests.faketime import faked_clock
from itests.faketime import step_clock
from itests.faults.autoscaler_procs import POOL
from itests.faults.autoscaler_procs import Autoscaler
from itests.faults.autoscaler_procs import acted
from itests.faults.autoscaler_procs import make_state_table
from itests.faults.autoscaler_procs import write_config
from itests.recorded_api import kubeconfig
from itests.stateful_api import serving
from itests.test_state_kubernetes_lease import FakeLeases

pytestmark = pytest.mark.slow

PERIOD, TTL, SKEW = 4.0, 3.0, 120


@contextlib.contextmanager
def backend(name: str, tmp_path: Path, url: str) -> Iterator[tuple[str, dict[str, str]]]:
    """The main file's lines for the lease backend, and the environment both processes need."""
    signal_line = "autoscale_signal: {name: MostRecentResources, branch_or_tag: v1, period_minutes: 1}\n"
    aws = f"aws: {{region: {REGION}, endpoint_url: '{url}'}}\n"
    if name == "sqlite":
        yield aws + signal_line, {}
    elif name == "dynamodb":
        table = f"state-{os.urandom(4).hex()}"
        make_state_table(url, table)
        yield (
            f"aws: {{region: {REGION}, endpoint_url: '{url}', state_table: {table}}}\n"
            + ("state: {backend: dynamodb}\n" + signal_line),
            {},
        )
    else:
        with serving(FakeLeases()) as api:
            yield (
                aws + "state: {lease: kubernetes}\n" + signal_line,
                {"KUBECONFIG": kubeconfig(tmp_path / "kubeconfig", api.url)},
            )


@pytest.mark.parametrize("store", ["sqlite", "dynamodb", "kubernetes"])
def test_clocks_120_s_apart_neither_steal_nor_delay_the_lease(tmp_path, moto_server, store):
    world = World(moto_server.url)
    world.asg(POOL, desired=1)
    args = ("--period-seconds", str(PERIOD), "--lease-seconds", str(TTL), "--no-splay")
    with backend(store, tmp_path, moto_server.url) as (main, env):
        config = write_config(tmp_path, world.cluster, moto_server.url, tasks=4, extra_main=main)
        holder_clock, standby_clock = tmp_path / "holder-clock", tmp_path / "standby-clock"
        holder = Autoscaler(config, world.cluster, *args, env={**env, **faked_clock(holder_clock)})
        standby = None
        try:
            holder.wait_for(acted, timeout=60)
            ahead = faked_clock(standby_clock)
            step_clock(standby_clock, SKEW)  # the standby's clock 120 s ahead from its start
            standby = Autoscaler(config, world.cluster, *args, env={**env, **ahead})
            # the standby claims every tenth of the TTL: over three of its runs (four TTLs), never once
            for _ in range(3):
                standby.wait_for(lambda line: True, timeout=60, after=(standby.out or [(0, "")])[-1][0] + 1e-6)
            assert not any(acted(line) for line in standby.lines()), standby.lines()
            assert all("standby: not acting: the pool's lease is held by pid" in x for x in standby.lines())

            step_clock(holder_clock, 2 * SKEW)  # now the holder runs 120 s ahead of the standby
            stepped = time.monotonic()
            holder.wait_for(acted, timeout=3 * PERIOD, after=stepped)  # it keeps the lease and acts
            assert not any(acted(line) for line in standby.lines()), standby.lines()

            holder.signal(signal.SIGKILL)
            killed = time.monotonic()
            at, _ = standby.wait_for(acted, timeout=60, after=killed)
            print(f"{store}: the standby acted {at - killed:.2f} s after kill -9 of a holder 120 s ahead (TTL {TTL})")
            # a TTL after the last renewal it saw, and its next run (the grid: at most a period)
            assert at - killed < TTL + PERIOD + 3, at - killed
        finally:
            holder.stop()
            if standby is not None:
                standby.stop()
