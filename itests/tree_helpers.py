"""Helpers for the process-tree itests: a git repo with tagged signal versions, configs, the tree.

The repo holds this checkout's ``clusterman_signals`` plus a namespace ``itest_versions`` whose
signal answers ``cpus`` = the version number and ``mem`` = its own pid, so a test can tell which
version serves a signal and whether the process was restarted. Any name starting with ``WhoAmI``
is that signal: each test picks names of its own, hence socket names of its own (abstract sockets
are shared by every process on the machine, including other tests running in parallel).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import yaml

from clusterman.signals.artifacts import ArtifactLocation
from clusterman.signals.artifacts import build_artifact
from clusterman.signals.artifacts import upload_artifact
from clusterman.tree.supervisor import processes_with_env

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
CODENAME = "itest"
VERSIONED_NAMESPACE = "itest_versions"

NAMESPACE_SOURCE = '''"""Signals for the process-tree itests: cpus = the version, mem = the serving pid."""

import os

from clusterman_signals.base_signal import BaseSignal
from clusterman_signals.base_signal import SignalResources

VERSION_CPUS = {cpus}


class WhoAmI(BaseSignal):
    def value(self, metrics, timestamp):
        return SignalResources(cpus=VERSION_CPUS, mem=float(os.getpid()))


def __getattr__(name):
    if name.startswith("WhoAmI"):
        return WhoAmI
    raise AttributeError(name)
'''


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=itest", "-c", "user.email=itest@localhost", *args],
        check=True,
        capture_output=True,
    )


def make_signal_repo(repo: Path, versions: dict[str, float]) -> None:
    """A git repo with one commit and tag per version, ``itest_versions.VERSION_CPUS`` = its number."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    sdk = REPO_ROOT / "clusterman_signals"
    shutil.copytree(sdk, repo / "clusterman_signals", ignore=shutil.ignore_patterns("__pycache__"))
    namespace = repo / "clusterman_signals" / VERSIONED_NAMESPACE
    namespace.mkdir()
    for tag, cpus in versions.items():
        (namespace / "__init__.py").write_text(NAMESPACE_SOURCE.format(cpus=cpus))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"signals {tag}")
        git(repo, "tag", tag)


@dataclass(frozen=True)
class BuiltVersions:
    repo: Path
    tarballs: dict[str, Path]


def build_versions(work: Path, versions: dict[str, float]) -> BuiltVersions:
    repo = work / "signals-repo"
    make_signal_repo(repo, versions)
    out = work / "tarballs"
    out.mkdir()
    return BuiltVersions(repo, {v: build_artifact(repo, v, out) for v in versions})


def s3_client(endpoint: str) -> Any:
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-west-2")


def new_bucket(endpoint: str) -> str:
    bucket = f"signals-{uuid.uuid4().hex[:12]}"
    s3_client(endpoint).create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    return bucket


def upload(endpoint: str, bucket: str, version: str, tarball: Path) -> None:
    upload_artifact(s3_client(endpoint), ArtifactLocation(bucket, CODENAME, version), tarball)


def signal_block(name: str, version: str, namespace: str = VERSIONED_NAMESPACE) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "branch_or_tag": version, "period_minutes": 1}


@dataclass
class TreeConfig:
    """A main config and one pool file in a tmp dir, pointing at moto's S3."""

    root: Path
    endpoint: str
    bucket: str
    pool: str
    key_file: Path | None = None

    @property
    def main_path(self) -> Path:
        return self.root / "clusterman.yaml"

    @property
    def pool_path(self) -> Path:
        return self.root / "clusters" / "itest-cluster" / f"{self.pool}.simulated"

    def write_main(self, default_signal: dict[str, Any]) -> None:
        aws: dict[str, Any] = {"region": "us-west-2", "endpoint_url": self.endpoint, "signals_bucket": self.bucket}
        if self.key_file is not None:
            aws["access_key_file"] = str(self.key_file)
        main = {
            "clusters": {"itest-cluster": {"aws_region": "us-west-2"}},
            "aws": aws,
            "autoscaling": {"default_signal_role": VERSIONED_NAMESPACE},
            "autoscale_signal": default_signal,
            "cluster_config_directory": "clusters",
        }
        self.main_path.write_text(yaml.safe_dump(main))

    def write_pool(self, app_signals: dict[str, dict[str, Any]], raw: str | None = None) -> None:
        self.pool_path.parent.mkdir(parents=True, exist_ok=True)
        pool = {
            "resource_groups": [{"simulated": {}}],
            "scaling_limits": {"min_capacity": 1, "max_capacity": 9, "max_weight_to_add": 5, "max_weight_to_remove": 5},
            "app_signals": app_signals,
        }
        self.pool_path.write_text(raw if raw is not None else yaml.safe_dump(pool))


def unique_name(prefix: str = "WhoAmI") -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


class Bootstrap:
    """``python -m clusterman.batch.autoscaler_bootstrap`` as a real child process, and its output."""

    def __init__(
        self,
        config: TreeConfig,
        work: Path,
        extra_args: tuple[str, ...] = (),
        cman_args: str = "",
        autoscaler: str = "fake_autoscaler.py",
        name: str = "bootstrap",
        prefix: tuple[str, ...] = (),
    ) -> None:
        """``prefix``: a command the bootstrap runs under (``unshare -m …``, which must exec the rest)."""
        self.out = work / f"{name}-autoscaler.jsonl"
        self.stderr_path = work / f"{name}.stderr"
        self.marker = f"CMAN_ITEST_MARKER={uuid.uuid4().hex}"
        self.last_good = work / "last-good"
        autoscaler = f"{sys.executable} {FIXTURES / autoscaler} --out {self.out}"
        env = {
            **os.environ,
            "CMAN_CLUSTER": "itest-cluster",
            "CMAN_POOL": config.pool,
            "CMAN_SCHEDULER": "simulated",
            "CMAN_ARGS": cman_args,
            "CMAN_SIGNALS_CODENAME": CODENAME,
            "CMAN_LAST_GOOD_DIR": str(self.last_good),  # the test's own, never the user's
            "PYTHONUNBUFFERED": "1",
        }
        key, _, value = self.marker.partition("=")
        env[key] = value
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [
                *prefix,
                sys.executable,
                "-m",
                "clusterman.batch.autoscaler_bootstrap",
                "--env-config-path",
                str(config.main_path),
                "--autoscaler-command",
                autoscaler,
                "--poll-interval",
                "0.2",
                "--fetch-timeout",
                "30",
                "--signal-timeout",
                "30",
                *extra_args,
            ],
            env=env,
            stdout=self._stderr,
            stderr=self._stderr,
        )

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def runs(self) -> list[dict[str, Any]]:
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.endswith("}")]

    def wait_for_run(self, accept: Callable[[dict[str, Any]], bool], timeout: float = 30.0) -> dict[str, Any]:
        """The first autoscaler run (a line of its output) written from now on that ``accept`` likes."""
        deadline = time.monotonic() + timeout
        seen = len(self.runs())
        while time.monotonic() < deadline:
            runs = self.runs()
            for run in runs[seen:]:
                if accept(run):
                    return run
            seen = len(runs)
            if self.proc.poll() is not None:
                raise AssertionError(f"the bootstrap exited with {self.proc.returncode}:\n{self.stderr}")
            time.sleep(0.1)
        raise AssertionError(f"no matching autoscaler run within {timeout} s; last: {self.runs()[-1:]}\n{self.stderr}")

    def wait_log(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.stderr:
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} never appeared in the bootstrap's output:\n{self.stderr}")
            time.sleep(0.1)

    def wait_kept(self, timeout: float = 30.0) -> None:
        """Until the configuration this bootstrap's autoscaler ran under is kept in $CMAN_LAST_GOOD_DIR."""
        self.wait_log("the autoscaler finished a run under this configuration", timeout)
        deadline = time.monotonic() + timeout  # kept right after that line is logged
        while not list(self.last_good.glob("*/current")):
            assert time.monotonic() < deadline, "nothing kept"
            time.sleep(0.05)

    def wait_exit(self, timeout: float = 60.0) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._stderr.close()

    def tree_pids(self) -> list[int]:
        """Every live process that inherited this bootstrap's environment (the whole tree)."""
        return [pid for pid in processes_with_env(self.marker) if pid != self.proc.pid]

    def kill(self) -> None:
        """Clean up after a failed test: the bootstrap and anything of its tree still alive."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in self.tree_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._stderr.close()
