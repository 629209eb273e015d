"""The spot price collector's passes (what each writes, in Clusterman's keys), and the simulator
billing spot markets at the prices it kept. The process against EC2 on moto's server:
itests/test_spot_price_collector_process.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterman.aws.spot_prices import SpotPrice
from clusterman.batch.spot_price_collector import REFRESH_SECONDS
from clusterman.batch.spot_price_collector import PriceRecorder
from clusterman.batch.spot_price_collector import collect_once
from clusterman.config.loader import load_main_config
from clusterman.core.config import MetricType
from clusterman.datastore.datafile import write_metrics_file
from clusterman.datastore.sqlite import SqliteStore
from clusterman.datastore.store import InMemoryStore
from clusterman.datastore.store import MetricsError
from clusterman.datastore.store import Point
from clusterman.simulator.inputs import Request
from clusterman.simulator.inputs import load_scenario
from clusterman.simulator.report import summary
from clusterman.simulator.simulation import simulate

REPO = Path(__file__).resolve().parents[1]
T0 = 1_700_000_000 - 1_700_000_000 % 3600
KEY = "spot_prices|aws_availability_zone=us-west-2a,aws_instance_type=m5.large"  # Clusterman's
META = MetricType.METADATA


def price(at: float, dollars: float, instance_type: str = "m5.large") -> SpotPrice:
    return SpotPrice(instance_type, "us-west-2a", dollars, at)


def written(store: InMemoryStore, key: str = KEY) -> list[tuple[int, float]]:
    return [(t, float(v)) for t, v in store.read(META, key, 0, 2**40)]  # type: ignore[arg-type]


def test_a_pass_writes_the_latest_price_of_each_interval_at_its_end_as_clusterman_did():
    recorder = PriceRecorder(dedupe_seconds=60, since=T0)
    prices = [price(T0 + 10, 0.10), price(T0 + 50, 0.12), price(T0 + 60, 0.13), price(T0 + 61, 0.14)]
    points, markets = recorder.points(prices, now=T0 + 300)
    assert [(p.key, p.timestamp, p.value) for p in points] == [
        (KEY, T0 + 60, 0.13),  # 0.10 and 0.12 fall in (T0, T0+60] too; the latest of them is kept
        (KEY, T0 + 120, 0.14),
    ]
    assert markets == {("m5.large", "us-west-2a")}


def test_no_point_is_stamped_after_now():
    recorder = PriceRecorder(dedupe_seconds=3600, since=T0)
    points, _ = recorder.points([price(T0 + 30, 0.1)], now=T0 + 45.5)
    assert [p.timestamp for p in points] == [T0 + 45]


def test_the_price_in_effect_is_written_at_the_start_then_once_a_day():
    store = InMemoryStore()
    recorder = PriceRecorder(dedupe_seconds=60, since=T0)
    in_effect = price(T0 - 86400 * 30, 0.09)  # EC2 stamps it with when it took effect
    assert collect_once(lambda start, end: [in_effect], store, recorder, T0 + 60) == 1
    assert written(store) == [(T0, 0.09)]
    assert collect_once(lambda start, end: [in_effect], store, recorder, T0 + 120) == 0  # known: not again
    day_later = T0 + 60 + REFRESH_SECONDS
    collect_once(lambda start, end: [in_effect], store, recorder, day_later)  # the pass that passes a day
    assert collect_once(lambda start, end: [in_effect], store, recorder, day_later + 60) == 1
    assert written(store)[-1] == (day_later, 0.09)


def test_a_failed_pass_is_covered_by_the_next():
    asked: list[tuple[float, float]] = []

    def fetch(start: float, end: float) -> list[SpotPrice]:
        asked.append((start, end))
        return [price(T0 + 30, 0.2)] if start <= T0 + 30 <= end else []

    class Down(InMemoryStore):
        def write(self, points):
            raise MetricsError("the store is down")

    recorder = PriceRecorder(dedupe_seconds=60, since=T0)
    with pytest.raises(MetricsError):
        collect_once(fetch, Down(), recorder, T0 + 60)
    store = InMemoryStore()
    assert collect_once(fetch, store, recorder, T0 + 120) == 1
    assert asked == [(T0, T0 + 60), (T0, T0 + 120)]  # the second pass reads from where the first began
    assert written(store) == [(T0 + 60, 0.2)]


SFR_POOL = """
resource_groups:
  - sfr: {tag: fleet}
scaling_limits: {min_capacity: 2, max_capacity: 2, max_weight_to_add: 1, max_weight_to_remove: 1}
simulation:
  markets:
    - {instance_type: x1.custom, availability_zone: us-west-2a, resources: {cpus: 2, mem: 2000}, price: 0.6}
  join_delay_seconds: 0
  demand_task: {cpus: 1}
"""
STORED = "spot_prices|aws_availability_zone=us-west-2a,aws_instance_type=x1.custom"


def simulate_with_store(tmp_path: Path, stored: list[Point] | None, in_file: bool = False) -> dict:
    """Two instances of a Spot Fleet for an hour; the metrics store at tmp_path/metrics.sqlite3."""
    tmp_path.mkdir(exist_ok=True)
    sqlite = tmp_path / "metrics.sqlite3"
    config = tmp_path / "clusterman.yaml"
    config.write_text((REPO / "config" / "clusterman.yaml").read_text() + f"metrics: {{sqlite_path: {sqlite}}}\n")
    if stored is not None:
        store = SqliteStore(sqlite)
        store.write(stored)
        store.close()
    series = {
        MetricType.SYSTEM_METRICS: {
            "cpus_allocated|cluster=c1,pool=web.kubernetes": [(T0 + 60 * i, 3.0) for i in range(60)]
        }
    }
    if in_file:
        series[META] = {STORED: [(T0, 4.0)]}
    write_metrics_file(tmp_path / "m.json.gz", series)
    (tmp_path / "web.kubernetes").write_text(SFR_POOL)
    scenario = load_scenario(load_main_config(config), Request(tmp_path / "web.kubernetes", [tmp_path / "m.json.gz"]))
    s = summary(simulate(scenario), "pool", ["m"])
    s["notes"] = scenario.notes
    return s


def test_the_simulator_bills_spot_markets_at_the_prices_the_collector_kept(tmp_path):
    # the price in effect from before the run ($1), then $2 from half way
    stored = [Point(META, STORED, T0 - 3600, 1.0), Point(META, STORED, T0 + 1800, 2.0)]
    s = simulate_with_store(tmp_path, stored)
    assert s["cost"]["total_dollars"] == pytest.approx(2 * (0.5 * 1.0 + 0.5 * 2.0))
    assert s["inputs"]["spot_priced_markets"] == ["x1.custom, us-west-2a"]
    assert any("spot prices of 1 of 1 spot markets read from SqliteStore" in n for n in s["notes"])


def test_the_files_prices_win_and_no_store_means_on_demand(tmp_path):
    stored = [Point(META, STORED, T0, 1.0)]
    assert simulate_with_store(tmp_path / "a", stored, in_file=True)["cost"]["total_dollars"] == pytest.approx(8.0)
    none = simulate_with_store(tmp_path / "b", None)
    assert none["cost"]["total_dollars"] == pytest.approx(1.2) and none["notes"] == ()


def test_a_store_that_cannot_be_read_is_one_note_and_the_run_goes_on(tmp_path):
    (tmp_path / "metrics.sqlite3").write_bytes(b"not a database" * 100)
    s = simulate_with_store(tmp_path, None)
    assert s["cost"]["total_dollars"] == pytest.approx(1.2)  # on demand
    [note] = s["notes"]
    assert note.startswith("spot prices not read from the metrics store (") and "billed on demand" in note
