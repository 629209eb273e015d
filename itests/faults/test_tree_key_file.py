"""An AWS key file that cannot be read is one line, and the running tree is kept (issue 26, item 4).

Before, the key file replaced by a directory made ``read_access_key_file`` raise an ``OSError``
that escaped the bootstrap's watch: a traceback, and the whole tree stopped. A FIFO in its place
(a neighbour: a secret mount gone wrong) held the watch for good, waiting for a writer.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time

import pytest

from itests.test_process_tree import tree_config
from itests.tree_helpers import Bootstrap
from itests.tree_helpers import signal_block
from itests.tree_helpers import unique_name

pytestmark = pytest.mark.slow


def test_an_unreadable_key_file_keeps_the_running_tree(tmp_path, moto_server, signal_versions):
    config = tree_config(tmp_path, moto_server, signal_versions, versions=("v1",), key_file=True)
    assert config.key_file is not None
    config.write_main(signal_block(unique_name(), "v1"))
    config.write_pool({})
    key = config.key_file
    good = key.read_text()
    bootstrap = Bootstrap(config, tmp_path, cman_args="--period 0.3", autoscaler="tree_autoscaler.py")
    try:
        first = bootstrap.wait_for_run(lambda r: True, timeout=60)

        key.unlink()
        key.mkdir()  # a secret mount gone wrong: a directory where the file was
        bootstrap.wait_log(f"{key}: cannot read the AWS key file: Is a directory", timeout=10)
        key.rmdir()
        os.mkfifo(key)  # nobody ever writes it: a blocking read would wait for good
        bootstrap.wait_log(f"{key}: cannot read the AWS key file: not a regular file", timeout=10)
        time.sleep(1.0)  # several polls: the refused files are not tried again, nor said again
        run = bootstrap.wait_for_run(lambda r: True)
        assert run["pid"] == first["pid"]  # the running tree was kept all along
        errors = [line for line in bootstrap.stderr.splitlines() if " ERROR " in line]
        assert len(errors) == 2, errors
        assert all("the running tree keeps its previous configuration" in line for line in errors)
        assert "Traceback" not in bootstrap.stderr

        key.unlink()
        key.write_text(json.dumps({**json.loads(good), "secretAccessKey": "rotated"}))
        rotated = time.monotonic()
        bootstrap.wait_for_run(lambda r: r["pid"] != first["pid"], timeout=60)  # a new key: a new tree
        print(f"key file readable again: the new tree runs {time.monotonic() - rotated:.1f} s after")
        bootstrap.proc.send_signal(signal.SIGTERM)
        assert bootstrap.wait_exit(60) == 0
    finally:
        if key.is_dir():
            shutil.rmtree(key)
        bootstrap.kill()
