"""A configuration under which the autoscaler can never act is not kept as the last good one.

Before, a main file whose ``state_directory`` was a regular file validated; every run then ended
``standby: ... the pool's lease cannot be read or written``, and the bootstrap took that run for
proof of a good configuration: it logged ``the autoscaler finished a run under this
configuration``, kept it as the last good one, and ``/healthz`` said nothing was wrong. Now such a
run proves nothing: the bootstrap (real supervisord, the real autoscaler, moto's server) goes
back to the configuration the autoscaler last acted under, says ``CONFIGURATION ROLLED BACK:``
with the cause, and ``/healthz`` says degraded with it. The same for the neighbours: the metrics
directory a file, a DynamoDB state table that does not exist, a kubeconfig that cannot be read.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

from clusterman.local.moto_server import free_port
from itests.recorded_api import kubeconfig
from itests.stateful_api import FakeKubernetes
from itests.stateful_api import serving
from itests.test_state_dynamodb import make_table
from itests.test_tree_with_autoscaler import CLUSTER
from itests.test_tree_with_autoscaler import Tree
from itests.test_tree_with_autoscaler import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

KEPT = "the autoscaler finished a run under this configuration"
ROLLED_BACK = "CONFIGURATION ROLLED BACK: the change to "


def health(port: int) -> dict[str, Any]:
    """The autoscaler's /healthz; {} while none listens (between two trees)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as response:
            body: dict[str, Any] = json.loads(response.read())
    except urllib.error.URLError:
        return {}
    return body


def acted_since(tree: Tree, count: int) -> bool:
    return any("| target" in line for line in tree.decisions()[count:])


def start(tmp_path: Path, moto_url: str, main: dict[str, Any], **kwargs: Any) -> tuple[Tree, int]:
    port = free_port()
    tree = Tree(
        tmp_path, moto_url, ("--last-good-dir", str(tmp_path / "last-good")),
        main_extra={"events.port": port, **main}, **kwargs,
    )  # fmt: skip
    return tree, port


def rolls_back(tree: Tree, port: int, bad: dict[str, Any], cause: str) -> None:
    """The good configuration is kept; ``bad`` is edited in, rolled back with ``cause``, and the
    autoscaler acts again under the good one, degraded until a newer edit."""
    wait_for(lambda: acted_since(tree, 0), 90, "a run that acted")
    wait_for(lambda: KEPT in tree.log.read_text(), 30, "the configuration kept")
    tree.edit_main(bad)
    wait_for(lambda: ROLLED_BACK in tree.log.read_text(), 60, "the rollback")
    line = next(x for x in tree.log.read_text().splitlines() if ROLLED_BACK in x)
    assert "(the autoscaler cannot act under this configuration: " in line and cause in line, line
    assert tree.log.read_text().count(KEPT) == 1  # the bad one was never taken for a good one
    runs = len(tree.decisions())
    wait_for(lambda: acted_since(tree, runs), 60, "a run that acted after the rollback")
    degraded = wait_for(lambda: health(port).get("degraded"), 30, "/healthz to say degraded")
    assert any("CONFIGURATION ROLLED BACK" in d and cause in d for d in degraded), degraded


def test_a_state_directory_that_is_a_file_is_rolled_back_at_an_edit_and_at_a_restart(tmp_path, moto_server):
    (tmp_path / "a-file").write_text("not a directory\n")
    tree, port = start(tmp_path, moto_server.url, {})
    try:
        rolls_back(
            tree, port, {"state_directory": str(tmp_path / "a-file")}, f"{tmp_path / 'a-file'} is not a directory"
        )
        tree.stop()
        # a restart finds the bad file live and the good one kept: it goes back to the kept one
        restarted = tree.log.read_text().count(ROLLED_BACK)
        tree.start()
        wait_for(lambda: tree.log.read_text().count("CONFIGURATION ROLLED BACK") > restarted, 60, "the rollback")
        runs = len(tree.decisions())
        wait_for(lambda: acted_since(tree, runs), 60, "a run that acted after the restart")
    finally:
        tree.stop()


def test_a_first_configuration_that_cannot_work_is_never_kept_and_says_why(tmp_path, moto_server):
    (tmp_path / "a-file").write_text("not a directory\n")
    tree, port = start(tmp_path, moto_server.url, {"state_directory": str(tmp_path / "a-file")})
    try:
        wait_for(lambda: "there is no other configuration" in tree.log.read_text(), 60, "the bootstrap to say so")
        cause = f"{tmp_path / 'a-file'} is not a directory"
        degraded = wait_for(lambda: health(port).get("degraded"), 30, "/healthz to say degraded")
        assert any(d.startswith("the configuration cannot work: state store ") and cause in d for d in degraded)
        assert not list((tmp_path / "last-good").glob("*/current"))  # nothing kept
        status = subprocess.run(
            [sys.executable, "-m", "clusterman", "--env-config-path", str(tree.main_path), "status",
             "--cluster", CLUSTER, "--pool", tree.pool, "--scheduler", "simulated"],
            capture_output=True, text=True, timeout=120, env=tree.env,
        )  # fmt: skip
        last = status.stdout.splitlines()[-1]
        assert last.startswith("autoscaler health: degraded: the configuration cannot work: ") and cause in last, status
        assert KEPT not in tree.log.read_text()
    finally:
        tree.stop()


def test_a_metrics_directory_that_is_a_file_is_rolled_back(tmp_path, moto_server):
    (tmp_path / "a-file").write_text("not a directory\n")
    tree, port = start(tmp_path, moto_server.url, {}, cman_args="--collect-metrics")
    try:
        bad = {"metrics.sqlite_path": str(tmp_path / "a-file" / "metrics.sqlite3")}
        rolls_back(tree, port, bad, f"{tmp_path / 'a-file'} is not a directory")
    finally:
        tree.stop()


def test_a_dynamodb_state_table_that_does_not_exist_is_rolled_back(tmp_path, moto_server):
    table = f"state-{uuid.uuid4().hex[:8]}"
    make_table(boto3.client("dynamodb", endpoint_url=moto_server.url, region_name="us-west-2"), table)
    tree, port = start(tmp_path, moto_server.url, {"state.backend": "dynamodb", "aws.state_table": table})
    try:
        rolls_back(tree, port, {"aws.state_table": f"{table}-typo"}, f"DynamoDB state table {table}-typo")
    finally:
        tree.stop()


def test_an_unreadable_kubeconfig_is_rolled_back(tmp_path, moto_server):
    with serving(FakeKubernetes([], [])) as api:
        config = kubeconfig(tmp_path / "kubeconfig", api.url)
        (tmp_path / "a-directory").mkdir()
        tree, port = start(
            tmp_path, moto_server.url, {f"clusters.{CLUSTER}.kubeconfig_path": config}, scheduler="kubernetes"
        )
        try:
            bad = {f"clusters.{CLUSTER}.kubeconfig_path": str(tmp_path / "a-directory")}
            rolls_back(tree, port, bad, f"kubeconfig {tmp_path / 'a-directory'}")
        finally:
            tree.stop()
