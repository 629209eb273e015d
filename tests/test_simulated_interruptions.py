"""Spot interruptions in the simulator (simulator/interruptions.py): with the warnings handled, the
interrupted nodes' pods leave before their instance goes and the replacement comes early; without,
the pods go with the node and wait pending; the same draws either way."""

from __future__ import annotations

from pathlib import Path

from clusterman.config.loader import load_main_config
from clusterman.core.config import MetricType
from clusterman.datastore.datafile import write_metrics_file
from clusterman.simulator.inputs import Request
from clusterman.simulator.inputs import load_scenario
from clusterman.simulator.simulation import simulate

REPO = Path(__file__).resolve().parents[1]
MAIN = REPO / "config" / "clusterman.yaml"
T0 = 1_700_000_000 - 1_700_000_000 % 3600

POOL = """
resource_groups:
  - simulated: {tag: web-a}
scaling_limits: {min_capacity: 2, max_capacity: 60, max_weight_to_add: 20, max_weight_to_remove: 20}
draining_enabled: true
autoscale_signal: {internal: true, period_minutes: 1}
simulation:
  instance_type: m5.large
  join_delay_seconds: 120
  interruptions_per_node_hour: %(rate)s
  interruption_handling: %(handling)s
  lost_pods_return_seconds: 120
"""


def run(tmp_path: Path, rate: float, handling: bool):
    points = [(T0 + 60 * i, 24.0) for i in range(8 * 60)]
    data = tmp_path / "m.json.gz"
    write_metrics_file(data, {MetricType.SYSTEM_METRICS: {"cpus_allocated|cluster=c1,pool=web.kubernetes": points}})
    pool = tmp_path / "web.kubernetes"
    pool.write_text(POOL % {"rate": rate, "handling": str(handling).lower()})
    return simulate(load_scenario(load_main_config(MAIN), Request(pool, [data])))


def test_handled_interruptions_lose_no_pod_and_leave_less_demand_unmet(tmp_path):
    handled, unhandled = run(tmp_path, 0.05, True), run(tmp_path, 0.05, False)
    calm = run(tmp_path, 0.0, True)
    assert calm.interruptions is None
    h, u = handled.interruptions, unhandled.interruptions
    assert h is not None and u is not None and h.warned >= 5
    assert (h.pods_lost, h.taken) == (0, 0) and h.pods_at_warning > 0  # drained and ended before the deadline
    assert u.taken == u.warned and u.pods_lost > 0  # the cloud took each node with its pods
    unmet = {k: r.totals.unmet_cpu_minutes for k, r in (("h", handled), ("u", unhandled), ("c", calm))}
    assert unmet["u"] - unmet["c"] > 5 * max(unmet["h"] - unmet["c"], 1.0), unmet
    assert handled.totals.cost <= unhandled.totals.cost * 1.01
