"""Issue 11 item 3 and issue 12: the last good configuration survives a program restart, and
every configuration outcome reaches the autoscaler's event history.

A restarted program used to read the live srv-configs: after a rejected edit, "the running tree
keeps its previous configuration" lasted only until the autoscaler's next restart, which then
crash-looped on the invalid file. The programs now read the bootstrap's snapshot of the last
configuration it accepted, and the bootstrap reports each outcome for the autoscaler to record
(``config_reloaded`` / ``config_rejected``, docs/events.md).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from itests.test_process_tree import private_dir
from itests.test_process_tree import tree_config
from itests.tree_helpers import Bootstrap
from itests.tree_helpers import signal_block
from itests.tree_helpers import unique_name

pytestmark = pytest.mark.slow

STAND_IN = "tree_autoscaler.py"


def test_programs_keep_the_last_good_config_and_record_each_outcome(tmp_path, moto_server, signal_versions):
    config = tree_config(tmp_path, moto_server, signal_versions, versions=("v1",))
    config.write_main(signal_block(unique_name(), "v1"))
    app_signal = signal_block(unique_name(), "v1")
    config.write_pool({"appa": app_signal})
    good = config.pool_path.read_text()
    bootstrap = Bootstrap(config, tmp_path, cman_args="--period 0.3", autoscaler=STAND_IN)
    try:
        first = bootstrap.wait_for_run(lambda r: r["max_capacity"] == 9, timeout=60)
        assert first["config_path"].startswith(str(private_dir(bootstrap)))  # a snapshot, not the live file
        assert first["config_events"] == []

        # A valid edit: a new tree, whose autoscaler records config_reloaded for the pool file.
        config.pool_path.write_text(good.replace("max_capacity: 9", "max_capacity: 8"))
        reloaded = bootstrap.wait_for_run(lambda r: r["max_capacity"] == 8 and r["config_events"], timeout=60)
        [(detail, path, message)] = reloaded["config_events"]
        assert (detail, path) == ("CONFIG_RELOAD", str(config.pool_path))
        assert "1 version(s)" in message

        # An invalid edit: the running autoscaler records config_rejected naming the key ...
        config.pool_path.write_text(good.replace("max_capacity: 9", "max_capacity: 8") + "no_such_key: 1\n")
        rejected = bootstrap.wait_for_run(lambda r: len(r["config_events"]) == 2, timeout=30)
        assert rejected["pid"] == reloaded["pid"]
        detail, path, message = rejected["config_events"][1]
        assert (detail, path) == ("CONFIG_REJECTED", str(config.pool_path))
        assert "no_such_key: unknown key" in message

        # ... and when it is restarted it runs with the last good configuration, not the file on disk.
        os.kill(rejected["pid"], signal.SIGKILL)
        killed = time.monotonic()
        again = bootstrap.wait_for_run(lambda r: r["pid"] != rejected["pid"], timeout=30)
        print(f"autoscaler killed after a rejected edit: runs again {time.monotonic() - killed:.1f} s later")
        assert again["max_capacity"] == 8
        time.sleep(2.5)  # the status file is followed every 2 s: nothing old may be recorded again
        assert bootstrap.wait_for_run(lambda r: True)["config_events"] == []
        assert "keeps exiting" not in bootstrap.stderr

        bootstrap.proc.send_signal(signal.SIGTERM)
        assert bootstrap.wait_exit(60) == 0
    finally:
        bootstrap.kill()
