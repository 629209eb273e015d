"""One behaviour, every backend: InMemory, SQLite, DynamoDB (moto's server) and, for reads, Prometheus."""

from __future__ import annotations

import pytest

from clusterman.datastore.store import Point
from clusterman.datastore.store import app_key
from clusterman.datastore.store import system_key
from itests.datastore.conftest import ALBATROSS_QUEUE
from itests.datastore.conftest import APP
from itests.datastore.conftest import META
from itests.datastore.conftest import NO_DATA
from itests.datastore.conftest import OTHER_CPUS
from itests.datastore.conftest import SEAGULL_QUEUE
from itests.datastore.conftest import SYS
from itests.datastore.conftest import WEB_CPUS
from itests.datastore.conftest import Backend

# -- reads: every backend, Prometheus included ---------------------------------------------------


def assert_window(series, start, end, value):
    assert series, "expected points in the window"
    stamps = [ts for ts, _ in series]
    assert stamps == sorted(set(stamps)), "oldest first, one point per timestamp"
    assert start <= stamps[0] and stamps[-1] <= end
    assert {v for _, v in series} == {value}


def test_reads_the_known_values_of_a_window(readable: Backend):
    start, end = readable.now - 20, readable.now
    assert_window(readable.store.read(SYS, WEB_CPUS, start, end), start, end, 42.0)
    assert_window(readable.store.read(SYS, OTHER_CPUS, start, end), start, end, 7.0)
    assert_window(readable.store.read(APP, SEAGULL_QUEUE, start, end), start, end, 5.0)
    assert_window(readable.store.read(APP, ALBATROSS_QUEUE, start, end), start, end, 9.0)


def test_a_key_with_no_data_is_an_empty_window(readable: Backend):
    assert readable.store.read(SYS, NO_DATA, readable.now - 60, readable.now) == []


def test_a_window_outside_the_data_is_empty(readable: Backend):
    assert readable.store.read(SYS, WEB_CPUS, readable.now + 3600, readable.now + 7200) == []
    assert readable.store.read(SYS, WEB_CPUS, 1_000_000_000, 1_000_000_600) == []


def test_read_many_matches_one_read_per_key(readable: Backend):
    keys = [WEB_CPUS, OTHER_CPUS, NO_DATA]
    start, end = readable.now - 4, readable.now - 1  # a closed window: nothing new lands between the reads
    many = readable.store.read_many(SYS, keys, start, end)
    assert many == {key: readable.store.read(SYS, key, start, end) for key in keys}
    assert many[WEB_CPUS] and many[NO_DATA] == []


def test_keys_by_prefix_and_regex(readable: Backend):
    system_keys = readable.store.keys(SYS, prefix="test_cpus|")
    assert WEB_CPUS in system_keys and all(k.startswith("test_cpus|") for k in system_keys)
    assert readable.store.keys(APP, prefix="seagull,") == [SEAGULL_QUEUE]
    assert readable.store.keys(APP, regex=r"[a-z]+,queue_.*") == sorted([ALBATROSS_QUEUE, SEAGULL_QUEUE])
    assert readable.store.keys(APP, prefix="seagull,", regex=r".*,nothing") == []
    assert readable.store.keys(META) == []


def test_a_second_handle_reads_the_same(readable: Backend):
    other = readable.reopen()
    try:
        start, end = readable.now - 4, readable.now - 1
        assert other.read(SYS, WEB_CPUS, start, end) == readable.store.read(SYS, WEB_CPUS, start, end)
    finally:
        if other is not readable.store:
            other.close()


# -- writes: the stores that take them -----------------------------------------------------------

NOW = 1_700_000_000
KEY = system_key("cpus_allocated", "norcal", "batch.mesos")


def test_window_bounds_are_inclusive_and_order_is_by_time(writable: Backend):
    store = writable.store
    store.write(Point(SYS, KEY, NOW + i * 60, float(i)) for i in (5, 1, 3, 0, 2, 4))  # out of order
    assert store.read(SYS, KEY, NOW + 60, NOW + 240) == [(NOW + i * 60, float(i)) for i in (1, 2, 3, 4)]
    assert store.read(SYS, KEY, NOW + 61, NOW + 239) == [(NOW + i * 60, float(i)) for i in (2, 3)]
    assert store.read(SYS, KEY, NOW + 240, NOW + 60) == []  # an upside-down window holds nothing


def test_rewriting_a_timestamp_replaces_its_value(writable: Backend):
    writable.store.write([Point(SYS, KEY, NOW, 1.0)])
    writable.store.write([Point(SYS, KEY, NOW, 2.5), Point(SYS, KEY, NOW, 3.5)])  # the last one wins
    assert writable.store.read(SYS, KEY, NOW, NOW) == [(NOW, 3.5)]


def test_metric_types_are_separate_namespaces(writable: Backend):
    writable.store.write([Point(SYS, KEY, NOW, 1.0), Point(META, KEY, NOW, 2.0)])
    assert writable.store.read(SYS, KEY, NOW, NOW) == [(NOW, 1.0)]
    assert writable.store.read(META, KEY, NOW, NOW) == [(NOW, 2.0)]
    assert writable.store.read(APP, KEY, NOW, NOW) == []
    assert writable.store.keys(APP) == []


def test_mapping_values_round_trip(writable: Backend):
    """Clusterman's fulfilled_capacity: one number per market."""
    key = system_key("fulfilled_capacity", "norcal", "batch.mesos")
    value = {"<m5.large, us-west-2a>": 7.0, "<m5.large, us-west-2b>": 2.5}
    writable.store.write([Point(META, key, NOW, value), Point(META, key, NOW + 60, {})])
    assert writable.store.read(META, key, NOW, NOW + 60) == [(NOW, value), (NOW + 60, {})]


def test_odd_keys_are_kept_exactly(writable: Backend):
    keys = [
        system_key("cpus allocated", "norcal-prod", "sea gull.kubernetes"),
        app_key("app,with,commas", "naïve|metric=x"),
        "100%_sure'; DROP TABLE system_metrics; --",
    ]
    writable.store.write(Point(SYS, key, NOW, float(i)) for i, key in enumerate(keys))
    for i, key in enumerate(keys):
        assert writable.store.read(SYS, key, NOW, NOW) == [(NOW, float(i))]
    assert writable.store.keys(SYS) == sorted(keys)


def test_large_batches_with_repeats_are_written_whole(writable: Backend):
    """More points than one DynamoDB batch, with repeated timestamps inside a batch."""
    points = [Point(APP, app_key("a", f"m{k}"), NOW + t, float(t * 10 + k)) for t in range(40) for k in range(3)]
    points += [Point(APP, app_key("a", "m0"), NOW + 5, -1.0)]
    writable.store.write(points)
    got = writable.store.read_many(APP, [app_key("a", f"m{k}") for k in range(3)], NOW, NOW + 39)
    assert got[app_key("a", "m1")] == [(NOW + t, float(t * 10 + 1)) for t in range(40)]
    assert got[app_key("a", "m0")][5] == (NOW + 5, -1.0)
    assert writable.store.keys(APP, prefix="a,") == ["a,m0", "a,m1", "a,m2"]


def test_writing_nothing_is_a_no_op(writable: Backend):
    writable.store.write([])
    assert writable.store.read(SYS, KEY, 0, 2**40) == []


def test_points_outlive_the_handle_that_wrote_them(writable: Backend):
    writable.store.write([Point(SYS, KEY, NOW, 4.0)])
    writable.store.close()
    reader = writable.reopen()
    assert reader.read(SYS, KEY, NOW - 60, NOW) == [(NOW, 4.0)]
    assert reader.keys(SYS) == [KEY]


def test_values_must_be_numbers():
    with pytest.raises(ValueError, match=r"k: metric value must be a number, got 'ten'"):
        Point(SYS, "k", NOW, "ten")
    with pytest.raises(ValueError, match=r"k\[a\]: metric value must be finite"):
        Point(META, "k", NOW, {"a": float("inf")})
