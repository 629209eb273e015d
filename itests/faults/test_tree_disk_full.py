"""A full private directory under the real tree (issue 26, item 3).

The bootstrap runs in a mount namespace of its own (``unshare -m``, as root) with
``--private-dir-parent`` on a 1 MB tmpfs, which the test fills from inside that namespace. Before,
the autoscaler's heartbeat could no longer be replaced, so its last one aged and the bootstrap
killed a healthy autoscaler every few periods; the bootstrap's watch file could not be replaced
either, so /healthz answered 503 (`the bootstrap has not looked at the tree for 248 s`), and a
Kubernetes liveness probe would have restarted the pod. Now each liveness file is rewritten in
place when a new one cannot be written, and what cannot be written is said, exported as a metric
and shown in /healthz (`clusterman status`), never taken for a stall.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from itests.test_tree_with_autoscaler import Tree
from itests.test_tree_with_autoscaler import wait_for

pytestmark = pytest.mark.slow


def inside(pid: int, script: str) -> None:
    """Run ``script`` in the mount namespace of process ``pid``."""
    subprocess.run(["nsenter", "-t", str(pid), "-m", "sh", "-c", script], check=False, capture_output=True, timeout=30)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.mark.timeout(240)
def test_a_full_private_directory_kills_nothing_and_is_said(tmp_path, moto_server):
    parent = Path(tempfile.mkdtemp(prefix="cmfull-", dir="/tmp"))  # short: the control socket's path must fit
    mount = 'mount -t tmpfs -o size=1m tmpfs "$0" && exec "$@"'
    liveness = ("--private-dir-parent", str(parent), "--stale-periods", "3", "--start-grace", "5")
    tree = Tree(tmp_path, moto_server.url, liveness, prefix=("unshare", "-m", "sh", "-c", mount, str(parent)))
    try:
        wait_for(lambda: any("target 5 -> 5" in d for d in tree.decisions()), 120, "a settled pool")
        url = wait_for(lambda: re.search(r"/metrics on (http://\S+)", tree.autoscaler_log.read_text()), 10, "the API")
        api = url.group(1).rstrip("/")
        assert not list(parent.iterdir()), "the private directory is on the tmpfs, not the test's /tmp"

        inside(tree.bootstrap.pid, f"dd if=/dev/zero of={parent}/fill bs=4k")
        full = time.monotonic()
        runs = len(tree.decisions())
        time.sleep(3 * 1 + 5 + 4)  # past 3 periods, the start grace and a few polls: a stall would be seen
        log = tree.log.read_text()
        assert "has not finished a run" not in log, log[-3000:]
        assert len(tree.decisions()) >= runs + 4  # runs went on (on a loaded machine some overran: 1 s budget)
        assert "the autoscaler cannot write the heartbeat: No space left on device" in tree.autoscaler_log.read_text()
        status, body = get(f"{api}/healthz")
        assert status == 200, body
        degraded = json.loads(body)["degraded"]
        assert "cannot write the heartbeat: No space left on device" in degraded, degraded
        assert "the bootstrap cannot write the watch file: No space left on device" in degraded, degraded
        _, metrics = get(f"{api}/metrics")
        assert re.search(r'clusterman_tree_file_unwritable\{[^}]*file="heartbeat"[^}]*\} 1\.0', metrics), metrics
        print(f"disk full for {time.monotonic() - full:.1f} s: no restart, /healthz 200, degraded: {degraded}")

        inside(tree.bootstrap.pid, f"rm {parent}/fill")
        freed = time.monotonic()
        wait_for(lambda: "the autoscaler writes the heartbeat again" in tree.autoscaler_log.read_text(), 10, "a write")
        wait_for(lambda: json.loads(get(f"{api}/healthz")[1]).get("degraded") == [], 15, "nothing unwritable")
        print(f"all written again {time.monotonic() - freed:.1f} s after the disk was freed")
        assert tree.bootstrap.poll() is None
    finally:
        tree.stop()
        shutil.rmtree(parent, ignore_errors=True)
