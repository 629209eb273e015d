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
from typing import Any

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


class Tree:
    """The real tree on a pool whose one signal, ConstantSignal, asks for 6 cpus."""

    def __init__(
        self,
        tmp_path: Path,
        moto_url: str,
        bootstrap_args: tuple[str, ...] = (),
        prefix: tuple[str, ...] = (),
        main_extra: dict[str, Any] | None = None,
        scheduler: str = "simulated",
        cman_args: str = "",
    ) -> None:
        """``prefix``: a command the bootstrap runs under (``unshare -m …``, which must exec the rest).
        ``main_extra``: keys of the main file, dotted (``state.backend``), over the defaults below."""
        self.tmp_path = tmp_path
        self.namespace = f"itest_{uuid.uuid4().hex[:8]}"
        self.pool = f"pool{uuid.uuid4().hex[:6]}"
        bucket = f"signals-{uuid.uuid4().hex[:8]}"
        create_bucket(moto_url, bucket)
        self.group = create_pool_group(moto_url, CLUSTER, self.pool, max_size=10)
        tarball = build_artifact(checkout_with_namespace(tmp_path, self.namespace), "v1", tmp_path, worktree=True)
        upload_artifact(s3_client(moto_url), ArtifactLocation(bucket, "itest", "v1"), tarball)

        self.main_path = tmp_path / "clusterman.yaml"
        self.main = {
            "clusters": {CLUSTER: {"aws_region": "us-west-2"}},
            "aws": {"region": "us-west-2", "endpoint_url": moto_url, "signals_bucket": bucket},
            "autoscaling": {"default_signal_role": self.namespace},
            "autoscale_signal": {"name": "ConstantSignal", "branch_or_tag": "v1", "period_minutes": 1,
                                 "parameters": {"cpus": 6}},
            "cluster_config_directory": "clusters",
            "state_directory": "state",
            "events": {"port": 0},
        }  # fmt: skip
        self.edit_main(main_extra or {})
        (tmp_path / "clusters" / CLUSTER).mkdir(parents=True)
        limits = {"min_capacity": 1, "max_capacity": 8, "max_weight_to_add": 8, "max_weight_to_remove": 8}
        pool_config = {"resource_groups": [{"asg": {"tag": "clusterman:pool"}}], "scaling_limits": limits}
        (tmp_path / "clusters" / CLUSTER / f"{self.pool}.{scheduler}").write_text(yaml.safe_dump(pool_config))
        logs = tmp_path / "logs"
        self.env = {**os.environ, **FAKE_CREDENTIALS, "CMAN_CLUSTER": CLUSTER, "CMAN_POOL": self.pool,
                    "CMAN_SCHEDULER": scheduler, "CMAN_ARGS": f"--period-seconds 1 --no-splay {cman_args}".strip(),
                    "CMAN_LOG_DIR": str(logs)}  # fmt: skip
        self.command = [
            *prefix, sys.executable, "-m", "clusterman.batch.autoscaler_bootstrap", "--env-config-path",
            str(self.main_path), "--codename", "itest", "--poll-interval", "1", *bootstrap_args,
        ]  # fmt: skip
        self.log = tmp_path / "bootstrap.log"
        self.autoscaler_log = logs / "autoscaler.log"
        self.runner = f"clusterman_signals.run {self.namespace} ConstantSignal __default__"
        self.start()

    def start(self) -> None:
        """Start the bootstrap (again, after ``stop``: its log goes on in the same file)."""
        with self.log.open("ab") as out:
            self.bootstrap = subprocess.Popen(self.command, env=self.env, stdout=out, stderr=subprocess.STDOUT)

    def edit_main(self, changes: dict[str, Any]) -> None:
        """Set dotted keys of the main file and write it (the bootstrap applies it as an edit)."""
        for dotted, value in changes.items():
            *parents, key = dotted.split(".")
            block = self.main
            for name in parents:
                block = block.setdefault(name, {})
            block[key] = value
        self.main_path.write_text(yaml.safe_dump(self.main))

    def decisions(self) -> list[str]:
        return decisions(self.autoscaler_log)

    def runner_pid(self) -> int | None:
        pids = subprocess.run(["pgrep", "-f", self.runner], capture_output=True, text=True).stdout.split()
        return int(pids[0]) if pids else None

    def stop(self) -> None:
        self.bootstrap.send_signal(signal.SIGTERM)
        assert self.bootstrap.wait(60) == 0
        assert not subprocess.run(["pgrep", "-f", self.namespace], capture_output=True, text=True).stdout


@pytest.mark.timeout(240)
def test_real_autoscaler_in_the_tree_survives_a_killed_signal(tmp_path, moto_server):
    tree = Tree(tmp_path, moto_server.url)
    try:
        # ConstantSignal asks for 6 cpus; one m5.large (2 cpus): 300% -> ceil(1 x 300 / 70) = 5
        first = wait_for(tree.decisions, 90, "the first decision")
        assert "target 1 -> 5" in first[0], first[0]
        wait_for(lambda: any("target 5 -> 5" in d for d in tree.decisions()), 30, "a settled pool")

        victim = tree.runner_pid()
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        killed = len(tree.decisions())
        wait_for(lambda: tree.runner_pid() not in (None, victim), 30, "supervisord to restart the signal")
        after = wait_for(lambda: tree.decisions()[killed + 3 :], 30, "three more runs")
        assert all("target 5 -> 5" in line for line in after), after  # the runs decide on the signal again
        assert tree.bootstrap.poll() is None
    finally:
        tree.stop()
    assert tree.group


@pytest.mark.timeout(240)
def test_a_stopped_signal_runner_is_restarted_by_the_bootstrap(tmp_path, moto_server):
    """supervisord sees a SIGSTOPped (or hung) runner RUNNING; the autoscaler's runs find it silent
    and say so in the heartbeat, and the bootstrap restarts it after ``--stale-periods`` periods.
    Before: nothing ever restarted it, and a stopped default signal left the pool unscaled for good."""
    tree = Tree(tmp_path, moto_server.url, ("--stale-periods", "3"))
    try:
        wait_for(lambda: any("target 5 -> 5" in d for d in tree.decisions()), 120, "a settled pool")
        victim = tree.runner_pid()
        assert victim is not None
        os.kill(victim, signal.SIGSTOP)
        stopped = time.monotonic()
        wait_for(lambda: "has not answered the autoscaler for" in tree.log.read_text(), 60, "the bootstrap to notice")
        wait_for(lambda: tree.runner_pid() not in (None, victim), 30, "supervisord to start it again")
        restarted = time.monotonic()
        runs = len(tree.decisions())
        wait_for(lambda: tree.decisions()[runs + 2 :], 30, "runs on the new runner")
        print(f"runner restarted {restarted - stopped:.1f} s after SIGSTOP (period 1 s, 3 periods)")
        line = next(x for x in tree.log.read_text().splitlines() if "has not answered the autoscaler for" in x)
        assert f"the signal {tree.namespace}.ConstantSignal@v1 for __default__ (pid {victim})" in line, line
        # every decision since keeps the pool as it was (a loaded machine adds "overrun" lines)
        decided = [d for d in tree.decisions()[runs:] if "| target" in d]
        assert decided and all("target 5 -> 5" in d for d in decided), tree.decisions()[runs:]
        assert tree.bootstrap.poll() is None
    finally:
        tree.stop()
