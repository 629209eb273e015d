"""What lands on disk and in DynamoDB: Clusterman's item layout, and old points going away."""

from __future__ import annotations

import time

import boto3
import pytest

from clusterman.datastore.sqlite import SqliteStore
from clusterman.datastore.store import MetricsError
from clusterman.datastore.store import Point
from itests.datastore.conftest import APP
from itests.datastore.conftest import META
from itests.datastore.conftest import SYS
from itests.datastore.conftest import dynamodb_store
from itests.datastore.conftest import unique_tables

DAY = 86400
FC = "fulfilled_capacity|cluster=norcal-prod,pool=seagull.mesos"


def raw_client(moto_server):
    return boto3.client("dynamodb", endpoint_url=moto_server.url, region_name="us-west-2")


def test_dynamodb_items_are_laid_out_as_clusterman_lays_them_out(moto_server):
    tables = unique_tables()
    store = dynamodb_store(moto_server, tables, retention_days=2)
    store.create()
    store.write(
        [Point(APP, "app_B,my_runs", 1502405810, 201), Point(META, FC, 1502409314, {"<c3.xlarge, us-west-2a>": 4})]
    )
    dynamodb = raw_client(moto_server)
    app_item = dynamodb.get_item(
        TableName=tables.app_metrics_table, Key={"key": {"S": "app_B,my_runs"}, "timestamp": {"N": "1502405810"}}
    )["Item"]
    assert app_item == {
        "key": {"S": "app_B,my_runs"},
        "timestamp": {"N": "1502405810"},
        "value": {"N": "201.0"},
        "expiration_timestamp": {"N": str(1502405810 + 2 * DAY)},
    }
    meta_item = dynamodb.get_item(
        TableName=tables.metadata_table, Key={"key": {"S": FC}, "timestamp": {"N": "1502409314"}}
    )
    assert meta_item["Item"]["<c3.xlarge, us-west-2a>"] == {"N": "4.0"} and "value" not in meta_item["Item"]
    ttl = dynamodb.describe_time_to_live(TableName=tables.system_metrics_table)["TimeToLiveDescription"]
    assert ttl["AttributeName"] == "expiration_timestamp" and ttl["TimeToLiveStatus"] in ("ENABLED", "ENABLING")
    key_schema = dynamodb.describe_table(TableName=tables.system_metrics_table)["Table"]["KeySchema"]
    assert key_schema == [
        {"AttributeName": "key", "KeyType": "HASH"},
        {"AttributeName": "timestamp", "KeyType": "RANGE"},
    ]


def test_dynamodb_reads_items_a_clusterman_deployment_wrote(moto_server):
    """Integers, a TTL attribute of another name, markets as columns: all read back as numbers."""
    tables = unique_tables()
    store = dynamodb_store(moto_server, tables)
    store.create()
    dynamodb = raw_client(moto_server)
    key = "cpus_allocated|cluster=norcal-prod,pool=appA_role.mesos"
    dynamodb.put_item(
        TableName=tables.system_metrics_table,
        Item={"key": {"S": key}, "timestamp": {"N": "1502405756"}, "value": {"N": "22"}},
    )
    dynamodb.put_item(
        TableName=tables.metadata_table,
        Item={
            "key": {"S": FC},
            "timestamp": {"N": "1502409314"},
            "<c3.xlarge, us-west-2a>": {"N": "4"},
            "<c3.xlarge, us-west-2c>": {"N": "20"},
            "expiration_timestamp": {"N": "1600000000"},
        },
    )
    assert store.read(SYS, key, 1502405700, 1502405800) == [(1502405756, 22.0)]
    assert store.read(META, FC, 1502409314, 1502409314) == [
        (1502409314, {"<c3.xlarge, us-west-2a>": 4.0, "<c3.xlarge, us-west-2c>": 20.0})
    ]


def test_dynamodb_without_retention_writes_no_ttl(moto_server):
    tables = unique_tables()
    store = dynamodb_store(moto_server, tables)
    store.create()
    store.write([Point(SYS, "k", 10, 1.0)])
    item = raw_client(moto_server).get_item(
        TableName=tables.system_metrics_table, Key={"key": {"S": "k"}, "timestamp": {"N": "10"}}
    )["Item"]
    assert "expiration_timestamp" not in item


def test_sqlite_drops_points_older_than_the_retention_by_the_wall_clock(tmp_path):
    now = 10 * DAY
    store = SqliteStore(tmp_path / "m.sqlite3", retention_days=1, clock=lambda: now)
    store.write([Point(SYS, "old", 0, 1.0), Point(SYS, "kept", 0, 1.0), Point(SYS, "kept", now - DAY // 2, 2.0)])
    store.write([Point(SYS, "kept", now, 3.0)])
    assert store.keys(SYS) == ["kept", "old"], "a write never deletes"
    assert store.prune(now) == 2
    assert store.read(SYS, "kept", 0, 10 * DAY) == [(now - DAY // 2, 2.0), (now, 3.0)]
    assert store.read(SYS, "old", 0, 10 * DAY) == []
    assert store.keys(SYS) == ["kept"], "a key with no points left is forgotten"
    assert store.prune(now) == 0


def test_a_write_from_the_future_is_refused_whole(tmp_path):
    now = 10 * DAY
    store = SqliteStore(tmp_path / "m.sqlite3", retention_days=1, clock=lambda: now)
    store.write([Point(SYS, "k", now - 60, 1.0)])
    with pytest.raises(MetricsError, match=r"k2: timestamp 864600 \(1970-01-11T00:10:00Z\) is 600 s ahead"):
        store.write([Point(SYS, "k", now, 2.0), Point(SYS, "k2", now + 600, 2.0)])
    store.write([Point(SYS, "k", now + 240, 3.0)])  # clock skew between hosts is allowed
    assert store.read(SYS, "k", 0, 20 * DAY) == [(now - 60, 1.0), (now + 240, 3.0)]


def test_sqlite_keeps_everything_without_retention(tmp_path):
    store = SqliteStore(tmp_path / "m.sqlite3")
    store.write([Point(SYS, "k", 0, 1.0), Point(SYS, "k", 400 * DAY, 2.0)])
    assert len(store.read(SYS, "k", 0, 400 * DAY)) == 2


def test_dynamodb_refuses_a_millisecond_timestamp_before_sending_anything(moto_server):
    """Its TTL would be timestamp + retention: a point in milliseconds would never expire."""
    tables = unique_tables()
    store = dynamodb_store(moto_server, tables, retention_days=2)
    store.create()
    now_ms = int(time.time() * 1000)
    with pytest.raises(MetricsError, match=rf"a,b: timestamp {now_ms} is in milliseconds\?"):
        store.write([Point(APP, "a,c", 1000, 1.0), Point(APP, "a,b", now_ms, 1.0)])
    assert raw_client(moto_server).scan(TableName=tables.app_metrics_table)["Items"] == []
