"""``clusterman generate-data`` and ``clusterman metrics``, end to end on SQLite files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterman.cli.main import main
from clusterman.core.config import MetricType
from clusterman.datastore.datafile import read_metrics_file
from clusterman.datastore.sqlite import SqliteStore

REPO = Path(__file__).resolve().parents[1]
DESIGN = REPO / "config" / "metrics-designs" / "diurnal-service.yaml"
CPUS = "cpus_allocated|cluster=local-dev,pool=default.simulated"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_generate_load_and_read_back(tmp_path, capsys):
    data_file, db = tmp_path / "metrics.json.gz", tmp_path / "metrics.sqlite3"
    status, out, _ = run(capsys, "generate-data", "--design", str(DESIGN), "--output", str(data_file))
    assert status == 0 and "wrote 20160 points in 7 series" in out
    status, out, _ = run(capsys, "metrics", "load", "--sqlite", str(db), "--input", str(data_file))
    assert status == 0 and "loaded 20160 points of 7 keys" in out

    expected = read_metrics_file(data_file)[MetricType.SYSTEM_METRICS][CPUS]
    end = expected[100][0]
    status, out, _ = run(
        capsys, "metrics", "read", "--sqlite", str(db), "--type", "system_metrics", "--key", CPUS,
        "--minutes", "10", "--end", str(end), "--json",
    )  # fmt: skip
    assert status == 0
    body = json.loads(out)
    assert body["points"] == [[ts, v] for ts, v in expected[90:101]]
    assert body["start"] == end - 600

    status, out, _ = run(capsys, "metrics", "read", "--sqlite", str(db), "--type", "system_metrics", "--key", CPUS,
                         "--minutes", "1", "--end", str(end))  # fmt: skip
    assert out.splitlines()[-1] == f"2024-03-04T01:40:00Z  {end}  {expected[100][1]:g}"

    status, out, _ = run(capsys, "metrics", "keys", "--sqlite", str(db), "--type", "metadata")
    assert out.split() == ["fulfilled_capacity|cluster=local-dev,pool=default.simulated"]


def test_reading_a_key_with_no_data_prints_an_empty_window(tmp_path, capsys):
    db = tmp_path / "metrics.sqlite3"
    assert run(capsys, "metrics", "init", "--sqlite", str(db))[0] == 0
    status, out, err = run(capsys, "metrics", "read", "--sqlite", str(db), "--type", "app_metrics", "--key", "a,b")
    assert status == 0 and out == "" and "no points for a,b between" in err
    status, out, _ = run(
        capsys, "metrics", "read", "--sqlite", str(db), "--type", "app_metrics", "--key", "a,b", "--json"
    )
    assert json.loads(out)["points"] == []


def test_write_takes_numbers_and_mappings_and_refuses_the_rest(tmp_path, capsys):
    db = tmp_path / "metrics.sqlite3"
    fc = "fc|cluster=c,pool=p.simulated"
    base = ["metrics", "write", "--sqlite", str(db), "--type", "metadata", "--key", fc, "--timestamp"]
    assert run(capsys, *base, "100", "--value", "3.5")[0] == 0
    assert run(capsys, *base, "160", "--value", '{"<m5.large, us-west-2a>": 2}')[0] == 0
    status, _, err = run(capsys, *base, "220", "--value", "lots")
    assert status == 1 and err.strip() == f"clusterman metrics write: {fc}: metric value must be a number, got 'lots'"
    status, _, err = run(capsys, *base, "220", "--value", '{"a": "x"}')
    assert status == 1 and f"{fc}[a]: metric value must be a number, got 'x'" in err
    store = SqliteStore(db)
    assert store.read(MetricType.METADATA, fc, 0, 1000) == [(100, 3.5), (160, {"<m5.large, us-west-2a>": 2.0})]


@pytest.mark.parametrize(
    ("metric_type", "key", "timestamp", "message"),
    [
        ("app_metrics", "", "5", "--key: the app_metrics key is empty"),
        ("system_metrics", "  ", "5", "--key: the system_metrics key is empty"),
        ("system_metrics", "cpus_allocated", "5", "--key 'cpus_allocated': system_metrics keys carry dimensions, "
         "e.g. 'cpus_allocated|cluster=<cluster>,pool=<pool>.<scheduler>' (signals read them by those)"),
        ("metadata", "target_capacity|", "5", "--key 'target_capacity|': metadata keys carry dimensions"),
        ("app_metrics", "queue_depth", "5", "--key 'queue_depth': app metrics are keyed <app>,<name>"),
        ("app_metrics", "a,b", "-1", "--timestamp: must be Unix seconds or an ISO 8601 time"),
    ],
)  # fmt: skip
def test_write_refuses_keys_nobody_reads_and_negative_times(tmp_path, capsys, metric_type, key, timestamp, message):
    db = tmp_path / "metrics.sqlite3"
    argv = ["metrics", "write", "--sqlite", str(db), "--type", metric_type, "--key", key, "--timestamp", timestamp]
    status, _, err = run(capsys, *argv, "--value", "1")
    assert status == 1 and message in err and len(err.splitlines()) == 1, err
    assert not db.exists(), "nothing was written"


def test_missing_database_and_file_are_one_line_each(tmp_path, capsys):
    status, _, err = run(capsys, "metrics", "read", "--sqlite", str(tmp_path / "none.sqlite3"), "--type",
                         "system_metrics", "--key", CPUS)  # fmt: skip
    assert status == 1 and len(err.splitlines()) == 1 and "no metrics database here" in err
    status, _, err = run(capsys, "metrics", "load", "--sqlite", str(tmp_path / "m.sqlite3"), "--input",
                         str(tmp_path / "absent.json.gz"))  # fmt: skip
    assert status == 1 and "absent.json.gz: metrics file not found" in err
    status, _, err = run(capsys, "generate-data", "--design", str(tmp_path / "absent.yaml"), "--output", "x")
    assert status == 1 and "absent.yaml: file not found" in err


def test_the_configured_store_lives_under_the_state_directory(tmp_path, capsys):
    config = tmp_path / "clusterman.yaml"
    config.write_text("state_directory: state\nmetrics:\n  backend: sqlite\n  sqlite_path: m/metrics.sqlite3\n")
    common = ["--env-config-path", str(config), "metrics"]
    assert (
        run(capsys, *common, "write", "--type", "app_metrics", "--key", "a,b", "--value", "1", "--timestamp", "5")[0]
        == 0
    )
    assert (tmp_path / "state" / "m" / "metrics.sqlite3").exists()
    _, out, _ = run(capsys, *common, "read", "--type", "app_metrics", "--key", "a,b", "--end", "5", "--json")
    assert json.loads(out)["points"] == [[5, 1.0]]


def test_prometheus_backend_needs_a_pool(tmp_path, capsys):
    config = tmp_path / "clusterman.yaml"
    config.write_text("metrics: {backend: prometheus}\n")
    status, _, err = run(capsys, "--env-config-path", str(config), "metrics", "keys", "--type", "system_metrics")
    assert status == 1 and "prometheus metrics backend reads a pool's prometheus_queries" in err


@pytest.mark.parametrize("design", sorted((REPO / "config" / "metrics-designs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_designs_generate(design, tmp_path, capsys):
    assert run(capsys, "generate-data", "--design", str(design), "--output", str(tmp_path / "out.json.gz"))[0] == 0
