"""``clusterman setup`` over moto's server: the DynamoDB state and metrics tables with their keys and
TTL, created once and found in place after; a table with other keys is refused in one line. Then
an operator's ``disable``/``enable`` and ``manage``, run from outside any pod, reach the durable
state and the lease that the autoscalers in their pods read."""

from __future__ import annotations

import itertools
import time

import boto3
import pytest
import yaml

from clusterman.cli.main import main
from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.state.lease import Holder
from clusterman.state.lease import PoolLease
from clusterman.state.pause import pause_status
from clusterman.state.store import DynamoStateStore
from itests.aws_world import TAG_KEY
from itests.aws_world import World

_names = itertools.count()
POOL_FILE = """
resource_groups: []
scaling_limits: {min_capacity: 1, max_capacity: 5, max_weight_to_add: 1, max_weight_to_remove: 1}
"""


@pytest.fixture
def world(moto_server):
    return World(moto_server.url)


@pytest.fixture
def config(tmp_path, moto_server, world):
    """A main file like the manifests' (DynamoDB for state and metrics), with tables of this test's own."""
    n = next(_names)
    tables = {
        "state": f"setup_state_{n}",
        "system": f"setup_system_{n}",
        "app": f"setup_app_{n}",
        "metadata": f"setup_metadata_{n}",
    }
    main = {
        "clusters": {"prod": {"aws_region": "us-west-2"}, world.cluster: {"aws_region": "us-west-2"}},
        "aws": {"region": "us-west-2", "endpoint_url": moto_server.url, "state_table": tables["state"]},
        "state": {"backend": "dynamodb"},
        "metrics": {
            "backend": "dynamodb",
            "dynamodb": {
                "system_metrics_table": tables["system"],
                "app_metrics_table": tables["app"],
                "metadata_table": tables["metadata"],
            },
        },
        "cluster_config_directory": str(tmp_path / "pools"),
    }
    (tmp_path / "pools" / "prod").mkdir(parents=True)
    (tmp_path / "pools" / "prod" / "batch.kubernetes").write_text(POOL_FILE)
    (tmp_path / "pools" / world.cluster).mkdir()
    groups = f"resource_groups: [{{asg: {{tag: '{TAG_KEY}'}}}}]\n"
    (tmp_path / "pools" / world.cluster / "batch.kubernetes").write_text(
        POOL_FILE.replace("resource_groups: []\n", groups)
    )
    path = tmp_path / "clusterman.yaml"
    path.write_text(yaml.safe_dump(main))
    return str(path), tables


def cli(capsys, config, *args):
    status = main(["--env-config-path", config, *args])
    out, err = capsys.readouterr()
    return status, out, err


def dynamodb(moto_server):
    return boto3.client("dynamodb", endpoint_url=moto_server.url, region_name="us-west-2")


def layout(client, table):
    described = client.describe_table(TableName=table)["Table"]
    types = {a["AttributeName"]: a["AttributeType"] for a in described["AttributeDefinitions"]}
    keys = [(k["KeyType"], k["AttributeName"], types[k["AttributeName"]]) for k in described["KeySchema"]]
    ttl = client.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
    return sorted(keys), (ttl["TimeToLiveStatus"], ttl.get("AttributeName")), described["BillingModeSummary"]


def test_setup_creates_the_tables_once_and_finds_them_in_place_after(config, moto_server, capsys):
    path, tables = config
    status, out, err = cli(capsys, path, "setup")
    assert status == 0, err
    assert out.splitlines() == [
        f"state: DynamoDB state table {tables['state']} (hash state (S), range entity (S), "
        "TTL on expiration_timestamp): created, TTL on expiration_timestamp enabled",
        f"metrics: DynamoDBStore('{moto_server.url}', '{tables['system']}', ...): created or updated "
        f"{tables['system']}, {tables['app']}, {tables['metadata']}",
    ]
    client = dynamodb(moto_server)
    keys, ttl, billing = layout(client, tables["state"])
    assert keys == [("HASH", "state", "S"), ("RANGE", "entity", "S")]
    assert ttl == ("ENABLED", "expiration_timestamp") and billing["BillingMode"] == "PAY_PER_REQUEST"
    for name in ("system", "app", "metadata"):
        keys, ttl, _ = layout(client, tables[name])
        assert keys == [("HASH", "key", "S"), ("RANGE", "timestamp", "N")]
        assert ttl == ("ENABLED", "expiration_timestamp")

    status, out, err = cli(capsys, path, "setup")  # idempotent: nothing to do
    assert status == 0, err
    assert [line.rsplit(": ", 1)[1] for line in out.splitlines()] == ["in place", "in place"]


def test_a_table_with_other_keys_is_refused_and_a_ttl_that_is_off_is_switched_on(config, moto_server, capsys):
    path, tables = config
    client = dynamodb(moto_server)
    client.create_table(
        TableName=tables["state"],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    status, out, err = cli(capsys, path, "setup")
    assert status == 1 and out == ""
    assert err.strip() == (
        f"clusterman setup: DynamoDB table {tables['state']} exists with keys hash id (S); clusterman needs "
        "hash state (S), range entity (S), TTL on expiration_timestamp: name another table in the main file, "
        "or remove this one"
    )
    client.delete_table(TableName=tables["state"])
    # Clusterman's own table, made by hand without a TTL: kept, and its TTL switched on.
    client.create_table(
        TableName=tables["state"],
        KeySchema=[{"AttributeName": "state", "KeyType": "HASH"}, {"AttributeName": "entity", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "state", "AttributeType": "S"},
            {"AttributeName": "entity", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    status, out, err = cli(capsys, path, "setup")
    assert status == 0, err
    assert out.splitlines()[0].endswith(": TTL on expiration_timestamp enabled")


def test_an_operator_pauses_a_pool_in_the_durable_state_without_a_pod(config, moto_server, capsys):
    path, tables = config
    assert cli(capsys, path, "setup")[0] == 0
    pool = ["--cluster", "prod", "--pool", "batch", "--scheduler", "kubernetes"]
    status, out, err = cli(capsys, path, "disable", *pool, "--until", "1h", "--reason", "upgrade")
    assert status == 0, err
    assert out.startswith("prod/batch.kubernetes: paused until ") and "(upgrade)" in out
    # What the autoscaler's own store reads, in the pod: the same item.
    autoscaler_store = DynamoStateStore(dynamodb(moto_server), tables["state"])
    identity = PoolIdentity("prod", "batch", Scheduler.KUBERNETES)
    assert pause_status(autoscaler_store, identity, time.time()).paused
    assert cli(capsys, path, "enable", *pool)[1] == "prod/batch.kubernetes: enabled\n"
    assert not pause_status(autoscaler_store, identity, time.time()).paused


def test_an_operator_s_manage_takes_the_lease_the_pods_share(config, moto_server, world, capsys):
    path, tables = config
    assert cli(capsys, path, "setup")[0] == 0
    asg = world.asg("batch", desired=1)
    pool = ["--cluster", world.cluster, "--pool", "batch", "--scheduler", "kubernetes", "--yes"]
    store = DynamoStateStore(dynamodb(moto_server), tables["state"])
    identity = PoolIdentity(world.cluster, "batch", Scheduler.KUBERNETES)
    # An autoscaler in a pod holds the lease and hands nothing over (it is not running here):
    # manage, on another machine, sees it in the same table and changes nothing.
    pod = PoolLease(store, identity, Holder("clusterman-prod-batch-7d9f", 1, time.time()), ttl_seconds=60)
    assert pod.claim(time.time()).held
    status, out, err = cli(capsys, path, "manage", *pool, "--target-capacity", "3", "--wait", "1s")
    assert status == 1 and world.desired(asg) == 1
    assert "nothing changed: the pool's lease is held by pid 1 on clusterman-prod-batch-7d9f" in err, err
    pod.release()  # the pod stopped cleanly
    status, out, err = cli(capsys, path, "manage", *pool, "--target-capacity", "3", "--wait", "1s")
    assert status == 0, err
    assert f"{identity}: took the pool's lease" in out
    assert world.desired(asg) == 2  # 1 -> 3 asked, limited as the autoscaler is (max_weight_to_add: 1)
    assert store.get("autoscaler_lease", f"{world.cluster}.batch.kubernetes") is None  # released
