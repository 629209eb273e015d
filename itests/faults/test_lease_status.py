"""``clusterman status`` says who holds the pool's lease, since and until when, and whether it could act.

A real autoscaler process holds the lease (SQLite state store, an ASG in moto's server); status,
as text and JSON, names it by pid; after the autoscaler's clean stop the lease is free.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess

from clusterman.local.moto_server import FAKE_CREDENTIALS
from itests.aws_world import World
from itests.faults.autoscaler_procs import POOL
from itests.faults.autoscaler_procs import Autoscaler
from itests.faults.autoscaler_procs import acted
from itests.faults.autoscaler_procs import cli_command
from itests.faults.autoscaler_procs import write_config


def status(config: str, cluster: str, *args: str) -> str:
    command = cli_command(config, cluster, "status", "--no-events", *args)
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env={**os.environ, **FAKE_CREDENTIALS})
    assert done.returncode == 0, done
    return done.stdout


def test_status_shows_the_lease_holder_and_whether_it_could_act(tmp_path, moto_server):
    world = World(moto_server.url)
    world.asg(POOL, desired=1)
    config = write_config(tmp_path, world.cluster, moto_server.url, tasks=2)
    autoscaler = Autoscaler(config, world.cluster, "--period-seconds", "3", "--lease-seconds", "2", "--no-splay")
    try:
        autoscaler.wait_for(acted, timeout=60)
        pid = autoscaler.proc.pid
        text = status(config, world.cluster)
        lease = [line for line in text.splitlines() if line.startswith("lease:")]
        assert len(lease) == 1, text
        assert f"lease: held by pid {pid} on " in lease[0] and " since 20" in lease[0] and " until 20" in lease[0]
        assert lease[0].endswith("this process could not act now"), lease[0]

        shown = json.loads(status(config, world.cluster, "--json"))["lease"]
        assert shown["held"] is True and f":{pid}:" in shown["holder"], shown
        assert shown["since"] <= shown["expires"] and shown["this_process_could_act"] is False, shown

        autoscaler.signal(signal.SIGTERM)  # a clean stop gives the lease up
        assert autoscaler.proc.wait(timeout=60) == 0, autoscaler.stderr()
        free = json.loads(status(config, world.cluster, "--json"))["lease"]
        assert free["held"] is False and free["holder"] is None and free["this_process_could_act"] is True, free
        assert "lease: free" in status(config, world.cluster)
    finally:
        autoscaler.stop()
