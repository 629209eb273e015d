"""A relative ``simulation.trace.file`` is relative to the pool file, for every reader.

Each test runs from a working directory that holds no trace, so a reader that opens the path
against its working directory fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from clusterman.config.loader import load_main_config
from clusterman.config.loader import load_pool_config
from clusterman.core.config import MainConfig
from clusterman.core.config import MetricType
from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.datastore.datafile import write_metrics_file
from clusterman.simulator.inputs import Request
from clusterman.simulator.inputs import load_scenario
from clusterman.tree.snapshot import take_snapshot
from clusterman.wiring.schedulers import connector_for_pool

REPO = Path(__file__).resolve().parents[1]
POOL = PoolIdentity("local-dev", "p1", Scheduler.SIMULATED)
POOL_FILE = """
resource_groups:
  - simulated: {tag: p1-a}
scaling_limits: {min_capacity: 1, max_capacity: 10, max_weight_to_add: 5, max_weight_to_remove: 5}
simulation:
  trace: {file: ../../traces/day.json.gz, metric: cpus_allocated}
"""


def _srv(root: Path) -> Path:
    """srv-configs under ``root``: the shipped main file's settings, one pool, and its trace; returns the main file."""
    main = yaml.safe_load((REPO / "config" / "clusterman.yaml").read_text())
    main.update(cluster_config_directory="clusters", state_directory="state")
    (root / "clusters" / POOL.cluster).mkdir(parents=True)
    (root / "traces").mkdir()
    (root / "clusters" / POOL.cluster / "p1.simulated").write_text(POOL_FILE)
    series = [(1_700_000_000 + 60 * i, 2.0 + i % 5) for i in range(60)]
    write_metrics_file(
        root / "traces" / "day.json.gz",
        {MetricType.SYSTEM_METRICS: {"cpus_allocated|cluster=local-dev,pool=p1.simulated": series}},
    )
    main_path = root / "clusterman.yaml"
    main_path.write_text(yaml.safe_dump(main))
    return main_path


@pytest.fixture
def srv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    main_path = _srv(tmp_path / "srv")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    return main_path


def test_the_loader_makes_the_trace_path_absolute_from_the_pool_file(srv: Path, tmp_path: Path) -> None:
    main = load_main_config(srv)
    trace = load_pool_config(main, POOL).simulation.trace
    assert trace is not None and trace.file == str(srv.parent / "clusters" / "local-dev" / "../../traces/day.json.gz")
    other = _srv(tmp_path / "other")  # --cluster-config-directory: the file read is the one that counts
    trace = load_pool_config(main, POOL, str(other.parent / "clusters")).simulation.trace
    assert trace is not None and Path(trace.file).resolve() == other.parent / "traces" / "day.json.gz"


def test_the_autoscalers_connector_replays_the_trace(srv: Path) -> None:
    main = load_main_config(srv)
    connector = connector_for_pool(main, POOL, load_pool_config(main, POOL))
    connector.close()


def test_the_simulator_replays_the_trace_of_a_pool_file_given_relative(srv: Path) -> None:
    main: MainConfig = load_main_config(srv)
    scenario = load_scenario(main, Request(Path("../srv/clusters/local-dev/p1.simulated"), ()))
    assert [v.cpus for _, v in scenario.demand[:6]] == [2.0, 3.0, 4.0, 5.0, 6.0, 2.0]
    assert any("day.json.gz's cpus_allocated" in note for note in scenario.notes)


def test_the_snapshot_copy_points_at_the_live_trace(srv: Path, tmp_path: Path) -> None:
    main = load_main_config(srv)
    copy = take_snapshot(main, srv, srv.parent / "clusters" / "local-dev" / "p1.simulated", POOL, tmp_path / "snap")
    copied = load_main_config(copy)
    trace = load_pool_config(copied, POOL).simulation.trace
    assert trace is not None and Path(trace.file).resolve() == srv.parent / "traces" / "day.json.gz"
    connector_for_pool(copied, POOL, load_pool_config(copied, POOL)).close()
