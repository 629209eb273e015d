"""A stopped (SIGSTOP) supervisord, under a real bootstrap.

supervisor's XML-RPC client has no timeout. The bootstrap's watch used to wait for supervisord's
answer for good: a stalled autoscaler behind it was never restarted, config edits were never
applied, and even SIGTERM left the bootstrap hanging (it logged "stopping the tree" and stayed).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from itests.test_process_tree import tree_config
from itests.tree_helpers import Bootstrap
from itests.tree_helpers import signal_block
from itests.tree_helpers import unique_name

pytestmark = pytest.mark.slow


def _supervisord(bootstrap: Bootstrap) -> int:
    for pid in bootstrap.tree_pids():
        if b"supervisor.supervisord" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
    raise AssertionError(f"no supervisord among the tree's processes:\n{bootstrap.stderr}")


@pytest.mark.parametrize("then", ["nothing", "sigterm"])
def test_a_stopped_supervisord_is_noticed_and_the_tree_killed(tmp_path, moto_server, signal_versions, then):
    config = tree_config(tmp_path, moto_server, signal_versions, versions=("v1",))
    config.write_main(signal_block(unique_name(), "v1"))
    config.write_pool({})
    args = ("--supervisor-timeout", "2", "--stale-periods", "3", "--start-grace", "5")
    bootstrap = Bootstrap(config, tmp_path, args, cman_args="--period 0.5", autoscaler="tree_autoscaler.py")
    try:
        first = bootstrap.wait_for_run(lambda r: True, timeout=60)
        supervisord = _supervisord(bootstrap)
        os.kill(supervisord, signal.SIGSTOP)
        os.kill(first["pid"], signal.SIGSTOP)  # and an autoscaler that finishes no run behind it
        stopped = time.monotonic()
        if then == "sigterm":
            bootstrap.proc.send_signal(signal.SIGTERM)
        assert bootstrap.wait_exit(30) == (0 if then == "sigterm" else 1)
        took = time.monotonic() - stopped
        print(f"bootstrap exited {took:.1f} s after supervisord was stopped ({then})")
        assert took < 2 + 0.2 + 5  # the call's timeout, a poll, and the kill
        assert "supervisord does not answer: killing it and its programs" in bootstrap.stderr
        assert bootstrap.tree_pids() == []  # the stopped autoscaler and signal runner too
        errors = [line for line in bootstrap.stderr.splitlines() if " ERROR " in line]
        if then == "sigterm":  # asked to stop, it stopped: the shutdown went unanswered, so it killed
            assert errors == []
            return
        assert len(errors) == 1, errors
        assert (
            f"supervisord (pid {supervisord}) did not answer getAllProcessInfo within 2 s: stopped or hung"
            in (errors[0])
        )
    finally:
        bootstrap.kill()
