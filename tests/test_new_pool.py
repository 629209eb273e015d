"""``deploy/kubernetes/new-pool`` refuses what cannot work before it writes anything.

Before, ``new-pool prod 'bad pool'`` rendered a Deployment named ``clusterman-prod-bad pool`` and
``new-pool prod s1 bogus`` a pool file no autoscaler reads (``CMAN_SCHEDULER=bogus``). Names are
now checked as Kubernetes takes them, the scheduler as the loader reads it, and the files it
writes with ``clusterman config check`` (a cluster the main file does not name, say).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def deploy(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "deploy", tmp_path / "deploy", symlinks=True)
    return tmp_path / "deploy" / "kubernetes"


def new_pool(deploy: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CLUSTERMAN": str(Path(sys.executable).parent / "clusterman")}
    return subprocess.run(
        [str(deploy / "new-pool"), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def written(deploy: Path) -> set[str]:
    return {str(p.relative_to(deploy)) for p in deploy.rglob("*")}


@pytest.mark.parametrize(
    ("args", "status", "said"),
    [
        (["prod", "bad pool"], 2, "new-pool: pool name 'bad pool' must be lowercase letters, digits and '-'"),
        (["prod", "Web"], 2, "new-pool: pool name 'Web' must be"),
        (["prod", "web-"], 2, "new-pool: pool name 'web-' must be"),
        (["pr_od", "web"], 2, "new-pool: cluster name 'pr_od' must be"),
        (["prod", "a" * 48], 2, f"new-pool: 'clusterman-prod-{'a' * 48}' is 53 + 11 characters"),
        (["prod", "s1", "bogus"], 2, "new-pool: unknown scheduler 'bogus' (kubernetes or mesos"),
        (["prod", "s1", "kubernetes", "more"], 2, "usage: "),
        (["staging", "s1"], 1, "cluster staging is not in the main file's clusters (known: prod)"),
    ],
)
def test_what_cannot_work_is_refused_in_one_line_and_nothing_is_written(
    deploy: Path, args: list[str], status: int, said: str
) -> None:
    before = written(deploy)
    done = new_pool(deploy, *args)
    assert done.returncode == status, done
    assert said in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert written(deploy) == before


def test_a_good_pool_is_checked_and_written_with_its_link(deploy: Path) -> None:
    done = new_pool(deploy, "prod", "api")
    assert done.returncode == 0, done
    assert "clusterman.yaml and 1 pool file: ok" in done.stderr
    assert done.stdout.startswith(f"wrote {deploy / 'pools' / 'prod-api'}; edit api.kubernetes there")
    link = deploy / "shared" / "srv-configs" / "clusterman-clusters" / "prod" / "api.kubernetes"
    assert link.is_symlink() and link.resolve() == (deploy / "pools" / "prod-api" / "api.kubernetes").resolve()
    assert new_pool(deploy, "prod", "api").returncode == 1  # once
