"""Bootstrap start → the first autoscaling decision, with three signals in two versions from S3.

The tree: the real bootstrap, supervisord, one fetcher per version downloading from moto's server
on loopback, three signal runners from the fetched virtualenvs, and the real autoscaler, scaling an
Auto Scaling group in moto. Two clocks stop: when this process has had an answer from all three
signals over their sockets, and when the autoscaler has logged its first decision.

Baseline, in the same run: the same three runner processes started directly from a local
checkout (``python -m clusterman_signals.run``, no S3, no supervisord) until all three answer.
Publishing (building the venvs) is not timed: it happens once per version, not per start.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
import yaml

from clusterman.local.moto_server import FAKE_CREDENTIALS
from clusterman.local.moto_server import MotoServer
from clusterman.local.stack import create_pool_group
from clusterman.local.stack import is_decision_line
from clusterman.signals.artifacts import ArtifactLocation
from clusterman.signals.artifacts import build_artifact
from clusterman.signals.artifacts import upload_artifact
from clusterman.signals.client import SignalAddress
from clusterman.signals.client import SignalClient
from clusterman.signals.protocol import SignalError

REPO = Path(__file__).resolve().parents[1]
CODENAME = "bench"
SIGNAL = "ConstantSignal"
APPS = ("__default__", "app1", "app2")
VERSIONS = {"__default__": "bench-a", "app1": "bench-a", "app2": "bench-b"}


def make_checkout(root: Path, namespace: str) -> Path:
    """A copy of this checkout's clusterman_signals with a namespace of this run's own (so its socket
    names are unique on the machine) serving ConstantSignal."""
    checkout = root / "checkout"
    shutil.copytree(
        REPO / "clusterman_signals", checkout / "clusterman_signals", ignore=shutil.ignore_patterns("__pycache__")
    )
    package = checkout / "clusterman_signals" / namespace
    package.mkdir()
    (package / "__init__.py").write_text(f"from clusterman_signals.clusterman import {SIGNAL}\n")
    return checkout


def write_configs(root: Path, endpoint: str, bucket: str, namespace: str, pool: str) -> Path:
    def block(version: str) -> dict[str, Any]:
        return {"name": SIGNAL, "namespace": namespace, "branch_or_tag": version, "period_minutes": 1}

    main = {
        "clusters": {"bench": {"aws_region": "us-west-2"}},
        "aws": {"region": "us-west-2", "endpoint_url": endpoint, "signals_bucket": bucket},
        "autoscale_signal": block(VERSIONS["__default__"]),
        "cluster_config_directory": "clusters",
        "state_directory": "state",
        "events": {"port": 0},
    }
    limits = {"min_capacity": 1, "max_capacity": 10, "max_weight_to_add": 5, "max_weight_to_remove": 5}
    pool_config = {
        "resource_groups": [{"asg": {"tag": "clusterman:pool"}}],
        "scaling_limits": limits,
        "app_signals": {app: block(VERSIONS[app]) for app in APPS[1:]},
    }
    (root / "clusters" / "bench").mkdir(parents=True)
    (root / "clusters" / "bench" / f"{pool}.simulated").write_text(yaml.safe_dump(pool_config))
    (root / "clusterman.yaml").write_text(yaml.safe_dump(main))
    return root / "clusterman.yaml"


def wait_all_answer(addresses: list[SignalAddress], pool: str, timeout: float = 120.0) -> float:
    """Poll until every signal has answered one evaluation; return the monotonic time it happened."""
    deadline = time.monotonic() + timeout
    pending = list(addresses)
    while pending:
        address = pending[0]
        client = SignalClient(address, "bench", pool, {"cpus": 1}, read_timeout=5, connect_timeout=0.05)
        try:
            with client:
                client.evaluate({}, time.time())
            pending.pop(0)
        except SignalError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{address} did not answer within {timeout:g} s") from None
            time.sleep(0.01)
    return time.monotonic()


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_first_decision(log: Path, timeout: float = 120.0) -> float:
    """Poll the autoscaler's log until it has printed its first decision line."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [line for line in log.read_text().splitlines() if is_decision_line(line)] if log.exists() else []
        if lines:
            if "no resource group" in lines[0]:
                raise RuntimeError(f"the first decision found no resource group to scale: {lines[0]}")
            return time.monotonic()
        time.sleep(0.02)
    raise RuntimeError(f"no decision in {log} within {timeout:g} s")


def time_bootstrap(config: Path, pool: str, namespace: str, log: Path) -> dict[str, float]:
    env = {
        **os.environ,
        **FAKE_CREDENTIALS,
        "CMAN_CLUSTER": "bench",
        "CMAN_POOL": pool,
        "CMAN_SCHEDULER": "simulated",
        "CMAN_LOG_DIR": str(log.parent / f"{pool}-logs"),
        # the first run at once: the period's grid and splay would only add waiting to the figure
        "CMAN_ARGS": "--period-seconds 1 --no-splay",
    }
    command = [sys.executable, "-m", "clusterman.batch.autoscaler_bootstrap", "--env-config-path", str(config),
               "--codename", CODENAME]  # fmt: skip
    addresses = [SignalAddress(namespace, SIGNAL, app) for app in APPS]
    with log.open("wb") as out:
        started = time.monotonic()
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=out)
        try:
            answered = wait_all_answer(addresses, pool)
            decided = wait_first_decision(log.parent / f"{pool}-logs" / "autoscaler.log")
        finally:
            stop(proc)
    text = log.read_text()
    fetched = re.search(r"fetched 2 signal version\(s\) in ([\d.]+) s", text)
    return {
        "signals": answered - started,
        "decision": decided - started,
        "fetch_step": float(fetched.group(1)) if fetched else float("nan"),
    }


def time_direct(checkout: Path, namespace: str, pool: str) -> float:
    addresses = [SignalAddress(namespace, SIGNAL, app) for app in APPS]
    started = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "clusterman_signals.run", namespace, SIGNAL, app],
            cwd=checkout,
            stderr=subprocess.DEVNULL,
        )
        for app in APPS
    ]
    try:
        answered = wait_all_answer(addresses, pool)
    finally:
        for proc in procs:
            stop(proc)
    return answered - started


def run(quick: bool) -> dict[str, Any]:
    repeat = 1 if quick else 3
    namespace = f"bench_{uuid.uuid4().hex[:8]}"
    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="clusterman-bench-") as tmp, MotoServer() as moto:
        root = Path(tmp)
        checkout = make_checkout(root, namespace)
        s3 = boto3.client("s3", endpoint_url=moto.url, region_name="us-west-2", **_credentials())
        s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
        built = root / "built"
        built.mkdir()
        for version in sorted(set(VERSIONS.values())):
            tarball = build_artifact(checkout, version, built, worktree=True)
            upload_artifact(s3, ArtifactLocation(bucket, CODENAME, version), tarball)
        signals, decisions, fetch_steps, direct = [], [], [], []
        for i in range(repeat):
            pool = f"pool{i}"
            create_pool_group(moto.url, "bench", pool, max_size=10)
            config_root = root / f"configs{i}"
            config_root.mkdir()
            config = write_configs(config_root, moto.url, bucket, namespace, pool)
            timing = time_bootstrap(config, pool, namespace, root / f"bootstrap{i}.log")
            signals.append(timing["signals"])
            decisions.append(timing["decision"])
            fetch_steps.append(timing["fetch_step"])
            direct.append(time_direct(checkout, namespace, pool))
    decision_s, direct_s = statistics.median(decisions), statistics.median(direct)
    return {
        "what": "seconds from bootstrap start to the first decision, 3 signals in 2 versions fetched from S3",
        "repeat": repeat,
        "bootstrap_to_first_decision_seconds": round(decision_s, 3),
        "bootstrap_to_signals_answering_seconds": round(statistics.median(signals), 3),
        "of_which_fetch_seconds": round(statistics.median(fetch_steps), 3),
        "baseline_direct_runners_seconds": round(direct_s, 3),
        "ratio_to_baseline": round(decision_s / direct_s, 2),
        "goal_seconds_to_first_decision": 10,
    }


def _credentials() -> dict[str, str]:
    return {
        "aws_access_key_id": FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    }
