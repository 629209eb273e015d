"""``clusterman simulate``: determinism, the real decision, costs by hand, bad inputs, the sample file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterman.cli.main import main
from clusterman.config.loader import load_main_config
from clusterman.core.config import MetricType
from clusterman.datastore.datafile import write_metrics_file
from clusterman.decision.autoscaler_state import AutoscalerState
from clusterman.decision.decide import decide
from clusterman.run.report import Outcome
from clusterman.simulator.inputs import Request
from clusterman.simulator.inputs import load_scenario
from clusterman.simulator.simulation import simulate

REPO = Path(__file__).resolve().parents[1]
MAIN = REPO / "config" / "clusterman.yaml"
SAMPLE = REPO / "config" / "simulator" / "clusterman-sample-metrics.json.gz"  # Clusterman's own sample file
T0 = 1_700_000_000 - 1_700_000_000 % 3600
SYS, META = MetricType.SYSTEM_METRICS, MetricType.METADATA


def key(name: str, pool: str = "web.kubernetes") -> str:
    return f"{name}|cluster=c1,pool={pool}"


def cpus_series(values: list[float]) -> list[tuple[int, float]]:
    return [(T0 + 60 * i, float(v)) for i, v in enumerate(values)]


POOL = """
resource_groups:
  - simulated: {tag: web-a}
scaling_limits: {min_capacity: 2, max_capacity: 30, max_weight_to_add: 10, max_weight_to_remove: 10}
simulation:
  instance_type: m5.large
  join_delay_seconds: 120
  join_delay_stdev_seconds: 40
"""


@pytest.fixture
def files(tmp_path):
    """A three-hour trace that ramps up, spikes and falls back, for the pool web.kubernetes on c1."""
    values = [4 + min(i, 60) * 0.2 for i in range(120)] + [30.0] * 20 + [6.0] * 40
    data = tmp_path / "web.json.gz"
    write_metrics_file(data, {SYS: {key("cpus_allocated"): cpus_series(values)}})
    pool = tmp_path / "web.kubernetes"
    pool.write_text(POOL)
    return data, pool


def simulate_cli(capsys, data: Path, pool: Path, prefix: Path, *extra: str) -> tuple[int, str, str]:
    argv = ["--env-config-path", str(MAIN), "simulate", "--metrics-data-files", str(data), "--pool-config",
            str(pool), "--output-prefix", str(prefix), *extra]  # fmt: skip
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def test_same_inputs_and_seed_give_the_same_bytes_and_a_plot(files, tmp_path, capsys):
    data, pool = files
    assert simulate_cli(capsys, data, pool, tmp_path / "a")[0] == 0
    assert simulate_cli(capsys, data, pool, tmp_path / "b")[0] == 0
    first = (tmp_path / "a.json").read_bytes()
    assert first == (tmp_path / "b.json").read_bytes()
    assert simulate_cli(capsys, data, pool, tmp_path / "c", "--seed", "7")[0] == 0
    assert (tmp_path / "c.json").read_bytes() != first  # the seed draws the join delays
    assert (tmp_path / "a.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    summary = json.loads(first)
    assert summary["inputs"]["minutes"] == 180 and summary["scaling"]["runs"] == 180
    assert summary["scaling"]["scale_ups"] > 0 and summary["scaling"]["scale_downs"] > 0


def test_without_the_simulator_extra_the_summary_is_printed_and_the_plot_said_missing(
    files, tmp_path, capsys, monkeypatch
):
    data, pool = files
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)  # as in the image built without the extra
    status, out, err = simulate_cli(capsys, data, pool, tmp_path / "a")
    assert status == 0 and err == "", err  # it ended with one line and status 1, the summary unprinted
    assert out.startswith("simulated ") and "\ndecided by " in out
    assert f"wrote {tmp_path / 'a.json'} (no {tmp_path / 'a.png'}: matplotlib is not installed (pip install " in out
    assert (tmp_path / "a.json").exists() and not (tmp_path / "a.png").exists()


def test_another_process_with_another_hash_seed_writes_the_same_bytes(files, tmp_path, capsys):
    data, pool = files
    assert simulate_cli(capsys, data, pool, tmp_path / "here")[0] == 0
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    command = [sys.executable, "-m", "clusterman.cli.main", "--env-config-path", str(MAIN), "simulate",
               "--metrics-data-files", str(data), "--pool-config", str(pool), "--output-prefix",
               str(tmp_path / "there")]  # fmt: skip
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=120)
    assert (tmp_path / "there.json").read_bytes() == (tmp_path / "here.json").read_bytes()


def test_every_decision_is_what_decide_says_on_the_same_snapshot(files):
    data, pool = files
    scenario = load_scenario(load_main_config(MAIN), Request(pool, [data]))
    reports = []
    simulate(scenario, on_run=reports.append)
    policy, state = scenario.setup.policy, AutoscalerState()
    acted = [r for r in reports if r.outcome is Outcome.ACTED]
    assert len(acted) == 180
    for report in acted:
        assert report.snapshot is not None and report.requests is not None and report.decision is not None
        again = decide(report.snapshot, report.requests.by_app, policy, state, report.now)
        assert again == report.decision
        state = report.decision.state
    assert {r.decision.action.value for r in acted if r.decision} >= {"scale_up", "scale_down"}


CONSOLIDATING = """
resource_groups:
  - simulated: {tag: web-a}
scaling_limits: {min_capacity: 2, max_capacity: 30, max_weight_to_add: 10, max_weight_to_remove: 10}
draining_enabled: true
autoscaling:
  setpoint: 0.95
  slot_reserve: 2
  slot_reserve_band: 1
  consolidation: {enabled: true, consolidate_after: 0, evictions_per_hour: 1000, surplus: 0}
simulation:
  instance_type: m5.2xlarge
  join_delay_seconds: 120
  departures: random
  task_lifetime_minutes: 60
  demand_mix: [{weight: 4, cpus: 0.5}, {weight: 2, cpus: 1}, {weight: 1, cpus: 2}, {weight: 1, cpus: 4}]
"""


def test_a_fragmented_pool_consolidates_and_the_restarts_are_counted(tmp_path):
    """Demand falls and pods leave at random: consolidation drains nodes, and each evicted pod runs
    again (the simulated scheduler places it with its rule) or waits pending, counted as unmet."""
    values = [120.0] * 60 + [80.0] * 120
    write_metrics_file(tmp_path / "m.json.gz", {SYS: {key("cpus_allocated"): cpus_series(values)}})
    (tmp_path / "web.kubernetes").write_text(CONSOLIDATING)
    scenario = load_scenario(load_main_config(MAIN), Request(tmp_path / "web.kubernetes", [tmp_path / "m.json.gz"]))
    evicted: set[str] = set()
    last: set[str] = set()
    waited: list[str] = []

    def follow(report):
        if report.snapshot is not None:  # the pods evicted in the run before were placed again
            waited.extend(sorted(last & {t.id for t in report.snapshot.pending}))
            last.clear()
        if report.decision is not None:
            last.update(pod for c in report.decision.consolidation.chosen for pod, _ in c.moves)
            evicted.update(last)

    from clusterman.simulator.report import summary

    s = summary(simulate(scenario, on_run=follow), "pool", ["m"])
    assert s["scaling"]["nodes_consolidated"] > 0 and s["scaling"]["evictions"] >= len(evicted) > 0
    assert waited == []
    (tmp_path / "web.kubernetes").write_text(CONSOLIDATING.replace("{enabled: true", "{enabled: false"))
    scenario = load_scenario(load_main_config(MAIN), Request(tmp_path / "web.kubernetes", [tmp_path / "m.json.gz"]))
    without = summary(simulate(scenario), "pool", ["m"])
    assert without["scaling"]["evictions"] < s["scaling"]["evictions"]
    assert s["unmet_demand"]["cpu_minutes"] <= without["unmet_demand"]["cpu_minutes"]
    assert s["cost"]["total_dollars"] < without["cost"]["total_dollars"]


# --- costs, checked by hand ---

FIXED = """
resource_groups:
  - {kind}: {{tag: fixed}}
scaling_limits: {{min_capacity: 2, max_capacity: 2, max_weight_to_add: 1, max_weight_to_remove: 1}}
simulation:
  markets:
    - {{instance_type: x1.custom, availability_zone: us-west-2a, resources: {{cpus: 2, mem: 2000}}, price: 0.6}}
  join_delay_seconds: 0
  demand_task: {{cpus: 1}}
"""


def fixed_pool(tmp_path, demand: float, kind: str = "simulated", prices=None) -> dict:
    """Two 2-CPU instances at $0.60 an hour for an hour, under a constant demand."""
    series = {SYS: {key("cpus_allocated"): cpus_series([demand] * 60)}}
    if prices is not None:
        series[META] = {"spot_prices|aws_availability_zone=us-west-2a,aws_instance_type=x1.custom": prices}
    write_metrics_file(tmp_path / "m.json.gz", series)
    (tmp_path / "web.kubernetes").write_text(FIXED.format(kind=kind))
    scenario = load_scenario(load_main_config(MAIN), Request(tmp_path / "web.kubernetes", [tmp_path / "m.json.gz"]))
    result = simulate(scenario)
    from clusterman.simulator.report import summary

    return summary(result, "pool", ["m"])


def test_costs_of_a_fixed_pool_by_hand(tmp_path):
    s = fixed_pool(tmp_path, demand=3)
    assert s["cost"]["total_dollars"] == pytest.approx(1.2)  # 2 instances x $0.60 x 1 hour
    assert s["cost"]["per_cpu_hour"] == pytest.approx(0.3)  # $1.20 / 4 CPU-hours paid for
    assert s["cost"]["per_allocated_cpu_hour"] == pytest.approx(0.4)  # $1.20 / 3 CPU-hours used
    assert s["cost"]["unused_capacity_dollars"] == pytest.approx(0.3)  # a quarter of the CPUs idle
    assert s["cost"]["oracle_dollars"] == pytest.approx(1.2)  # 3 CPUs need 2 instances too
    assert s["unmet_demand"] == {"cpu_minutes": 0.0, "minutes_with_shortfall": 0.0, "share_of_demand": 0.0}
    assert s["capacity"]["instance_hours"] == pytest.approx(2.0)


def test_shortfall_by_hand(tmp_path):
    s = fixed_pool(tmp_path, demand=5)  # 5 one-CPU tasks, room for 4
    assert s["unmet_demand"]["cpu_minutes"] == pytest.approx(60.0)
    assert s["unmet_demand"]["minutes_with_shortfall"] == 60.0
    assert s["unmet_demand"]["share_of_demand"] == pytest.approx(0.2)
    assert s["cost"]["oracle_dollars"] == pytest.approx(1.8)  # 5 CPUs need 3 instances
    assert s["cost"]["unused_capacity_dollars"] == 0.0


def test_spot_fleets_pay_the_spot_price_series(tmp_path):
    prices = [(T0, 1.0), (T0 + 1800, 2.0)]  # $1 an hour for 30 minutes, then $2
    s = fixed_pool(tmp_path, demand=3, kind="sfr", prices=prices)
    assert s["cost"]["total_dollars"] == pytest.approx(2 * (0.5 * 1.0 + 0.5 * 2.0))
    assert s["inputs"]["spot_priced_markets"] == ["x1.custom, us-west-2a"]
    assert fixed_pool(tmp_path, demand=3, prices=prices)["cost"]["total_dollars"] == pytest.approx(1.2)  # on demand


# --- the sample file, the other signal modes ---


def test_clusterman_sample_file_simulates(tmp_path, capsys):
    pool = REPO / "config" / "simulator" / "default.mesos"
    status, out, _ = simulate_cli(capsys, SAMPLE, pool, tmp_path / "sample")
    assert status == 0, out
    s = json.loads((tmp_path / "sample.json").read_text())
    assert s["inputs"]["pool"] == "local-dev/default.mesos" and s["inputs"]["minutes"] == 60
    assert s["inputs"]["spot_priced_markets"] == [f"m3.large, us-west-2{z}" for z in "abc"]
    assert s["scaling"]["outcomes"] == {"acted": 60} and s["cost"]["total_dollars"] > 0
    assert "simulated local-dev/default.mesos" in out and (tmp_path / "sample.png").exists()


def test_signals_in_runner_processes_give_the_same_run(files, tmp_path, capsys):
    data, pool = files
    end = str(T0 + 30 * 60)
    assert simulate_cli(capsys, data, pool, tmp_path / "inproc", "--end", end)[0] == 0
    status, _, err = simulate_cli(capsys, data, pool, tmp_path / "proc", "--end", end, "--signals", "process")
    assert status == 0, err
    inproc, proc = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("inproc", "proc"))
    assert proc["inputs"].pop("signals") == "process" and inproc["inputs"].pop("signals") == "in-process"
    assert proc == inproc


def test_internal_pools_scale_on_their_own_tasks(files, tmp_path, capsys):
    data, pool = files
    pool.write_text(POOL + "autoscale_signal: {internal: true, period_minutes: 2}\n")
    assert simulate_cli(capsys, data, pool, tmp_path / "internal")[0] == 0
    s = json.loads((tmp_path / "internal.json").read_text())
    assert s["inputs"]["signals"] == "internal" and s["scaling"]["runs"] == 90
    assert s["scaling"]["scale_ups"] > 0


def test_compare_prints_both_runs(files, tmp_path, capsys):
    data, pool = files
    simulate_cli(capsys, data, pool, tmp_path / "before")
    status, out, _ = simulate_cli(capsys, data, pool, tmp_path / "after", "--seed", "3", "--compare",
                                  str(tmp_path / "before.json"))  # fmt: skip
    assert status == 0
    table = out[out.index("this run") :].splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in table[1:]}
    assert rows["inputs.seed"] == ["3", "0", "+3"]
    assert rows["inputs.pool"] == ["c1/web.kubernetes", "c1/web.kubernetes", "="]
    assert "cost.total_dollars" in rows and "scaling.decisions_by_reason.utilisation" in rows


# --- bad input: one line naming the problem ---


def bad(tmp_path, capsys, *, pool: str = POOL, data: object = None, extra: tuple[str, ...] = ()) -> str:
    data_file = tmp_path / "m.json.gz"
    if isinstance(data, bytes):
        data_file.write_bytes(data)
    else:
        write_metrics_file(data_file, data or {SYS: {key("cpus_allocated"): cpus_series([1.0] * 10)}})
    (tmp_path / "web.kubernetes").write_text(pool)
    status, out, err = simulate_cli(capsys, data_file, tmp_path / "web.kubernetes", tmp_path / "out", *extra)
    assert status == 1 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_a_malformed_file_is_one_line(tmp_path, capsys):
    assert "m.json.gz: not a metrics file" in bad(tmp_path, capsys, data=b"\x1f\x8bnot gzip")


def test_time_running_backwards_is_refused(tmp_path, capsys):
    (tmp_path / "m.json").write_text(json.dumps({"system_metrics": {key("cpus_allocated"): [[T0 + 60, 1], [T0, 2]]}}))
    (tmp_path / "web.kubernetes").write_text(POOL)
    status, _, err = simulate_cli(capsys, tmp_path / "m.json", tmp_path / "web.kubernetes", tmp_path / "out")
    assert status == 1 and "[1]: timestamp" in err and "is not after the previous point" in err


def test_an_unknown_instance_type_is_refused(tmp_path, capsys):
    err = bad(tmp_path, capsys, pool=POOL.replace("m5.large", "m5.humongous"))
    assert "simulation.instance_type: unknown instance type 'm5.humongous'" in err


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (("scaling_limits", "scaling_limit"), "scaling_limit: unknown key"),
        (("join_delay_seconds: 120", "join_delay_seconds: -1"), "join_delay_seconds: must be at least 0"),
        (("simulation:", "autoscaling: {setpoint: 1.5}\nsimulation:"), "setpoint: must be a fraction in (0, 1]"),
    ],
)
def test_a_config_the_autoscaler_would_reject_is_refused(tmp_path, capsys, change, problem):
    assert problem in bad(tmp_path, capsys, pool=POOL.replace(*change))


def test_a_signal_that_cannot_load_is_refused_before_the_run(tmp_path, capsys):
    pool = POOL + "autoscale_signal: {name: Nope, branch_or_tag: v1, period_minutes: 1}\n"
    err = bad(tmp_path, capsys, pool=pool)
    assert "signal web.Nope (app web): no namespace clusterman_signals.web (namespaces here: clusterman)" in err


def test_no_demand_for_the_pool_names_what_the_files_hold(tmp_path, capsys):
    data = {SYS: {key("cpus_allocated", pool="db.kubernetes"): cpus_series([1.0] * 10)}}
    err = bad(tmp_path, capsys, data=data, extra=("--cluster", "c1"))
    assert "no demand for c1/web.kubernetes" in err and "c1/db.kubernetes" in err


def test_an_empty_time_range_a_bad_compare_file_and_an_unwritable_output_are_refused(tmp_path, capsys):
    assert "the run must end after it starts" in bad(tmp_path, capsys, extra=("--end", str(T0)))
    (tmp_path / "taken").write_text("a file, not a directory")
    err = bad(tmp_path, capsys, extra=("--output-prefix", str(tmp_path / "taken" / "run")))
    assert "--output-prefix" in err and "cannot write" in err
    (tmp_path / "old.json").write_text("{}")
    assert "not a simulation summary" in bad(tmp_path, capsys, extra=("--compare", str(tmp_path / "old.json")))


def test_generate_data_output_simulates(tmp_path, capsys):
    """The local-dev design (docs/metrics.md) through `generate-data`, then six hours of it simulated."""
    design = REPO / "config" / "metrics-designs" / "diurnal-service.yaml"
    data = tmp_path / "diurnal.json.gz"
    assert main(["generate-data", "--design", str(design), "--output", str(data)]) == 0
    pool = tmp_path / "default.simulated"
    pool.write_text(POOL.replace("web-a", "default-a"))
    capsys.readouterr()
    status, _, err = simulate_cli(capsys, data, pool, tmp_path / "diurnal", "--end", "2024-03-04T06:00:00Z")
    assert status == 0, err
    s = json.loads((tmp_path / "diurnal.json").read_text())
    assert s["inputs"]["pool"] == "local-dev/default.simulated" and s["inputs"]["minutes"] == 360
    assert s["capacity"]["demand_cpu_hours"] > 0 and s["scaling"]["outcomes"] == {"acted": 360}


def test_pods_of_several_sizes_leaving_at_random_simulate_and_are_reported(files, tmp_path, capsys):
    data, pool = files
    pool.write_text(
        POOL + "  departures: random\n  task_lifetime_minutes: 60\n"
        "  demand_mix: [{weight: 2, cpus: 0.5}, {weight: 1, cpus: 1.5}]\n"
    )
    assert simulate_cli(capsys, data, pool, tmp_path / "mix")[0] == 0
    summary = json.loads((tmp_path / "mix.json").read_bytes())
    assert summary["inputs"]["departures"] == "random" and summary["inputs"]["task_lifetime_minutes"] == 60
    assert summary["inputs"]["demand_mix"] == [{"weight": 2, "cpus": 0.5}, {"weight": 1, "cpus": 1.5}]
    assert summary["scaling"]["scale_ups"] > 0 and summary["capacity"]["instances_terminated"] > 0
    assert summary["inputs"]["placement"] == "first_fit"
    # the same run with Kubernetes' default scoring: tasks spread over the nodes, the run differs
    pool.write_text(pool.read_text() + "  placement: least_allocated\n")
    assert simulate_cli(capsys, data, pool, tmp_path / "spread")[0] == 0
    spread = json.loads((tmp_path / "spread.json").read_bytes())
    assert spread["inputs"]["placement"] == "least_allocated"
    assert (spread["cost"], spread["capacity"]) != (summary["cost"], summary["capacity"])


def test_a_new_launch_template_drifts_every_node_and_a_migration_replaces_each_once(files, tmp_path):
    """The simulated groups' template gets a new version at minute 30: every node launched before
    drifts, and ``trigger.drift`` replaces them, as many at a time as the disruption budget lets
    (10% of the pool: one), replacements first."""
    data, pool = files
    pool.write_text(
        POOL + "  new_template_at_minutes: [30]\n"
        "draining_enabled: true\n"
        "node_migration: {trigger: {drift: true}, strategy: {rate: 2, bootstrap_wait: 0}}\n"
    )
    scenario = load_scenario(load_main_config(MAIN), Request(pool, [data]))
    seen: list[tuple[float, set[str], str]] = []

    def on_run(report):
        nodes = report.snapshot.nodes if report.snapshot else ()
        seen.append((report.now, {n.template for n in nodes}, report.migration))

    simulate(scenario, on_run=on_run)
    before = next(templates for now, templates, _ in seen if now < T0 + 30 * 60)
    assert before == {"web-a:1"}
    migrating = [line for _, _, line in seen if line]
    assert migrating[0].startswith("migration drift: step 1: replacing 1 node(s), 0 done")
    ended = max(i for i, (_, _, line) in enumerate(seen) if line)
    assert seen[ended + 1][1] == {"web-a:2"} and all(not line for _, _, line in seen[ended + 1 :])
