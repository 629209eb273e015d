"""One way to read a time and one way to print it, the same through every reader and every printer."""

import argparse
import ast
import datetime
import re
from pathlib import Path

import pytest

from clusterman.batch.arguments import time_argument
from clusterman.cluster.kubernetes import unix_time
from clusterman.core.config import MetricType
from clusterman.core.timestamps import format_time
from clusterman.core.timestamps import parse_time
from clusterman.datastore.datafile import parse_metrics
from clusterman.datastore.generate import whole_unix_seconds as design_time
from clusterman.errors import Reported
from clusterman.simulator.inputs import _time as simulator_time
from clusterman.state.pause import parse_until

REPO = Path(__file__).resolve().parents[1]
T = 1_709_510_400  # 2024-03-04T00:00:00Z
BEFORE = T - 86400  # the "now" of --until, so that T is in its future


def through_the_datafile(value):
    data = parse_metrics({"system_metrics": {"k": [[value, 1]]}}, "m.json")
    return data[MetricType.SYSTEM_METRICS]["k"][0][0]


def through_argparse(value):
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--at", type=time_argument)
    return parser.parse_args(["--at", value]).at


def through_the_simulator(value):
    try:
        return simulator_time("--start", value, None)
    except Reported as e:
        raise ValueError(str(e)) from e


def through_kubernetes(value):
    try:
        return unix_time(value, "node n: metadata.creationTimestamp")
    except Reported as e:
        raise ValueError(str(e)) from e


TEXT_READERS = {
    "core": parse_time,
    "metric design": design_time,
    "metrics file": through_the_datafile,
    "--until": lambda v: parse_until(v, BEFORE),
    "--end, --timestamp": through_argparse,
    "simulate --start/--end": through_the_simulator,
    "kubernetes": through_kubernetes,
}


@pytest.mark.parametrize(
    "text",
    ["2024-03-04T00:00:00Z", "2024-03-04T01:00:00+01:00", "2024-03-04t00:00:00z", "2024-03-04 00:00:00",
     "2024-03-04T00:00:00.000Z", "20240304T000000Z", " 2024-03-04T00:00Z ", "2024-03-04T00:00:00+00:00"],
)  # fmt: skip
def test_every_reader_understands_the_same_iso_times(text):
    for name, reader in TEXT_READERS.items():
        assert int(reader(text)) == T, name


@pytest.mark.parametrize("text", ["1709510400", "1709510400.0"])
def test_unix_seconds_as_text(text):
    for name, reader in TEXT_READERS.items():
        if name == "--until":
            continue  # there a bare number is a duration in seconds (``90``), as Clusterman's --until
        assert int(reader(text)) == T, name


@pytest.mark.parametrize(
    "value",
    [T, float(T), datetime.datetime(2024, 3, 4, tzinfo=datetime.UTC), datetime.datetime(2024, 3, 4),
     datetime.date(2024, 3, 4), {"py/object": "arrow.arrow.Arrow", "timestamp": T}, "2024-03-04"],
)  # fmt: skip
def test_values_from_files(value):
    """What YAML (designs) and JSON (metrics files, Clusterman's pickled arrow.Arrow) hand over."""
    for reader in (parse_time, design_time, through_the_datafile):
        assert int(reader(value)) == T


@pytest.mark.parametrize("value", ["noon", "", "2024-13-01", "nan", "inf", "-5", "1969-12-31T23:59:59Z", True, None])
def test_every_reader_refuses_the_same_non_times(value):
    readers = TEXT_READERS if isinstance(value, str) else {"design": design_time, "file": through_the_datafile}
    for name, reader in readers.items():
        if name == "--until" and value == "-5":
            continue  # a duration there, refused as one
        with pytest.raises((ValueError, argparse.ArgumentError)):
            reader(value)
    with pytest.raises(ValueError, match=r"must be Unix seconds or an ISO 8601 time such as 2026-11-23T08:41:07Z"):
        parse_time(value)


def test_the_error_names_the_place():
    with pytest.raises(ValueError, match=r"^--timestamp: must be Unix seconds"):
        parse_time("noon", "--timestamp")
    with pytest.raises(ValueError, match=r"m\.json: system_metrics: k\[0\]: timestamp must be Unix seconds"):
        through_the_datafile("noon")


@pytest.mark.parametrize(
    ("seconds", "digits", "text"),
    [(T, 0, "2024-03-04T00:00:00Z"), (T + 0.999, 0, "2024-03-04T00:00:00Z"), (T + 0.25, 3, "2024-03-04T00:00:00.250Z"),
     (T + 61.5, 1, "2024-03-04T00:01:01.5Z"), (0, 0, "1970-01-01T00:00:00Z"), (1e20, 0, "1e+20 (out of range)")],
)  # fmt: skip
def test_one_printed_form(seconds, digits, text):
    assert format_time(seconds, digits) == text


def test_what_is_printed_is_read_back():
    for seconds in (0, T, 4_102_444_800):
        assert parse_time(format_time(seconds)) == seconds


# Where a time is printed or read by hand, a second format creeps in: only the core module may.
TIME_CALLS = {"strftime", "strptime", "fromisoformat", "isoformat", "utcfromtimestamp"}
ALLOWED = {
    "clusterman/core/timestamps.py",
    "clusterman/local/rundir.py",  # a directory's name (no colons), not a time people read
}


def test_no_module_formats_or_parses_times_by_hand():
    found = []
    for package in ("clusterman", "clusterman_signals"):
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO).as_posix()
            if relative in ALLOWED:
                continue
            for node in ast.walk(ast.parse(path.read_text(), relative)):
                if isinstance(node, ast.Attribute) and node.attr in TIME_CALLS:
                    found.append(f"{relative}:{node.lineno} {node.attr}")
    assert found == []


STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")


def test_log_records_are_stamped_alike_by_clusterman_and_the_signal_sdk():
    from clusterman.batch.arguments import UtcFormatter
    from clusterman_signals.run import UtcFormatter as SdkFormatter

    record = __import__("logging").LogRecord("x", 20, __file__, 1, "hello", None, None)
    record.created, record.msecs = T + 0.25, 250.0
    ours = UtcFormatter("%(asctime)s %(message)s").format(record)
    assert ours == "2024-03-04T00:00:00.250Z hello" and STAMP.match(ours)
    assert SdkFormatter("%(asctime)s %(message)s").format(record) == ours


def test_make_run_tells_run_lines_from_log_records(tmp_path):
    """``make run`` shows the autoscaler's run lines and reports the bootstrap's last ERROR record:
    both are found by the printed forms above, so a change of form cannot lose them silently."""
    import logging

    from clusterman.batch.arguments import UtcFormatter
    from clusterman.local.stack import bootstrap_error
    from clusterman.local.stack import is_decision_line

    record = logging.LogRecord("clusterman.batch", logging.ERROR, __file__, 1, "no pool file", None, None)
    logged = UtcFormatter("%(asctime)s %(name)s %(levelname)s %(message)s").format(record)
    run_line = f"{format_time(T)} demand cpus=6.0 | utilisation cpus 300% | scale_up | target 1 -> 5 | ..."
    assert is_decision_line(run_line) and not is_decision_line(logged)
    (tmp_path / "bootstrap.log").write_text(f"{logged}\n{run_line}\n")
    assert bootstrap_error(tmp_path / "bootstrap.log") == "no pool file"
