"""Every path a deployment starts a program by still starts it.

Clusterman's users run ``python -m clusterman.batch.autoscaler`` (and the bootstrap and the
collector); the shipped supervisord files, the Dockerfile and the docs name more; supervisord
configs written by earlier versions name the tree's helpers under ``clusterman.tree``. Each is
started here as a process and must answer as its program does.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_layers import ALIASES

REPO = Path(__file__).resolve().parents[1]
NAMED_IN = [*sorted((REPO / "supervisord").iterdir()), REPO / "Dockerfile", REPO / "README.md",
            *sorted((REPO / "docs").glob("*.md"))]  # fmt: skip
MODULE = re.compile(r"-m (clusterman(?:\.[\w.]+)?)(?![\w])")

# (how it is started, what it must print, its exit status)
STARTS = [
    ([sys.executable, "-m", "clusterman.batch.autoscaler", "--help"], "--budget-seconds", 0),
    ([sys.executable, "-m", "clusterman.batch.autoscaler_bootstrap", "--help"], "--env-config-path", 0),
    ([sys.executable, "-m", "clusterman.batch.metrics_collector", "--help"], "--env-config-path", 0),
    ([sys.executable, "-m", "clusterman.batch.spot_price_collector", "--help"], "--aws-region", 0),
    ([sys.executable, "-m", "clusterman.batch.drainer", "--help"], "--cluster", 0),
    ([sys.executable, "-m", "clusterman", "--help"], "status", 0),
    ([str(Path(sys.executable).parent / "clusterman"), "--help"], "status", 0),
    ([sys.executable, "-m", "clusterman.batch.parent_death"], "NAME COMMAND", 2),
    ([sys.executable, "-m", "clusterman.batch.fetch_signal"], "usage: fetch_clusterman_signal", 2),
    ([sys.executable, "-m", "clusterman.batch.run_signal"], "usage: run_clusterman_signal", 2),
    # the earlier paths of the tree's helpers: the same programs
    ([sys.executable, "-m", "clusterman.tree.parent_death"], "NAME COMMAND", 2),
    ([sys.executable, "-m", "clusterman.tree.fetch_signal"], "usage: fetch_clusterman_signal", 2),
    ([sys.executable, "-m", "clusterman.tree.run_signal"], "usage: run_clusterman_signal", 2),
    ([sys.executable, "-m", "clusterman.tree.parent_death", "test", "true"], "", 0),
]


def test_every_program_starts_by_every_path_it_is_known_by():
    def start(cmd: list[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)

    started = [(start(cmd), want, code) for cmd, want, code in STARTS]
    for proc, want, code in started:
        out, _ = proc.communicate(timeout=60)
        assert (proc.returncode, want in out) == (code, True), f"{proc.args}: {out}"


def test_the_earlier_paths_are_the_aliases_the_layer_contract_allows():
    modules = {cmd[2] for cmd, _, _ in STARTS if cmd[1] == "-m"}
    assert {m for m in modules if m.startswith("clusterman.tree.")} == ALIASES.keys()


@pytest.mark.parametrize("path", NAMED_IN, ids=lambda p: p.name)
def test_every_module_a_shipped_file_starts_is_started_here(path):
    named = set(MODULE.findall(path.read_text()))
    started = {cmd[2] for cmd, _, _ in STARTS if cmd[1] == "-m"} | {"clusterman.local.stack"}
    assert named <= started, f"{path.name} starts {sorted(named - started)}: add them to STARTS"
