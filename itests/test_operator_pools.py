"""The manifest checks and the install guide's test hold for whatever pools an operator has.

An operator adds pools the way the install guide says (``deploy/kubernetes/new-pool``) and
removes the example ones. Before, ``tests/test_deploy_manifests.py`` then failed
(``KeyError: 'prod-batch+kubernetes-lease'``: it rendered the optional components on the first
pool alphabetically but looked them up under ``prod-batch``), and ``itests/test_install_guide.py``
failed once a ``gpu`` pool existed (the guide's ``new-pool prod gpu`` refused it). Here both test
modules run, as they are in this checkout, on a copy of it where an operator did just that.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def operator_checkout(root: Path) -> Path:
    """What the two test modules read, copied (``clusterman/`` linked: they only read it)."""
    for name in ("conftest.py", "pyproject.toml", "Dockerfile", ".dockerignore"):
        shutil.copy(REPO / name, root / name)
    (root / "clusterman").symlink_to(REPO / "clusterman")
    shutil.copytree(REPO / "deploy", root / "deploy", symlinks=True)
    (root / "docs").mkdir()
    shutil.copy(REPO / "docs" / "deployment.md", root / "docs" / "deployment.md")
    (root / "tests").mkdir()
    for name in ("__init__.py", "test_deploy_manifests.py"):
        shutil.copy(REPO / "tests" / name, root / "tests" / name)
    shutil.copytree(REPO / "itests", root / "itests", ignore=shutil.ignore_patterns("__pycache__"))
    return root / "deploy" / "kubernetes"


def test_the_deploy_checks_hold_after_pools_are_added_and_the_examples_removed(tmp_path):
    kubernetes = operator_checkout(tmp_path)
    for pool in ("api", "gpu"):  # as the guide says; "api" sorts before the examples
        subprocess.run([kubernetes / "new-pool", "prod", pool], check=True, capture_output=True, timeout=30)
    for example in ("batch", "web"):
        shutil.rmtree(kubernetes / "pools" / f"prod-{example}")
        (kubernetes / "shared" / "srv-configs" / "clusterman-clusters" / "prod" / f"{example}.kubernetes").unlink()
    modules = ["tests/test_deploy_manifests.py", "itests/test_install_guide.py"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # not this run's xdist worker
    offline = "not supported_kubernetes and not dockerfile"  # those read no pool
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", offline, *modules],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
