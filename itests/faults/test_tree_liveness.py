"""Issue 11, items 6 and 7: an autoscaler that keeps exiting, or stops finishing runs, is noticed.

supervisord restarts a program that fails after ``startsecs`` forever and never marks it FATAL,
and it cannot tell a stopped (SIGSTOP) or hung autoscaler from a working one. The bootstrap
counts the autoscaler's starts itself and reads its heartbeat file.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from itests.test_process_tree import tree_config
from itests.tree_helpers import Bootstrap
from itests.tree_helpers import signal_block
from itests.tree_helpers import unique_name

pytestmark = pytest.mark.slow

STAND_IN = "tree_autoscaler.py"


def test_a_crash_loop_is_reported_in_one_line_with_its_cause_and_ends_the_tree(tmp_path, moto_server, signal_versions):
    config = tree_config(tmp_path, moto_server, signal_versions, versions=("v1",))
    config.write_main(signal_block(unique_name(), "v1"))
    config.write_pool({})
    cause = "cannot open the state store /var/lib/clusterman/state.sqlite: Permission denied"
    crash = ("--crash-starts", "3", "--crash-window", "60")
    bootstrap = Bootstrap(
        config, tmp_path, crash, cman_args=f"--start-delay 1.2 --exit-with '{cause}'", autoscaler=STAND_IN
    )  # slower than startsecs=1: supervisord alone never gives up
    try:
        bootstrap.wait_log("started the autoscaler", timeout=60)
        started = time.monotonic()
        assert bootstrap.wait_exit(60) == 1
        print(f"crash loop reported and the tree stopped {time.monotonic() - started:.1f} s after the first start")
        errors = [line for line in bootstrap.stderr.splitlines() if " ERROR " in line]
        assert len(errors) == 1, errors
        assert "the autoscaler keeps exiting: started 3 times in" in errors[0]
        assert f"its log ends: autoscaler: {cause}" in errors[0]
        assert bootstrap.tree_pids() == []
    finally:
        bootstrap.kill()


def test_a_stopped_autoscaler_is_restarted_after_n_periods(tmp_path, moto_server, signal_versions):
    config = tree_config(tmp_path, moto_server, signal_versions, versions=("v1",))
    config.write_main(signal_block(unique_name(), "v1"))
    config.write_pool({})
    liveness = ("--stale-periods", "3", "--start-grace", "5")
    bootstrap = Bootstrap(config, tmp_path, liveness, cman_args="--period 0.5", autoscaler=STAND_IN)
    try:
        first = bootstrap.wait_for_run(lambda r: True, timeout=60)
        bootstrap.wait_for_run(lambda r: True)  # a heartbeat was written after that run
        os.kill(first["pid"], signal.SIGSTOP)
        stopped = time.monotonic()
        back = bootstrap.wait_for_run(lambda r: r["pid"] != first["pid"], timeout=60)
        print(f"SIGSTOPped autoscaler: runs again {time.monotonic() - stopped:.1f} s later")
        assert "has not finished a run for" in bootstrap.stderr
        assert "over 3 periods of 0.5 s): restarting it" in bootstrap.stderr
        assert first["pid"] not in bootstrap.tree_pids()
        later = bootstrap.wait_for_run(lambda r: r["time"] > back["time"] + 2)
        assert later["pid"] == back["pid"]  # the new one is left alone while it works
        assert bootstrap.stderr.count("has not finished a run for") == 1
        bootstrap.proc.send_signal(signal.SIGTERM)
        assert bootstrap.wait_exit(60) == 0
    finally:
        bootstrap.kill()


@pytest.mark.parametrize("step", [3600, -3600], ids=["forward", "back"])
def test_a_stepped_wall_clock_is_no_stall(tmp_path, moto_server, signal_versions, step):
    """After a step of the wall clock the heartbeat's wall time is off by the step until the next run,
    and, for a process whose clock disagrees with the bootstrap's, for good: here the stand-in's
    heartbeat says every run finished an hour before (or after) it did. Stalls are judged on the
    host's monotonic clock, which the heartbeat also gives: the working autoscaler is left alone,
    and a stopped one is still restarted. Before, the wall clock's hour made it look stalled: it
    was restarted every few periods."""
    config = tree_config(tmp_path, moto_server, signal_versions, versions=("v1",))
    config.write_main(signal_block(unique_name(), "v1"))
    config.write_pool({})
    liveness = ("--stale-periods", "3", "--start-grace", "2")
    args = f"--period 0.5 --wall-offset {-step}"
    bootstrap = Bootstrap(config, tmp_path, liveness, cman_args=args, autoscaler=STAND_IN)
    try:
        first = bootstrap.wait_for_run(lambda r: True, timeout=60)
        bootstrap.wait_for_run(lambda r: r["time"] > first["time"] + 2 + 6 * 0.5)  # past the grace and 6 periods
        assert "has not finished a run for" not in bootstrap.stderr, bootstrap.stderr[-2000:]
        assert first["pid"] in bootstrap.tree_pids()
        os.kill(first["pid"], signal.SIGSTOP)
        back = bootstrap.wait_for_run(lambda r: r["pid"] != first["pid"], timeout=60)
        assert bootstrap.stderr.count("has not finished a run for") == 1
        assert back["pid"] in bootstrap.tree_pids()
    finally:
        bootstrap.kill()


def test_a_stopped_bootstrap_is_seen_by_the_autoscalers_healthz(tmp_path, moto_server, signal_versions):
    """A SIGSTOPped bootstrap restarts no stalled autoscaler or runner and applies no edit, while the
    tree it leaves running looked healthy to every probe. Now it writes when it last looked at the
    tree, and the autoscaler's /healthz answers 503 once that is 3 polls (and a margin) old: the
    pod's liveness probe restarts the pod."""
    config = tree_config(tmp_path, moto_server, signal_versions, versions=("v1",))
    config.write_main(signal_block(unique_name(), "v1"))
    config.write_pool({})
    bootstrap = Bootstrap(config, tmp_path, cman_args="--period 0.5", autoscaler=STAND_IN)  # polls every 0.2 s
    try:
        healthy = bootstrap.wait_for_run(lambda r: True, timeout=60)
        assert healthy["health"][0] == 200, healthy
        bootstrap.proc.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        sick = bootstrap.wait_for_run(lambda r: r["health"][0] == 503, timeout=20)
        print(f"/healthz 503 {time.monotonic() - stopped:.1f} s after the bootstrap was stopped")
        [problem] = sick["health"][1]["problems"]
        assert "the bootstrap has not looked at the tree for" in problem and "stopped or hung" in problem
        assert time.monotonic() - stopped > 2 * 0.2 + 5  # 3 polls and the margin after its last look
        bootstrap.proc.send_signal(signal.SIGCONT)
        bootstrap.wait_for_run(lambda r: r["health"][0] == 200, timeout=20)
        bootstrap.proc.send_signal(signal.SIGTERM)
        assert bootstrap.wait_exit(60) == 0
    finally:
        bootstrap.proc.send_signal(signal.SIGCONT)
        bootstrap.kill()
