"""Issue 11, item 4: no program of the tree outlives its supervisor.

``kill -9`` of supervisord and then of the bootstrap (before it notices) used to leave the
autoscaler and the signal runners running with parent 1. Every program now has a parent-death
signal: they die with supervisord, whatever kills it.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from itests.test_process_tree import private_dir
from itests.test_process_tree import tree_config
from itests.tree_helpers import Bootstrap
from itests.tree_helpers import signal_block
from itests.tree_helpers import unique_name

pytestmark = pytest.mark.slow


def supervisord_pid(bootstrap: Bootstrap) -> int:
    for pid in bootstrap.tree_pids():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"supervisor.supervisord" in cmdline:
            return pid
    raise AssertionError("no supervisord in the tree")


def wait_gone(bootstrap: Bootstrap, timeout: float = 30.0) -> float:
    started = time.monotonic()
    while bootstrap.tree_pids() and time.monotonic() - started < timeout:
        time.sleep(0.05)
    assert bootstrap.tree_pids() == []
    return time.monotonic() - started


@pytest.mark.parametrize("order", ["supervisord, then the bootstrap", "the bootstrap, then supervisord"])
def test_killing_supervisord_and_the_bootstrap_leaves_no_program(tmp_path, moto_server, signal_versions, order):
    config = tree_config(tmp_path, moto_server, signal_versions, versions=("v1",))
    config.write_main(signal_block(unique_name(), "v1"))
    config.write_pool({"appa": signal_block(unique_name(), "v1")})
    bootstrap = Bootstrap(config, tmp_path, cman_args="--interval 0.2", extra_args=("--poll-interval", "30"))
    try:
        run = bootstrap.wait_for_run(lambda r: all("cpus" in v for v in r["results"].values()))
        programs = {run["pid"], *(int(v["mem"]) for v in run["results"].values())}  # autoscaler and runners
        assert programs <= set(bootstrap.tree_pids())
        supervisord = supervisord_pid(bootstrap)
        if order.startswith("supervisord"):
            os.kill(supervisord, signal.SIGKILL)
            os.kill(bootstrap.proc.pid, signal.SIGKILL)  # before its next poll (30 s) could clean up
        else:
            os.kill(bootstrap.proc.pid, signal.SIGKILL)
            os.kill(supervisord, signal.SIGKILL)  # before its own parent-death SIGTERM could stop anything
        bootstrap.wait_exit()
        print(f"{order}: tree gone after {wait_gone(bootstrap):.2f} s")
    finally:
        bootstrap.kill()
        shutil.rmtree(private_dir(bootstrap), ignore_errors=True)  # a killed bootstrap cannot remove it
