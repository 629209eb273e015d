"""Metrics files: ours (gzip'd plain JSON) and Clusterman's (jsonpickle) read the same."""

from __future__ import annotations

import gzip
import json

import pytest

from clusterman.core.config import MetricType
from clusterman.datastore.datafile import points_of
from clusterman.datastore.datafile import read_metrics_file
from clusterman.datastore.datafile import write_metrics_file
from clusterman.datastore.store import InMemoryStore

SYS, META = MetricType.SYSTEM_METRICS, MetricType.METADATA
CPUS = "cpus_allocated|cluster=local-dev,pool=default.mesos"
FC = "fulfilled_capacity|cluster=local-dev,pool=default.mesos"


def test_round_trip_is_exact_and_byte_stable(tmp_path):
    data = {SYS: {CPUS: [(60, 1.5), (120, 2.0)]}, META: {FC: [(60, {"<m3.large, us-west-2a>": 7.0})]}}
    write_metrics_file(tmp_path / "a.json.gz", data)
    write_metrics_file(tmp_path / "b.json.gz", data)
    assert read_metrics_file(tmp_path / "a.json.gz") == data
    assert (tmp_path / "a.json.gz").read_bytes() == (tmp_path / "b.json.gz").read_bytes()
    body = json.loads(gzip.decompress((tmp_path / "a.json.gz").read_bytes()))
    assert body == {
        "system_metrics": {CPUS: [[60, 1.5], [120, 2.0]]},
        "metadata": {FC: [[60, {"<m3.large, us-west-2a>": 7.0}]]},
    }


def arrow(ts, value):
    return {"py/tuple": [{"py/object": "arrow.arrow.Arrow", "timestamp": ts}, value]}


def test_reads_clusterman_simulator_files(tmp_path):
    """jsonpickle'd defaultdicts of (arrow.Arrow, value) tuples, as Clusterman's simulator writes them."""
    body = {
        "metadata": {
            "default_factory": {"py/type": "builtins.list"},
            "py/object": "collections.defaultdict",
            FC: [arrow(1512144060, {"<m3.large, us-west-2a>": 10}), arrow(1512144000, {"<m3.large, us-west-2b>": 2})],
        },
        "system_metrics": {"py/object": "collections.defaultdict", CPUS: [arrow(1512144000, 2)]},
    }
    path = tmp_path / "clusterman.json.gz"
    path.write_bytes(gzip.compress(json.dumps(body).encode()))
    data = read_metrics_file(path)
    assert data[META][FC] == [
        (1512144000, {"<m3.large, us-west-2b>": 2.0}),
        (1512144060, {"<m3.large, us-west-2a>": 10.0}),
    ]
    assert data[SYS] == {CPUS: [(1512144000, 2.0)]}
    store = InMemoryStore()
    store.write(points_of(data))
    assert store.read(META, FC, 0, 2**40) == data[META][FC]


def test_plain_json_is_read_too(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"app_metrics": {"a,b": [[5, 1]]}}))
    assert read_metrics_file(path) == {MetricType.APP_METRICS: {"a,b": [(5, 1.0)]}}


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ([1, 2], "expected a mapping of metric type"),
        ({"sytem_metrics": {}}, "unknown metric type 'sytem_metrics'"),
        ({"system_metrics": {"k": 5}}, "system_metrics: k: expected a list"),
        ({"system_metrics": {"k": [[1, 2, 3]]}}, r"system_metrics: k\[0\]: expected \[timestamp, value\]"),
        ({"system_metrics": {"k": [["noon", 2]]}}, r"k\[0\]: timestamp must be Unix seconds"),
        ({"system_metrics": {"k": [[1, "high"]]}}, r"k\[0\]: metric value must be a number, got 'high'"),
    ],
)
def test_bad_files_name_the_place(tmp_path, body, problem):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(body))
    with pytest.raises(ValueError, match=problem) as e:
        read_metrics_file(path)
    assert str(e.value).startswith(str(path))


def test_not_json_at_all(tmp_path):
    path = tmp_path / "bad.json.gz"
    path.write_bytes(gzip.compress(b"{half"))
    with pytest.raises(ValueError, match=r"bad\.json\.gz: not a metrics file"):
        read_metrics_file(path)


def test_ordered_reading_refuses_time_running_backwards(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"system_metrics": {CPUS: [[60, 1], [120, 2], [120, 3]]}}))
    assert read_metrics_file(path)[SYS][CPUS][-1][0] == 120
    with pytest.raises(ValueError, match=r"system_metrics: cpus_allocated\|.*\[2\]: timestamp 120 is not after"):
        read_metrics_file(path, ordered=True)
