"""Build clusterman's wheel from this checkout, and a local wheelhouse of its pinned closure.

The wheelhouse is a directory that persists between runs ($CLUSTERMAN_WHEELHOUSE, default
~/.cache/clusterman/wheelhouse): once it holds the pinned wheels, every install is offline
(``--no-index``); PyPI is asked only to fill it the first time.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# What a wheel is built from; the rest of the checkout (tests, docs, caches) stays out of the copy.
SOURCES = ("clusterman", "clusterman_signals", "config", "supervisord", "pyproject.toml", "setup.py", "README.md")
JUNK = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache", "*.egg-info", "build", "dist")


def wheelhouse() -> Path:
    configured = os.environ.get("CLUSTERMAN_WHEELHOUSE")
    path = Path(configured) if configured else Path.home() / ".cache" / "clusterman" / "wheelhouse"
    path.mkdir(parents=True, exist_ok=True)
    return path


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a process that must not see this checkout or the test venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(extra)
    return env


def pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        check=False,
        env=clean_env(),
    )


def build_wheel(work: Path) -> Path:
    """clusterman-*.whl built from a copy of the sources (the build never writes into the checkout)."""
    source = work / "source"
    source.mkdir()
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, symlinks=True, ignore=JUNK)
        else:
            shutil.copy2(path, source / name)
    dist = work / "dist"
    built = pip("wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", str(dist), str(source))
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("clusterman-*.whl")
    return wheel


def fill_wheelhouse(*requirements: str, constraints: Path | None = None) -> Path:
    """Make sure the wheelhouse holds every wheel ``requirements`` (pip arguments) need."""
    house = wheelhouse()
    common = ["download", "--quiet", "--only-binary=:all:", "--dest", str(house)]
    if constraints is not None:
        common += ["--constraint", str(constraints)]
    # One filler at a time (pytest-xdist workers share the directory): no half-written wheel is read.
    with open(house / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        offline = pip(*common, "--no-index", "--find-links", str(house), *requirements)
        if offline.returncode != 0:
            online = pip(*common, *requirements)
            assert online.returncode == 0, f"cannot fill the wheelhouse {house}: {online.stderr}"
    return house
