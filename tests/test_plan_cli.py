"""``clusterman plan --snapshot FILE``: the document in, the decision out, and one-line errors."""

import copy
import json
import subprocess
import sys

import pytest

from clusterman.cli.main import main

SEED = {
    "now": 1700000000,
    "config": {
        "scaling_limits": {
            "min_capacity": 0,
            "max_capacity": 100,
            "max_weight_to_add": 100,
            "max_weight_to_remove": 100,
        },
        "autoscaling": {"scale_up_threshold_percent": 70},
    },
    "groups": [{"id": "g1", "target_capacity": 2, "min_capacity": 0, "max_capacity": 100}],
    "nodes": [
        {"id": f"n{i}", "group": "g1", "weight": 1, "state": "ready", "allocatable": {"cpus": 1, "mem": 4000},
         "launched_at": 1699990000}
        for i in (1, 2)
    ],
    "pods": [{"requests": {"cpus": 0.5, "mem": 100}, "node": node} for node in ["n1", "n1", "n2", "n2"] + [None] * 6],
}  # fmt: skip


def plan(tmp_path, doc, capsys):
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    status = main(["plan", "--snapshot", str(path)])
    out, err = capsys.readouterr()
    return status, (json.loads(out) if status == 0 else None), err


def test_seed_document_through_the_real_command(tmp_path):
    """The installed entry point, in its own process, as an operator runs it."""
    path = tmp_path / "seed.json"
    path.write_text(json.dumps(SEED))
    done = subprocess.run(
        [sys.executable, "-m", "clusterman.cli.main", "plan", "--snapshot", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["action"] == "scale_up"
    assert out["utilisation"] == {"cpus": 2.5, "mem": 0.125}
    assert out["most_constrained"] == "cpus"
    assert (out["current_capacity"], out["target_capacity"], out["delta"]) == (2, 8, 6)
    assert (out["untaint"], out["taint"], out["terminate"]) == ([], [], [])
    assert out["group_targets"] == {"g1": 8}
    assert out["explanation"] == "cpus 250% > setpoint 70%: ceil(2 × 250 / 70) = 8 → +6"


def test_demand_instead_of_pods_and_state_chaining(tmp_path, capsys):
    doc = {**SEED, "pods": [], "demand": {"cpus": 5, "mem": None}}
    doc["config"] = {
        **SEED["config"],
        "autoscaling": {"scale_up_threshold_percent": 70, "scale_up_cool_down_period": "2m"},
    }
    status, out, _ = plan(tmp_path, doc, capsys)
    assert status == 0 and out["target_capacity"] == 8 and "mem" not in out["utilisation"]
    assert out["state"]["scale_lock"] == {"until": 1700000120, "requested": 8}
    later = {**doc, "now": 1700000060, "state": out["state"], "groups": [{"id": "g1", "target_capacity": 8}]}
    status, out, _ = plan(tmp_path, later, capsys)
    assert status == 0 and out["action"] == "none" and "scale lock held" in out["explanation"]


def test_requests_per_app_are_summed(tmp_path, capsys):
    doc = {**SEED, "requests": {"web": {"cpus": 2}, "batch": {"cpus": 3, "mem": None}}}
    status, out, _ = plan(tmp_path, doc, capsys)
    assert status == 0 and out["demand"] == {"cpus": 5} and out["target_capacity"] == 8


def edit(path, value):
    """SEED with the value at ``path`` (a.b[0].c) replaced; value DELETE removes it."""
    doc = copy.deepcopy(SEED)
    *parents, last = path.replace("[", ".").replace("]", "").split(".")
    target = doc
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    if value is DELETE:
        del target[int(last) if last.isdigit() else last]
    else:
        target[int(last) if last.isdigit() else last] = value
    return doc


DELETE = object()


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (edit("nodes[0].allocatable", DELETE), "nodes[0].allocatable: required key is missing"),
        (edit("nodes[0].colour", "red"), "nodes[0].colour: unknown key"),
        (edit("nodes[1].allocatable.cpus", 0), "nodes[1].allocatable.cpus: must be greater than 0"),
        (edit("nodes[0].allocatable.mem", -5), "nodes[0].allocatable.mem: must be at least 0"),
        (edit("nodes[0].allocatable.cpu", 2), "nodes[0].allocatable.cpu: unknown key"),
        (edit("nodes[0].weight", 0), "nodes[0].weight: must be greater than 0"),
        (edit("nodes[0].state", "drained"), "nodes[0].state: expected one of ready, tainted"),
        (edit("nodes[0].group", "g9"), "nodes[0].group: unknown group 'g9'"),
        (edit("nodes[1].id", "n1"), "nodes[1].id: node id 'n1' appears twice"),
        (edit("pods[0].node", "n7"), "pods[0].node: unknown node 'n7'"),
        (edit("pods[0].requests.cpus", "lots"), "pods[0].requests.cpus: expected a number"),
        (edit("groups[0].target_capacity", DELETE), "groups[0].target_capacity: required key is missing"),
        (edit("groups", DELETE), "groups: required key is missing"),
        (edit("config.scaling_limits.min_capacity", DELETE), "config.scaling_limits.min_capacity: required key"),
        (edit("config.autoscaling.colour", 1), "config.autoscaling.colour: unknown key"),
        (edit("demand", {"cpus": -1}), "demand.cpus: must be at least 0"),
        (edit("state", {"breaker": {"failures": 1.5}}), "state.breaker.failures: expected a whole number"),
        (edit("nodes", {}), "nodes: expected a list, got an object"),
        ('{"now": NaN, "groups": []}', "now: expected a finite number, got nan"),
        ("{not json", "not valid JSON"),
    ],
)  # fmt: skip
def test_bad_documents_give_one_line_naming_the_field(tmp_path, capsys, doc, message):
    status, _, err = plan(tmp_path, doc, capsys)
    assert status == 1
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("clusterman plan: ") and "snapshot.json" in err
    assert message in err


@pytest.mark.parametrize(
    ("old", "field"),
    [
        ('"cpus": 1,', "nodes[0].allocatable.cpus"),
        ('"max_capacity": 100,', "config.scaling_limits.max_capacity"),
        ('"now": 1700000000,', "now"),
    ],
)
def test_a_number_too_long_for_python_is_named(tmp_path, capsys, old, field):
    """A 5,001-digit integer: Python refuses to convert it; say which field, not Python's message."""
    text = json.dumps(SEED)
    assert old in text
    huge = "9" * 5001
    key = old.split(":")[0]
    status, _, err = plan(tmp_path, text.replace(old, f"{key}: {huge},", 1), capsys)
    assert status == 1 and "Traceback" not in err and err.count("\n") == 1
    assert f"snapshot.json: {field}: a number of 5001 digits is too long (at most 4300 digits)" in err


def test_plan_and_pool_files_word_a_problem_alike(tmp_path, capsys):
    """One validator's wording for both readers (core/config_schema.py): the same bad value, the same words."""
    from clusterman.core.config import DrainingConfig
    from clusterman.core.config_schema import ConfigError
    from clusterman.core.config_schema import parse

    with pytest.raises(ConfigError) as yaml_err:
        parse(DrainingConfig, {"force_terminate": None}, "web.kubernetes", "draining")
    _, _, err = plan(tmp_path, edit("groups[0].stale", None), capsys)
    assert yaml_err.value.problem == "expected true or false, got null"
    assert err.endswith(f"groups[0].stale: {yaml_err.value.problem}\n")


def test_nan_allocatable_is_named(tmp_path, capsys):
    text = json.dumps(SEED).replace('"cpus": 1, "mem": 4000', '"cpus": NaN, "mem": 4000', 1)
    status, _, err = plan(tmp_path, text, capsys)
    assert status == 1 and "nodes[0].allocatable.cpus: expected a finite number, got nan" in err
