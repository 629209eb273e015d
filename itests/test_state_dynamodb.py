"""The pause, in Clusterman's DynamoDB state table layout, over moto's server."""

import boto3
import pytest

from clusterman.config.model import PoolIdentity
from clusterman.config.model import Scheduler
from clusterman.state.pause import pause
from clusterman.state.pause import pause_status
from clusterman.state.pause import resume
from clusterman.state.store import DynamoStateStore
from clusterman.state.store import StateError

POOL = PoolIdentity("norcal", "batch", Scheduler.MESOS)


def make_table(client, name):
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "state", "KeyType": "HASH"}, {"AttributeName": "entity", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "state", "AttributeType": "S"},
            {"AttributeName": "entity", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )


def test_pause_round_trip_in_clusterman_layout(moto_server):
    client = boto3.client("dynamodb", endpoint_url=moto_server.url, region_name="us-west-2")
    make_table(client, "state_pause_test")
    store = DynamoStateStore(client, "state_pause_test")
    pause(store, POOL, 1000, until=2000)
    raw = client.get_item(
        TableName="state_pause_test",
        Key={"state": {"S": "autoscaler_paused"}, "entity": {"S": "norcal.batch.mesos"}},
    )["Item"]
    assert raw["expiration_timestamp"] == {"N": "2000"}
    assert pause_status(store, POOL, 1500).paused
    assert not pause_status(store, POOL, 2500).paused
    resume(store, POOL)
    assert not pause_status(store, POOL, 1500).paused


def test_missing_table_is_a_clear_error(moto_server):
    client = boto3.client("dynamodb", endpoint_url=moto_server.url, region_name="us-west-2")
    with pytest.raises(StateError, match="DynamoDB state table no_such_table"):
        pause_status(DynamoStateStore(client, "no_such_table"), POOL, 0)
