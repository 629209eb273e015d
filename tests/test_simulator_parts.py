"""The simulator's parts alone: demand from metrics, prices, the oracle, signals in process, the bar."""

from __future__ import annotations

import inspect
import io

import pytest

from clusterman.cloud.simulated_group import SimulatedMarket
from clusterman.cloud.simulated_group import default_task
from clusterman.core.config import MetricType
from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.core.resources import NO_OPINION
from clusterman.core.resources import ResourceRequest
from clusterman.core.resources import Resources
from clusterman.datastore.datafile import write_metrics_file
from clusterman.events.event import ChangeDetail
from clusterman.events.exporter import AutoscalerMetrics
from clusterman.events.exporter import NodeAction
from clusterman.events.recorder import Recorder
from clusterman.signals.client import SignalAddress
from clusterman.signals.in_process import InProcessSignal
from clusterman.signals.protocol import SignalError
from clusterman.simulator.costs import max_ahead
from clusterman.simulator.costs import oracle_cost
from clusterman.simulator.inputs import SimulationInputError
from clusterman.simulator.inputs import read_metrics
from clusterman.simulator.prices import PriceBook
from clusterman.simulator.prices import spot_series
from clusterman.simulator.progress import ProgressBar
from clusterman.simulator.quiet_metrics import UPDATES
from clusterman.simulator.quiet_metrics import QuietMetrics
from clusterman.simulator.quiet_recorder import RECORDS
from clusterman.simulator.quiet_recorder import QuietRecorder
from clusterman.simulator.workload import demand_points

SYS = MetricType.SYSTEM_METRICS
WEB = PoolIdentity("c1", "web", Scheduler.KUBERNETES)


def test_demand_is_allocated_plus_pending_each_held_until_its_next_point():
    data = {
        SYS: {
            "cpus_allocated|cluster=c1,pool=web.kubernetes": [(0, 4.0), (120, 6.0)],
            "cpus_pending|cluster=c1,pool=web.kubernetes": [(60, 2.0), (180, 0.0)],
            "mem_allocated|cluster=c1,pool=web.kubernetes": [(0, 1000.0)],
            "cpus_allocated|cluster=c1,pool=db.kubernetes": [(0, 99.0)],
        }
    }
    assert demand_points(data, WEB) == [
        (0.0, Resources(cpus=4, mem=1000)),
        (60.0, Resources(cpus=6, mem=1000)),
        (120.0, Resources(cpus=8, mem=1000)),
        (180.0, Resources(cpus=6, mem=1000)),
    ]


def test_the_default_task_is_one_cpu_of_the_smallest_shape():
    small = SimulatedMarket("c5.large", "a", 1, Resources(cpus=2, mem=4000, disk=20000))
    large = SimulatedMarket("m5.xlarge", "a", 2, Resources(cpus=4, mem=16000, disk=20000))
    assert default_task([large, small]) == Resources(cpus=1, mem=2000, disk=10000)
    tiny = SimulatedMarket("t.nano", "a", 1, Resources(cpus=0.5, mem=500))
    assert default_task([tiny]) == Resources(cpus=0.5, mem=500)


def test_spot_markets_follow_the_series_on_demand_ones_their_price():
    data = {
        MetricType.METADATA: {
            "spot_prices|aws_availability_zone=z1,aws_instance_type=m5.large": [(100, 0.03), (200, 0.05)]
        }
    }
    book = PriceBook(spot_series(data))
    spot = SimulatedMarket("m5.large", "z1", spot=True, price=0.096)
    assert [book.price(spot, t) for t in (0, 100, 150, 200, 10**9)] == [0.03, 0.03, 0.03, 0.05, 0.05]
    assert book.price(SimulatedMarket("m5.large", "z1", price=0.096), 150) == 0.096
    assert book.price(SimulatedMarket("m5.large", "z2", spot=True, price=0.096), 150) == 0.096  # no series
    assert book.priced_by_series([spot]) == [("m5.large", "z1")]


def test_the_oracle_launches_a_join_delay_ahead():
    assert max_ahead([1, 1, 3, 1, 1, 2], 2) == [3, 3, 3, 2, 2, 2]
    assert max_ahead([1, 2], 0) == [1, 2]
    market = SimulatedMarket("x", "z", 1, Resources(cpus=2), price=0.6)
    times = [60.0 * k for k in range(10)]
    cpus = [2.0] * 5 + [6.0] * 5  # 1 instance, then 3 from minute 5
    demand = [cpus, [0.0] * 10, [0.0] * 10, [0.0] * 10]
    # with a 2-minute join delay the oracle pays 3 instances from minute 3: 3 x 1 + 7 x 3 = 24 instance-minutes
    assert oracle_cost(times, demand, [market], PriceBook({}), 120, 60) == pytest.approx(24 * 0.6 / 60)
    assert oracle_cost(times, demand, [market], PriceBook({}), 0, 60) == pytest.approx(20 * 0.6 / 60)
    cheap = SimulatedMarket("y", "z", 1, Resources(cpus=8), price=0.9)  # one holds everything: cheaper at 3
    assert oracle_cost(times, demand, [market, cheap], PriceBook({}), 0, 60) == pytest.approx((5 * 0.6 + 5 * 0.9) / 60)


def test_files_join_and_overlaps_are_refused(tmp_path):
    key = "cpus_allocated|cluster=c1,pool=web.kubernetes"
    write_metrics_file(tmp_path / "a.json.gz", {SYS: {key: [(0, 1.0), (60, 2.0)]}})
    write_metrics_file(tmp_path / "b.json.gz", {SYS: {key: [(120, 3.0)]}})
    write_metrics_file(tmp_path / "c.json.gz", {SYS: {key: [(60, 9.0)]}})
    joined = read_metrics([tmp_path / "b.json.gz", tmp_path / "a.json.gz"])
    assert joined[SYS][key] == [(0, 1.0), (60, 2.0), (120, 3.0)]
    with pytest.raises(SimulationInputError, match=r"given by both .*a\.json\.gz and .*c\.json\.gz for the same times"):
        read_metrics([tmp_path / "a.json.gz", tmp_path / "c.json.gz"])
    with pytest.raises(SimulationInputError, match=r"nope\.json\.gz: metrics file not found"):
        read_metrics([tmp_path / "nope.json.gz"])


def signal(name: str, parameters: dict | None = None) -> InProcessSignal:
    return InProcessSignal(SignalAddress("clusterman", name, "web"), "c1", "web", parameters)


def test_in_process_signals_answer_as_their_runner_would():
    constant = signal("ConstantSignal", {"cpus": 3, "mem": 1000})
    assert constant.evaluate({}, 1) == ResourceRequest(cpus=3, mem=1000, disk=NO_OPINION, gpus=NO_OPINION)
    with pytest.raises(SignalError, match=r"signal clusterman.ConstantSignal \(app web\): .*cpus=-1"):
        signal("ConstantSignal", {"cpus": -1}).evaluate({}, 1)
    with pytest.raises(SignalError, match="value\\(\\) raised ValueError"):
        signal("ConstantSignal", {"cpus": "many"}).evaluate({}, 1)
    with pytest.raises(SignalError, match=r"clusterman_signals\.clusterman has no signal named Nope"):
        signal("Nope").load()
    recent = signal("MostRecentResources", {"lookahead_minutes": 0})
    assert recent.evaluate({"cpus_allocated": [[0, 2.0], [60, 5.0]]}, 60).cpus == 5.0


def test_quiet_metrics_silence_every_update():
    updates = {
        name
        for name, member in inspect.getmembers(AutoscalerMetrics, inspect.isfunction)
        if not name.startswith("_") and name != "exposition"
    }
    assert updates == set(UPDATES)
    loud, quiet = AutoscalerMetrics("c1", "web"), QuietMetrics("c1", "web")
    for metrics in (loud, quiet):
        metrics.observe_tasks(running=5, pending=1)
    assert b'state="running"' in loud.exposition() and b'state="running"' not in quiet.exposition()


def test_the_quiet_recorder_records_nothing():
    records = {name for name, _ in inspect.getmembers(Recorder, inspect.isfunction) if not name.startswith("_")}
    assert records == set(RECORDS)
    quiet = QuietRecorder("c1", "web")
    quiet.decision(ChangeDetail.NODE_JOIN, 1.0, target=1, demand={}, capacity={}, utilisation={}, setpoint=0.7,
                   explanation="")  # fmt: skip
    quiet.node(NodeAction.JOIN, "n1", "g1")
    assert not quiet.publisher._pending and isinstance(quiet.metrics, QuietMetrics)
    with pytest.raises(ValueError, match="DECISION_"):  # the loud one builds the event, and checks it
        Recorder(quiet.publisher, quiet.metrics, "web").decision(
            ChangeDetail.NODE_JOIN, 1.0, target=1, demand={}, capacity={}, utilisation={}, setpoint=0.7, explanation=""
        )


def test_the_progress_bar_redraws_in_place_and_ends_the_line():
    now = [0.0]
    out = io.StringIO()
    bar = ProgressBar(out, "simulating", clock=lambda: now[0])
    bar(1, 4)
    now[0] = 0.1
    bar(2, 4)  # too soon: not drawn
    now[0] = 1.0
    bar(4, 4)
    lines = out.getvalue().split("\r")[1:]
    assert len(lines) == 2 and lines[0].startswith("simulating [") and "1/4 min" in lines[0]
    assert lines[1].endswith("\n") and "100%" in lines[1]
