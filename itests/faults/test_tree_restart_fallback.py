"""After a bootstrap restart, every failure of a new configuration falls back to the kept one (issue 26, item 2).

Before, only a file that did not validate fell back to the last good configuration kept in
``$CMAN_LAST_GOOD_DIR``. A file that validated but failed later ended the bootstrap with exit 1,
and the pool had no autoscaler: a signal class the pinned version does not have, a
``branch_or_tag`` never published, and an autoscaler that crash-loops on the new file. Each is tried
here on a restarted bootstrap (real supervisord, fetchers and runners, moto's S3).
"""

from __future__ import annotations

import signal
import time

import pytest

from itests.test_process_tree import tree_config
from itests.tree_helpers import Bootstrap
from itests.tree_helpers import TreeConfig
from itests.tree_helpers import signal_block
from itests.tree_helpers import unique_name

pytestmark = pytest.mark.slow

STAND_IN = "tree_autoscaler.py"
# a start slower than supervisord's startsecs, and a pool file (max_capacity 7) it cannot start with
CMAN_ARGS = "--period 0.3 --start-delay 1.2 --crash-if-max-capacity 7"
CRASH = ("--crash-starts", "2", "--crash-window", "60", "--fetch-retry", "600")


def restart_on(config: TreeConfig, tmp_path, name: str, cause: str) -> None:
    """A bootstrap started on the edited files runs the kept configuration (max_capacity 9), and says
    why in one ERROR line."""
    started = time.monotonic()
    bootstrap = Bootstrap(config, tmp_path, CRASH, cman_args=CMAN_ARGS, autoscaler=STAND_IN, name=name)
    try:
        run = bootstrap.wait_for_run(lambda r: True, timeout=90)
        print(f"{name}: the kept configuration runs {time.monotonic() - started:.1f} s after the start")
        assert run["max_capacity"] == 9
        errors = [line for line in bootstrap.stderr.splitlines() if " ERROR " in line]
        assert len(errors) == 1, errors
        assert "CONFIGURATION ROLLED BACK: " in errors[0] and cause in errors[0], errors[0]
        assert "the last configuration the autoscaler finished runs under" in errors[0]
        bootstrap.proc.send_signal(signal.SIGTERM)
        assert bootstrap.wait_exit(60) == 0, bootstrap.stderr
    finally:
        bootstrap.kill()


def test_a_restart_falls_back_on_every_failure_of_the_new_configuration(tmp_path, moto_server, signal_versions):
    config = tree_config(tmp_path, moto_server, signal_versions, versions=("v1",))
    default = signal_block(unique_name(), "v1")
    config.write_main(default)
    config.write_pool({})
    good_pool = config.pool_path.read_text()
    first = Bootstrap(config, tmp_path, CRASH, cman_args=CMAN_ARGS, autoscaler=STAND_IN, name="first")
    try:
        first.wait_for_run(lambda r: r["max_capacity"] == 9, timeout=60)
        first.wait_kept()
        first.proc.send_signal(signal.SIGTERM)
        assert first.wait_exit(60) == 0
    finally:
        first.kill()

    # a signal class the pinned version does not have (itest_versions answers only WhoAmI*)
    config.write_main({**default, "name": "NoSuchSignal"})
    restart_on(config, tmp_path, "unknown-class", "has no signal named NoSuchSignal (version v1)")

    # a branch_or_tag never published
    config.write_main({**default, "branch_or_tag": "v9"})
    restart_on(config, tmp_path, "unpublished", "signal version v9 could not be fetched")

    # an autoscaler that crash-loops on the new pool file
    config.write_main(default)
    config.pool_path.write_text(good_pool.replace("max_capacity: 9", "max_capacity: 7"))
    restart_on(config, tmp_path, "crash-loop", "the autoscaler keeps exiting: started 2 times in")
