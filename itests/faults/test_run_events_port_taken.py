"""Two autoscalers of one pool on one host, with the event API on a fixed port.

The second copy used to die at start with a traceback (``OSError: [Errno 98] Address already in
use``), so under supervisord a lingering old autoscaler (still stopping, or stopped) made its
successor crash-loop. Now the port is one ERROR line: the second copy runs as a standby (the lease
keeps one acting), takes over when the first dies, and serves the event API from its next run on.
"""

from __future__ import annotations

import json
import signal
import socket
import time
import urllib.request
from pathlib import Path

from itests.aws_world import World
from itests.faults.autoscaler_procs import POOL
from itests.faults.autoscaler_procs import Autoscaler
from itests.faults.autoscaler_procs import acted
from itests.faults.autoscaler_procs import write_config

PERIOD, TTL = 3.0, 2.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _events(port: int) -> list[dict]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/ws/v1/events/batch", timeout=5) as answer:
        return list(json.loads(answer.read())["EventRecords"])


def test_a_second_autoscaler_on_a_taken_port_stands_by_and_serves_once_the_first_is_gone(tmp_path, moto_server):
    world = World(moto_server.url)
    world.asg(POOL, desired=1)
    config = Path(write_config(tmp_path, world.cluster, moto_server.url, tasks=10))
    port = _free_port()
    config.write_text(config.read_text().replace("events: {port: 0}", f"events: {{port: {port}}}"))
    args = ("--period-seconds", str(PERIOD), "--lease-seconds", str(TTL), "--no-splay")
    first = Autoscaler(str(config), world.cluster, *args)
    second = None
    try:
        first.wait_for(acted, timeout=60)
        second = Autoscaler(str(config), world.cluster, *args)
        second.wait_for(lambda line: "(standby" in line or "standby:" in line, timeout=3 * PERIOD)
        assert second.proc.poll() is None, second.stderr()[-3000:]
        errors = [line for line in second.stderr().splitlines() if " ERROR " in line]
        assert len(errors) == 1, errors
        assert f"the event API cannot listen on 127.0.0.1:{port}: Address already in use" in errors[0]
        assert "Traceback" not in second.stderr()

        first.signal(signal.SIGKILL)
        killed = time.monotonic()
        second.wait_for(acted, timeout=2 * PERIOD + TTL, after=killed)
        deadline = time.monotonic() + 2 * PERIOD
        while "event API listening on" not in second.stderr() and time.monotonic() < deadline:
            time.sleep(0.1)
        served = time.monotonic()
        assert f"event API listening on http://127.0.0.1:{port}" in second.stderr()
        # the history the second copy kept while it could not serve it: its standby runs are there
        assert any(e["eventChangeDetail"] == "DECISION_STANDBY" for e in _events(port))
        print(f"second copy acting and serving the event API {served - killed:.1f} s after the first was killed")
        assert len([line for line in second.stderr().splitlines() if " ERROR " in line]) == 1
    finally:
        first.stop()
        if second is not None:
            second.stop()
