"""The real tree end to end: bootstrap → supervisord → a signal fetched from S3 → the real autoscaler
scaling an Auto Scaling group in moto; a signal killed with SIGKILL comes back and the autoscaler's
next runs succeed on it again."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from clusterman.local.moto_server import FAKE_CREDENTIALS
from clusterman.local.stack import create_bucket
from clusterman.local.stack import create_pool_group
from clusterman.local.stack import is_decision_line
from clusterman.signals.artifacts import ArtifactLocation
from clusterman.signals.artifacts import build_artifact
from clusterman.signals.artifacts import upload_artifact
from itests.tree_helpers import s3_client

REPO = Path(__file__).resolve().parents[1]
CLUSTER = "tree-itest"


def checkout_with_namespace(root: Path, namespace: str) -> Path:
    """This checkout's clusterman_signals plus a namespace of the test's own (unique socket names)."""
    checkout = root / "checkout"
    shutil.copytree(
        REPO / "clusterman_signals", checkout / "clusterman_signals", ignore=shutil.ignore_patterns("__pycache__")
    )
    (checkout / "clusterman_signals" / namespace).mkdir()
    (checkout / "clusterman_signals" / namespace / "__init__.py").write_text(
        "from clusterman_signals.clusterman import ConstantSignal\n"
    )
    return checkout


def decisions(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if is_decision_line(line)] if log.exists() else []


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.timeout(240)
def test_real_autoscaler_in_the_tree_survives_a_killed_signal(tmp_path, moto_server):
    namespace = f"itest_{uuid.uuid4().hex[:8]}"
    pool = f"pool{uuid.uuid4().hex[:6]}"
    bucket = f"signals-{uuid.uuid4().hex[:8]}"
    create_bucket(moto_server.url, bucket)
    group = create_pool_group(moto_server.url, CLUSTER, pool, max_size=10)
    tarball = build_artifact(checkout_with_namespace(tmp_path, namespace), "v1", tmp_path, worktree=True)
    upload_artifact(s3_client(moto_server.url), ArtifactLocation(bucket, "itest", "v1"), tarball)

    main = {
        "clusters": {CLUSTER: {"aws_region": "us-west-2"}},
        "aws": {"region": "us-west-2", "endpoint_url": moto_server.url, "signals_bucket": bucket},
        "autoscaling": {"default_signal_role": namespace},
        "autoscale_signal": {"name": "ConstantSignal", "branch_or_tag": "v1", "period_minutes": 1,
                             "parameters": {"cpus": 6}},
        "cluster_config_directory": "clusters",
        "state_directory": "state",
        "events": {"port": 0},
    }  # fmt: skip
    (tmp_path / "clusters" / CLUSTER).mkdir(parents=True)
    (tmp_path / "clusterman.yaml").write_text(yaml.safe_dump(main))
    limits = {"min_capacity": 1, "max_capacity": 8, "max_weight_to_add": 8, "max_weight_to_remove": 8}
    pool_config = {"resource_groups": [{"asg": {"tag": "clusterman:pool"}}], "scaling_limits": limits}
    (tmp_path / "clusters" / CLUSTER / f"{pool}.simulated").write_text(yaml.safe_dump(pool_config))
    logs = tmp_path / "logs"
    env = {**os.environ, **FAKE_CREDENTIALS, "CMAN_CLUSTER": CLUSTER, "CMAN_POOL": pool, "CMAN_SCHEDULER": "simulated",
           "CMAN_ARGS": "--period-seconds 1 --no-splay", "CMAN_LOG_DIR": str(logs)}  # fmt: skip
    bootstrap = subprocess.Popen(
        [sys.executable, "-m", "clusterman.batch.autoscaler_bootstrap", "--env-config-path",
         str(tmp_path / "clusterman.yaml"), "--codename", "itest", "--poll-interval", "1"],
        env=env, stdout=(tmp_path / "bootstrap.log").open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    autoscaler_log = logs / "autoscaler.log"
    try:
        # ConstantSignal asks for 6 cpus; one m5.large (2 cpus): 300% -> ceil(1 x 300 / 70) = 5
        first = wait_for(lambda: decisions(autoscaler_log), 90, "the first decision")
        assert "target 1 -> 5" in first[0], first[0]
        wait_for(lambda: any("target 5 -> 5" in d for d in decisions(autoscaler_log)), 30, "a settled pool")

        pattern = f"clusterman_signals.run {namespace} ConstantSignal __default__"
        victim = int(subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()[0])
        os.kill(victim, signal.SIGKILL)
        killed = len(decisions(autoscaler_log))

        def came_back():
            pids = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
            return pids and int(pids[0]) != victim

        wait_for(came_back, 30, "supervisord to restart the signal")
        after = wait_for(lambda: decisions(autoscaler_log)[killed + 3 :], 30, "three more runs")
        assert all("target 5 -> 5" in line for line in after), after  # the runs decide on the signal again
        assert bootstrap.poll() is None
    finally:
        bootstrap.send_signal(signal.SIGTERM)
        assert bootstrap.wait(60) == 0
    assert not subprocess.run(["pgrep", "-f", namespace], capture_output=True, text=True).stdout
    assert group
