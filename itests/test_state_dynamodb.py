"""The pause, in Clusterman's DynamoDB state table layout, over moto's server."""

import boto3
import pytest

from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
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


def test_the_pool_lease_is_a_conditional_write(moto_server):
    """Two claimants, one winner; expiry hands it over; a release removes only one's own lease."""
    from clusterman.state.lease import ON_NOW
    from clusterman.state.lease import Holder
    from clusterman.state.lease import PoolLease

    client = boto3.client("dynamodb", endpoint_url=moto_server.url, region_name="us-west-2")
    make_table(client, "state_lease_test")
    store = DynamoStateStore(client, "state_lease_test")
    a = PoolLease(store, POOL, Holder("host-a", 1, 1000.0), ttl_seconds=30, monotonic=ON_NOW)
    b = PoolLease(store, POOL, Holder("host-b", 2, 1000.0), ttl_seconds=30, monotonic=ON_NOW)
    assert a.claim(1000).held
    blocked = b.claim(1010)  # b takes it once it has seen it unchanged for its TTL, on b's clock
    assert not blocked.held and blocked.holder == a.holder.id and blocked.expires_at == 1040
    assert a.claim(1020).held  # renewed: b sees it at its next claim
    assert not b.claim(1049.5).held
    b.release()  # not b's: a's lease stays
    assert not b.claim(1079.4).held
    assert b.claim(1079.5).held  # a stopped renewing: b takes over (a conditional write on a's lease)
    assert not a.claim(1080).held
    b.release()
    assert a.claim(1081).held


def test_a_lease_request_is_granted_and_withdrawn_in_dynamodb(moto_server):
    """manage's request (a conditional write, so only its owner withdraws it) and the hand-over."""
    from clusterman.state.lease import LEASE_REQUEST
    from clusterman.state.lease import ON_NOW
    from clusterman.state.lease import Holder
    from clusterman.state.lease import PoolLease
    from clusterman.state.lease import take_on_request

    client = boto3.client("dynamodb", endpoint_url=moto_server.url, region_name="us-west-2")
    make_table(client, "state_request_test")
    store = DynamoStateStore(client, "state_request_test")
    a = PoolLease(store, POOL, Holder("host-a", 1, 1000.0), ttl_seconds=30, monotonic=ON_NOW)
    m = PoolLease(
        store, POOL, Holder("ops", 2, 1000.0), ttl_seconds=60, purpose="clusterman manage by ann@ops", monotonic=ON_NOW
    )
    assert a.claim(1000).held
    times = iter([1001.0, 1001.0, 1001.0, 1002.0, 1002.0, 1002.0])

    def autoscaler_between_runs(_seconds):
        assert a.claim(1002, hand_over=True).requested

    assert take_on_request(m, 5.0, clock=lambda: next(times), sleep=autoscaler_between_runs).held
    assert store.get(LEASE_REQUEST, "norcal.batch.mesos") is None  # withdrawn
    assert "held by clusterman manage by ann@ops" in a.claim(1003, hand_over=True).describe()
    m.release()
    assert a.claim(1004, hand_over=True).held


def test_an_unreachable_table_is_no_lease(moto_server):
    from clusterman.state.lease import Holder
    from clusterman.state.lease import PoolLease

    client = boto3.client("dynamodb", endpoint_url=moto_server.url, region_name="us-west-2")
    lease = PoolLease(DynamoStateStore(client, "no_such_lease_table"), POOL, Holder("h", 1, 0.0), 30)
    with pytest.raises(StateError, match="DynamoDB state table no_such_lease_table"):
        lease.claim(1000)


@pytest.mark.parametrize(
    ("table", "payload"), [("state_damaged_json", {"S": "{not json"}), ("state_damaged_type", {"N": "5"})]
)
def test_a_damaged_item_is_a_state_error_naming_it_and_a_lease_is_written_over(moto_server, table, payload):
    """An item edited by hand or by a broken tool: readers get one line naming it, not a
    JSONDecodeError or KeyError; a damaged lease is no lease: claimed over."""
    from clusterman.state.lease import AUTOSCALER_LEASE
    from clusterman.state.lease import Holder
    from clusterman.state.lease import PoolLease
    from clusterman.state.store import DamagedItem

    client = boto3.client("dynamodb", endpoint_url=moto_server.url, region_name="us-west-2")
    make_table(client, table)
    store = DynamoStateStore(client, table)
    pause(store, POOL, 1000, reason="maintenance")
    key = {"state": {"S": "autoscaler_paused"}, "entity": {"S": "norcal.batch.mesos"}}
    client.update_item(
        TableName=table, Key=key, UpdateExpression="SET payload = :p", ExpressionAttributeValues={":p": payload}
    )
    with pytest.raises(DamagedItem, match=r"the autoscaler_paused item of norcal\.batch\.mesos cannot be read"):
        pause_status(store, POOL, 1500)
    resume(store, POOL)
    assert not pause_status(store, POOL, 1500).paused

    a = PoolLease(store, POOL, Holder("host-a", 1, 1000.0), ttl_seconds=30)
    b = PoolLease(store, POOL, Holder("host-b", 2, 1000.0), ttl_seconds=30)
    assert a.claim(1000).held
    key["state"] = {"S": AUTOSCALER_LEASE}
    client.update_item(
        TableName=table, Key=key, UpdateExpression="SET payload = :p", ExpressionAttributeValues={":p": payload}
    )
    assert b.claim(1010).held  # no valid lease (as SQLite has it): written over, if still that one
    assert store.get(AUTOSCALER_LEASE, "norcal.batch.mesos").payload["holder"] == b.holder.id
    assert not a.claim(1011).held


def test_only_what_no_retry_mends_makes_the_store_unusable(moto_server):
    """A table that does not exist is the configuration's fault (the bootstrap rolls such a
    configuration back); a throttled or unreachable DynamoDB is an outage, not the configuration's."""
    from botocore.config import Config

    from clusterman.state.store import UnusableStore
    from itests.aws_proxy import Fault
    from itests.aws_proxy import FaultyProxy

    client = boto3.client("dynamodb", endpoint_url=moto_server.url, region_name="us-west-2")
    with pytest.raises(UnusableStore, match=r"no_such_state_table: .* \(check aws.state_table"):
        pause_status(DynamoStateStore(client, "no_such_state_table"), POOL, 0)

    make_table(client, "state_throttled")
    no_retries = Config(retries={"total_max_attempts": 1}, connect_timeout=1, read_timeout=1)
    with FaultyProxy(moto_server.url) as proxy:
        proxy.add(Fault(code="ThrottlingException", message="Rate of requests exceeds the allowed throughput"))
        throttled = boto3.client("dynamodb", endpoint_url=proxy.url, region_name="us-west-2", config=no_retries)
        with pytest.raises(StateError, match="allowed throughput") as raised:
            pause_status(DynamoStateStore(throttled, "state_throttled"), POOL, 0)
        assert not isinstance(raised.value, UnusableStore)
    down = boto3.client("dynamodb", endpoint_url="http://127.0.0.1:9", region_name="us-west-2", config=no_retries)
    with pytest.raises(StateError) as raised:
        pause_status(DynamoStateStore(down, "state_throttled"), POOL, 0)
    assert not isinstance(raised.value, UnusableStore)
