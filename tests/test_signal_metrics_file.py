"""``clusterman signal evaluate``'s metrics file: checks naming the file, sorting, and byte reuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterman.signals import metrics_file
from clusterman.signals.metrics_file import MetricsFileError


def write(tmp_path: Path, text: str | bytes, name: str = "m.json") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def test_unsorted_points_are_sorted_with_a_note(tmp_path):
    """Issue 12: points out of time order used to reach the signal as they were."""
    path = write(tmp_path, '{"metrics": {"cpus": [[120, 5.0], [60, 50.0], [120, 6.0]]}, "timestamp": 120}')
    loaded = metrics_file.load(path)
    assert loaded.metrics["cpus"] == [[60, 50.0], [120, 5.0], [120, 6.0]]  # stable for equal times
    assert loaded.notes == (f"{path}: metric 'cpus' was not in time order; sorted it (oldest first)",)
    payload = json.loads(loaded.payload(None))
    assert payload == {"metrics": {"cpus": [[60, 50.0], [120, 5.0], [120, 6.0]]}, "timestamp": 120}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"metrics": {"cpus": [[60, 5.0], [120, NaN]]}}', "m.json: line 1 column 40: NaN is not a number"),
        ('{"cpus": [[60, 5.0],\n [120, -Infinity]]}', "m.json: line 2 column 8: -Infinity is not a number"),
        ('{"cpus": [[60, 1e999]]}', "metric 'cpus' point 0: the value must be a finite number, got inf"),
        ('{"cpus": [[60, 5.0], [120, "x"]]}', "metric 'cpus' point 1: the value must be a finite number"),
        ('{"cpus": [[60, 5.0], [120]]}', r"metric 'cpus' point 1: expected \[timestamp, value\]"),
        ('{"cpus": [[60, 5.0], 7]}', r"metric 'cpus' point 1: expected \[timestamp, value\]"),
        ('{"cpus": [["t", 5.0]]}', "metric 'cpus' point 0: the timestamp must be a finite number"),
        ('{"cpus": 5}', "metric 'cpus' must be a list"),
        ('{"metrics": {}, "timestamp": "now"}', "timestamp must be a number"),
        ("[1]", "expected a JSON object"),
        ('{"cpus": [[60, 5.0]', "m.json: Expecting"),
        ("[" * 100_000, "m.json: JSON nested too deeply"),
    ],
)
def test_bad_files_are_one_line_naming_the_file(tmp_path, text, message):
    with pytest.raises(MetricsFileError, match=message) as err:
        metrics_file.load(write(tmp_path, text))
    assert str(tmp_path / "m.json") in str(err.value)
    assert "\n" not in str(err.value)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(MetricsFileError, match=r"missing\.json: cannot read"):
        metrics_file.load(tmp_path / "missing.json")


@pytest.mark.parametrize(
    ("text", "timestamp", "expected"),
    [
        # a wrapped file whose timestamp is last: its bytes as they are
        ('{"metrics": {"c": [[60, 1.5]]}, "timestamp": 90}', None, '{"metrics": {"c": [[60, 1.5]]}, "timestamp": 90}'),
        # --timestamp replaces only the trailing number
        ('{"metrics": {"c": [[60, 1.5]]}, "timestamp": 90}', 100, '{"metrics": {"c": [[60, 1.5]]}, "timestamp": 100}'),
        # the bare mapping, spliced; the newest point's time by default
        ('{"c": [[60, 1.5]], "d": [[30, 2]]}', None, '{"metrics":{"c": [[60, 1.5]], "d": [[30, 2]]},"timestamp":60}'),
        # a wrapped file without a timestamp gets one appended
        ('{"metrics": {"c": [[60, 1.5]]}}\n', None, '{"metrics": {"c": [[60, 1.5]]},"timestamp":60}'),
        # a timestamp that is not last: the bytes are reused when it is the one wanted
        ('{"timestamp": 90, "metrics": {"c": [[60, 1.5]]}}', None, '{"timestamp": 90, "metrics": {"c": [[60, 1.5]]}}'),
    ],
)
def test_payload_reuses_the_files_bytes(tmp_path, text, timestamp, expected):
    loaded = metrics_file.load(write(tmp_path, text))
    payload = loaded.payload(timestamp)
    assert payload == expected.encode()
    wanted = json.loads(text)
    metrics = wanted.get("metrics", wanted)
    assert json.loads(payload)["metrics"] == metrics


@pytest.mark.parametrize(
    ("text", "timestamp"),
    [
        ('{"metrics": {"c": [[60, 1.5]]}, "timestamp": 90}', None),
        ('{"metrics": {"c": [[60, 1.5]]}, "timestamp": 90}', 120),
        ('{"c": [[60, 1.5]]}', 75),
        # no timestamp anywhere: the newest of the series' last points, read off the bytes
        ('{"c": [[0, 1], [60, 1.5]], "d": [[30, 2], [90, 2.5]]}', None),
        ('{"metrics": {"c": [[0, 1], [60.5, 1.5]], "d": []}}', None),
    ],
)
def test_the_guess_matches_the_checked_payload(tmp_path, text, timestamp):
    path = write(tmp_path, text)
    assert metrics_file.guess(path.read_bytes(), timestamp) == metrics_file.load(path).payload(timestamp)


def test_unsorted_series_fool_the_guess_but_not_the_check(tmp_path):
    path = write(tmp_path, '{"c": [[90, 1], [60, 1.5]]}')
    guessed = metrics_file.guess(path.read_bytes(), None)
    assert guessed is not None and json.loads(guessed)["timestamp"] == 60
    assert json.loads(metrics_file.load(path).payload(None))["timestamp"] == 90


def test_a_metric_named_metrics_fools_the_guess_but_not_the_check(tmp_path):
    """A bare mapping whose first metric is called ``metrics``: the guess is wrong, the check right."""
    path = write(tmp_path, '{"metrics": [[60, 1.5]], "timestamp": [[60, 2.0]]}')
    guessed = metrics_file.guess(path.read_bytes(), None)
    checked = metrics_file.load(path).payload(None)
    assert guessed != checked
    assert json.loads(checked) == {"metrics": {"metrics": [[60, 1.5]], "timestamp": [[60, 2.0]]}, "timestamp": 60}


# Files the check without point lists must read as the full parse does (or leave to it: None).
SHAPES = [
    '{"metrics": {"c": [[60, 1.5], [120, 2]]}, "timestamp": 150}',
    '{"c": [[60,1.5],[120,2e3]], "d": [], "e": [ [ 1 , -0.5 ] ,\n [2,\t3] ]}',
    '{"metrics": {"c": [[60, 1.5]]}, "timestamp": 90, "other": [[1, 2]]}',  # a series not under metrics
    '{"metrics": {"c": [[60, 1.5]], "c": [[30, 2.5]]}}',  # duplicate key: the last one wins
    '{"c[[1,2]]": [[60, 1.5]]}',  # brackets in a name
    '{"c\\"[[1,2]]": [[60, 1.5]]}',  # an escaped quote
    '{"metrics": [[60, 1.5]], "timestamp": [[60, 2.0]]}',  # a bare mapping with a metric named metrics
    '{"c": [[60, 1.5], [30, 2]]}',  # out of order
    '{"c": [[60, 1.5], [60, 2]]}',  # equal times
    '{"c": [[60, 1.5]5, [90, 2]]}',
    '{"c": [[60, 1.5], 5[90, 2]]}',
    '{"c": [[60, 1 5], [90, 2]]}',
    '{"c": [[60, 01], [90, 2]]}',
    '{"c": [[60, .5], [90, 2]]}',
    '{"c": [[60, 1.], [90, 2]]}',
    '{"c": [[60, +1], [90, 2]]}',
    '{"c": [[60, 1e999], [90, 2]]}',
    '{"c": [[1e999, 1], [90, 2]]}',
    '{"c": [[60, 1], [1' + "0" * 400 + ", 2]]}",  # an integer too large for a float
    '{"c": [[60, 1, 3], [90, 2]]}',
    '{"c": [[60], [90, 2]]}',
    '{"c": [[[60, 1]], [90, 2]]}',
    '{"c": [[60, 1], [90, 2]}',
    '{"c": [[60, 1], [90, 2]]',
    '{"c": [[60, NaN], [90, 2]]}',
    '{"c": [[60, true], [90, 2]]}',
    '{"c": [[60, 1],\x0b[90, 2]]}',
    '{"c": [[60, 1], [90, -]]}',
    '{"metrics": {"c": [[60, 1.5]]}, "timestamp": 1e999}',
]


@pytest.mark.parametrize("text", SHAPES)
def test_the_check_without_point_lists_agrees_with_the_full_parse(tmp_path, text):
    path = write(tmp_path, text)
    raw = path.read_bytes()
    quick = metrics_file._check_without_points(path, raw)
    try:
        full = metrics_file._load_points(path, raw)
    except MetricsFileError:
        assert quick is None  # only the full parse names an error
        return
    if quick is None:
        return
    assert full.notes == ()
    assert (quick.timestamp, quick.wrapped, quick.newest) == (full.timestamp, full.wrapped, full.newest)
    assert type(quick.newest) is type(full.newest)
    assert quick.metrics == full.metrics
    for when in (None, 1000, 1000.5):
        assert quick.payload(when) == full.payload(when)


def test_a_large_ordered_file_is_checked_without_point_lists(tmp_path):
    series = [[60 * i, 0.1 * i] for i in range(10_000)]
    path = write(tmp_path, json.dumps({"metrics": {"a": series, "b": series[:10]}, "timestamp": 600_000}))
    loaded = metrics_file.load(path)
    assert loaded.parsed is None and loaded.newest == 60 * 9_999
    assert loaded.payload(None) == path.read_bytes()
    assert loaded.metrics == {"a": series, "b": series[:10]}  # parsed when asked for


def test_an_integer_too_large_for_a_float_is_named(tmp_path):
    path = write(tmp_path, '{"c": [[60, 1], [1' + "0" * 400 + ", 2]]}")
    with pytest.raises(MetricsFileError, match="metric 'c' point 1: the timestamp must be a finite number"):
        metrics_file.load(path)


def test_mutated_files_are_never_vouched_for_when_the_full_parse_refuses_them(tmp_path):
    """A seeded fuzz: one to three bytes changed in a valid file; whatever the quick check accepts,
    the full parse accepts too, unchanged, with the same payload."""
    import random

    rng = random.Random(12)
    base = '{"metrics": {"c": [[60, 1.5], [120, 2e3], [180, -0.25]], "d": [ [0, 1] ]}, "timestamp": 200}'
    alphabet = '[]{},.:0123456789eE+- "\n\\aN'
    vouched = 0
    path = tmp_path / "m.json"
    for _ in range(1500):
        text = list(base)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(text) + 1)
            edit = rng.choice(("insert", "delete", "replace"))
            if edit == "insert":
                text.insert(i, rng.choice(alphabet))
            elif i < len(text):
                if edit == "delete":
                    del text[i]
                else:
                    text[i] = rng.choice(alphabet)
        raw = "".join(text).encode()
        quick = metrics_file._check_without_points(path, raw)
        if quick is None:
            continue
        vouched += 1
        full = metrics_file._load_points(path, raw)  # raises if the quick check accepted a bad file
        assert full.notes == () and quick.metrics == full.metrics, raw
        assert (quick.timestamp, quick.wrapped, quick.newest) == (full.timestamp, full.wrapped, full.newest), raw
        assert quick.payload(None) == full.payload(None), raw
    assert vouched > 150  # the fuzz reaches the quick check's acceptances, not only its refusals
