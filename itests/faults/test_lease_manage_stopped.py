"""``clusterman manage`` stopped (``SIGSTOP``, a Ctrl-Z) between taking the pool's lease and
changing the pool: the autoscaler takes the lease back once manage's runs out and acts, and
manage, continued, changes nothing.

Real processes: an autoscaler holding the pool's lease in DynamoDB (moto's server) and scaling
an ASG there, and the ``clusterman manage`` command. Manage talks to moto through a loopback
proxy that holds each of its lease writes before passing it on: that makes the window between
"took the pool's lease" and the renewal right before the change long enough to stop the process
in: the test stops it once that renewal has reached the proxy. The renewal lands while manage is
stopped, so its answer says "held"; without the check that the lease covered the whole time since
the claim, manage would set the target beside an autoscaler that has acted meanwhile.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from clusterman.cli.manage import LEASE_SECONDS
from clusterman.local.moto_server import FAKE_CREDENTIALS
from itests.aws_proxy import Fault
from itests.aws_proxy import FaultyProxy
from itests.aws_world import World
from itests.faults.autoscaler_procs import POOL
from itests.faults.autoscaler_procs import Autoscaler
from itests.faults.autoscaler_procs import acted
from itests.faults.autoscaler_procs import cli_command
from itests.faults.autoscaler_procs import dynamodb_config

PERIOD, TTL = 3.0, 2.0  # the autoscaler's
HOLD = 1.5  # seconds the proxy holds each of manage's lease writes before moto sees it
TARGET = 3


def test_manage_stopped_after_taking_the_lease_changes_nothing(tmp_path, moto_server):
    world = World(moto_server.url)
    asg = world.asg(POOL, desired=1)
    config, _ = dynamodb_config(tmp_path, world.cluster, moto_server.url, tasks=10)
    args = ("--period-seconds", str(PERIOD), "--lease-seconds", str(TTL), "--no-splay")
    autoscaler = Autoscaler(config, world.cluster, *args)
    manage = None
    try:
        autoscaler.wait_for(acted, timeout=60)
        assert world.desired(asg) > TARGET, autoscaler.lines()
        with FaultyProxy(moto_server.url) as proxy:
            # same directory, so the same pools and state; only manage's calls go through the proxy
            slow_config = Path(config).with_name("manage.yaml")
            slow_config.write_text(Path(config).read_text().replace(moto_server.url, proxy.url))
            held = proxy.add(Fault(contains="since", slow_seconds=HOLD, times=None))  # a lease's payload
            command = cli_command(str(slow_config), world.cluster, "manage", "--yes",
                                  "--target-capacity", str(TARGET), "--wait", "30s")  # fmt: skip
            env = {**os.environ, **FAKE_CREDENTIALS, "PYTHONUNBUFFERED": "1"}
            deadline = time.monotonic() + 60
            manage = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            assert manage.stdout is not None and manage.stderr is not None
            out = []
            for line in manage.stdout:  # the renewal before the change is now held in the proxy
                out.append(line)
                if "took the pool's lease" in line:
                    break
            assert out and "took the pool's lease" in out[-1], (out, manage.stderr.read())
            while held.hits < 2:  # the renewal has reached the proxy: stopped while it is held
                assert time.monotonic() < deadline and manage.poll() is None, (out, held.hits)
                time.sleep(0.01)
            manage.send_signal(signal.SIGSTOP)
            stopped = time.monotonic()

            # manage's lease runs out (renewed last as it was stopped); the autoscaler takes it and acts
            at, line = autoscaler.wait_for(acted, timeout=LEASE_SECONDS + 60, after=stopped)
            acted_value = world.desired(asg)
            manage.send_signal(signal.SIGCONT)
            rest, err = manage.communicate(timeout=60)
        print(f"manage stopped {at - stopped:.1f} s until the autoscaler acted: {line}")
        print(f"manage, continued: {err.strip()}")
        assert manage.returncode == 1, (out, rest, err)
        assert "nothing changed:" in err and "before the change (was this process stopped?)" in err, err
        assert "set target capacity" not in "".join(out) + rest
        assert world.desired(asg) == acted_value != TARGET
        # the lease stays the autoscaler's: its next run acts too
        autoscaler.wait_for(acted, timeout=60, after=time.monotonic())
        assert world.desired(asg) != TARGET
    finally:
        if manage is not None and manage.poll() is None:
            manage.send_signal(signal.SIGCONT)
            manage.kill()
            manage.wait(timeout=30)
        autoscaler.stop()
