"""A signal with a third-party dependency: published from its git tag with its own pinned
requirements, built offline from a wheelhouse, unpacked, and served by the venv's interpreter."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterman.signals.artifacts import build_artifact
from clusterman.signals.client import SignalAddress
from clusterman.signals.client import SignalClient
from clusterman.signals.safe_extract import extract
from clusterman.signals.signal_venv import SDK_MODULES
from clusterman.signals.signal_venv import TOP_LEVEL
from clusterman.signals.signal_venv import BuildError
from clusterman.signals.signal_venv import check_runs
from clusterman.signals.signal_venv import venv_python
from itests.conftest import unique_app
from itests.conftest import wait_listening
from itests.tree_helpers import git
from itests.wheelhouse import REPO
from itests.wheelhouse import fill_wheelhouse

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("wheelhouse")]  # one worker builds it once

# dateutil needs six: a complete pinned list names both.
PINS = "python-dateutil==2.9.0.post0\nsix==1.17.0\n"
SIGNAL = '''"""Days between two ISO 8601 dates, counted by dateutil (a third-party package)."""

import dateutil
from dateutil.parser import isoparse
from dateutil.relativedelta import relativedelta

from clusterman_signals.base_signal import BaseSignal
from clusterman_signals.base_signal import SignalResources


class Deadline(BaseSignal):
    def value(self):
        span = relativedelta(isoparse(self.parameters["until"]), isoparse(self.parameters["since"]))
        return SignalResources(cpus=float(span.months * 100 + span.days), mem=None, disk=None, gpus=None)
'''


@pytest.fixture(scope="module")
def house() -> Path:
    requirements = Path(__file__).parent / "fixtures" / "signal_requirements.txt"
    return fill_wheelhouse("--requirement", str(requirements))


def signal_repo(root: Path, tags: dict[str, str]) -> Path:
    """A git repo with clusterman_signals/ plus the ``dated`` signal; one tag per requirements text."""
    repo = root / "signals"
    shutil.copytree(
        REPO / "clusterman_signals", repo / "clusterman_signals", ignore=shutil.ignore_patterns("__pycache__")
    )
    (repo / "clusterman_signals" / "dated").mkdir()
    (repo / "clusterman_signals" / "dated" / "__init__.py").write_text(SIGNAL)
    git(repo, "init", "-q", "-b", "main")
    for tag, pins in tags.items():
        (repo / "clusterman_signals" / "requirements.txt").write_text(pins)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"signals {tag}")
        git(repo, "tag", tag)
    return repo


def test_signal_imports_its_pinned_dependency(tmp_path: Path, house: Path) -> None:
    repo = signal_repo(tmp_path, {"v1": PINS})
    tarball = build_artifact(repo, "v1", tmp_path, wheelhouse=house)
    root = tmp_path / "fetched"
    root.mkdir()
    extract(tarball, root, TOP_LEVEL)
    check_runs(root)
    where = subprocess.run(
        [str(venv_python(root)), "-I", "-c", "import dateutil; print(dateutil.__file__)"],
        capture_output=True, text=True, cwd=root, check=True,
    )  # fmt: skip
    assert Path(where.stdout.strip()).is_relative_to(root / "venv")  # from the signal's venv, nowhere else

    address = SignalAddress("dated", "Deadline", unique_app())
    runner = subprocess.Popen(
        [str(venv_python(root)), "-I", "-m", "clusterman_signals.run", address.namespace, address.name, address.app],
        cwd=root, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_listening(address, runner, timeout=60)
        params = {"since": "2026-01-30", "until": "2026-03-02"}
        with SignalClient(address, "c", "p", parameters=params) as client:
            # dateutil clamps: Jan 30 + 1 month = Feb 28, then 2 days more (plain timedelta would say 31 days)
            assert client.evaluate({}, 1).cpus == 102.0
    finally:
        runner.kill()
        runner.wait()
        assert runner.stderr is not None
        runner.stderr.close()


def test_incomplete_or_unavailable_pins_fail_the_build(tmp_path: Path, house: Path) -> None:
    repo = signal_repo(tmp_path, {"no-six": "python-dateutil==2.9.0.post0\n", "absent": "six==0.0.1\n"})
    with pytest.raises(BuildError, match=r"requirements.txt is incomplete .*python-dateutil.*six"):
        build_artifact(repo, "no-six", tmp_path, wheelhouse=house)
    with pytest.raises(
        BuildError, match=rf"installing clusterman_signals/requirements.txt from the wheelhouse {house}"
    ):
        build_artifact(repo, "absent", tmp_path, wheelhouse=house)


def test_the_same_tag_built_twice_gives_the_same_bytes(tmp_path: Path, house: Path) -> None:
    """Fixed times, order and owners, gzip without a time, byte-code without the build's time or
    directory: the fetchers compare sha256s, and a new one made them fetch and install it again."""
    repo = signal_repo(tmp_path, {"v1": PINS})
    digests = []
    for attempt in ("first", "second"):
        out = tmp_path / attempt
        out.mkdir()
        digests.append(hashlib.sha256(build_artifact(repo, "v1", out, wheelhouse=house).read_bytes()).hexdigest())
        time.sleep(1.1)  # a second apart: any time stamp left in would differ
    assert digests[0] == digests[1]


def test_a_repository_without_the_sdk_is_refused_in_one_line(tmp_path: Path) -> None:
    """A signal repository of its own must carry the SDK (the runner and what signals import);
    publish accepted one without it, and every fetch of that version then failed."""
    repo = signal_repo(tmp_path, {})
    for module in SDK_MODULES:
        (repo / "clusterman_signals" / module).unlink()
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "namespaces only")
    git(repo, "tag", "bare")
    with pytest.raises(BuildError) as refused:
        build_artifact(repo, "bare", tmp_path)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{repo} (bare): clusterman_signals/ has no base_signal.py, run.py, "), message
    assert "a signal repository carries clusterman's signal SDK" in message


def test_the_sdk_modules_are_the_sdks_files() -> None:
    shipped = {p.name for p in (REPO / "clusterman_signals").glob("*.py")} - {"__init__.py"}
    assert set(SDK_MODULES) == shipped


TABLE = '''"""Cells a table of the parameters' rows takes, counted by tabulate (not in clusterman's venv)."""

from tabulate import tabulate

from clusterman_signals.base_signal import BaseSignal
from clusterman_signals.base_signal import SignalResources


class Table(BaseSignal):
    def value(self):
        rows = [row.split(",") for row in self.parameters["rows"].split(";")]
        return SignalResources(cpus=float(len(tabulate(rows, tablefmt="plain").split())))
'''


def test_evaluate_start_runs_the_signal_in_its_own_venv(tmp_path: Path, house: Path) -> None:
    """`signal evaluate --start` ran the signal in clusterman's venv: a signal importing a package of
    its own (tabulate) failed there with `No module named 'tabulate'`, though it ran once published."""
    repo = signal_repo(tmp_path, {})
    (repo / "clusterman_signals" / "requirements.txt").write_text("tabulate==0.9.0\n")
    (repo / "clusterman_signals" / "table").mkdir()
    (repo / "clusterman_signals" / "table" / "__init__.py").write_text(TABLE)
    metrics = tmp_path / "m.json"
    metrics.write_text('{"metrics": {}, "timestamp": 1700000000}')
    ran = subprocess.run(
        [sys.executable, "-m", "clusterman", "signal", "evaluate", "--start", "--repo", str(repo),
         "--wheelhouse", str(house), "--namespace", "table", "--name", "Table", "--app", unique_app(),
         "--metrics", str(metrics), "--param", "rows=a,b;c,d"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == {"cpus": 4.0, "mem": None, "disk": None, "gpus": None}
    assert ran.stderr == ""  # the runner's log is not the command's output
