"""Kills from outside (issue 26, smaller items): an operator's ``kill -9`` of a healthy autoscaler
is no crash loop, and a ``kill -9``'d bootstrap's private directory (with its copy of the AWS key)
is removed by the next bootstrap.

Before, a healthy autoscaler killed four times in 36 s was taken for a crash loop (the tree
stopped, a healthy log line quoted as the cause), and a killed bootstrap's private directory stayed
on disk for good. Real bootstrap, supervisord and runners; the stand-in autoscaler runs every 0.3 s.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from itests.test_process_tree import tree_config
from itests.tree_helpers import Bootstrap
from itests.tree_helpers import signal_block
from itests.tree_helpers import unique_name

pytestmark = pytest.mark.slow


def test_kills_from_outside_are_no_crash_loop_and_leave_nothing(tmp_path, moto_server, signal_versions):
    config = tree_config(tmp_path, moto_server, signal_versions, versions=("v1",), key_file=True)
    config.write_main(signal_block(unique_name(), "v1"))
    config.write_pool({})
    parent = Path(tempfile.mkdtemp(prefix="cmtest-", dir="/tmp"))  # short: the control socket's path must fit
    args = ("--private-dir-parent", str(parent), "--crash-starts", "3", "--crash-window", "60")
    first = Bootstrap(config, tmp_path, args, cman_args="--period 0.3", autoscaler="tree_autoscaler.py", name="first")
    second: Bootstrap | None = None
    try:
        run = first.wait_for_run(lambda r: True, timeout=60)
        for _ in range(4):  # more starts than --crash-starts, each after a finished run
            os.kill(run["pid"], signal.SIGKILL)
            killed = run["pid"]
            run = first.wait_for_run(lambda r, killed=killed: r["pid"] != killed, timeout=30)
        first.wait_for_run(lambda r: True)
        assert first.proc.poll() is None and "keeps exiting" not in first.stderr, first.stderr

        private = Path(re.search(r"private directory (\S+),", first.stderr).group(1))
        first.proc.kill()  # no handler runs: the directory stays, a copy of the key in it
        first.wait_exit()
        assert private.parent == parent and list(private.glob("config-*/aws-access-key.json"))

        second = Bootstrap(config, tmp_path, args, cman_args="--period 0.3", autoscaler="tree_autoscaler.py")
        second.wait_for_run(lambda r: True, timeout=60)
        assert not private.exists()
        assert f"removed {private}, left by a bootstrap that did not stop cleanly" in second.stderr
        assert len(list(parent.iterdir())) == 1  # its own
        second.proc.send_signal(signal.SIGTERM)
        assert second.wait_exit(60) == 0
        assert list(parent.iterdir()) == []
    finally:
        first.kill()
        if second is not None:
            second.kill()
        shutil.rmtree(parent, ignore_errors=True)
