"""Spot Fleet requests in moto's server, driven through the resource-group interface over HTTP."""

from __future__ import annotations

import json

import pytest

from clusterman.cloud.discovery import discover_groups
from clusterman.cloud.kinds import Clouds
from clusterman.cloud.resource_group import ResourceGroupError
from clusterman.cloud.resource_group import read_groups
from clusterman.cloud.spot_fleet import SpotFleetGroup
from clusterman.core.config import ResourceGroupConfig
from clusterman.core.resources import Resources
from itests.aws_proxy import Fault
from itests.aws_proxy import FaultyProxy
from itests.aws_world import REGION
from itests.aws_world import TAG_KEY
from itests.aws_world import World
from itests.aws_world import clients


@pytest.fixture
def world(moto_server):
    return World(moto_server.url)


def test_fleet_follows_its_targets_and_terminates_exactly_the_chosen(world, moto_server):
    fleet_id = world.fleet("web", target=4, specs=[("m5.large", 2.0)])
    found = discover_groups(
        world.cluster, "web", [ResourceGroupConfig("sfr", tag=TAG_KEY)], Clouds(aws=clients(world.url))
    )
    assert [g.id for g in found.groups] == [fleet_id] and found.errors == ()
    (group,) = found.groups

    state = group.read()
    assert (state.group.kind, state.group.target_capacity, state.group.fulfilled_capacity) == ("sfr", 4, 4)
    assert (state.group.min_capacity, state.group.stale) == (0, False)
    assert state.group.node_resources == Resources(cpus=1, mem=4096 * 1.048576)  # m5.large over weight 2
    assert [(o.instance_type, o.weight, o.resources.cpus) for o in state.group.offers] == [("m5.large", 2.0, 2)]
    assert {(i.weight, i.spot, i.availability_zone) for i in state.instances} == {(2.0, True, "us-west-2a")}
    assert sorted(i.id for i in state.instances) == world.fleet_members(fleet_id)

    with FaultyProxy(moto_server.url) as proxy:
        group = SpotFleetGroup(fleet_id, clients(proxy.url))
        assert group.set_target_capacity(8).target == 8
        assert len(world.fleet_members(fleet_id)) == 4
        # The fleet never terminates by itself: we always send noTermination.
        assert group.set_target_capacity(6).target == 6
        assert len(world.fleet_members(fleet_id)) == 4
        assert {c["ExcessCapacityTerminationPolicy"] for c in proxy.calls("ModifySpotFleetRequest")} == {
            "noTermination"
        }

    members = world.fleet_members(fleet_id)
    chosen = [members[0], members[2]]
    result = group.terminate_instances([*chosen, members[0]])
    assert sorted(result.terminated) == sorted(chosen) and result.lowered_by == 4
    assert world.fleet_members(fleet_id) == sorted(set(members) - set(chosen))
    assert {world.ec2_state(i) for i in chosen} == {"terminated"}
    assert world.fleet_target(fleet_id) == 2
    state = group.read()
    assert (state.group.target_capacity, state.group.fulfilled_capacity) == (2, 4)


def test_dry_run_changes_nothing(world):
    fleet_id = world.fleet("web", target=3)
    group = SpotFleetGroup(fleet_id, clients(world.url))
    before = world.fleet_members(fleet_id)
    assert group.set_target_capacity(9, dry_run=True).target == 9
    result = group.terminate_instances(before[:1], dry_run=True)
    assert result.dry_run and result.terminated == tuple(before[:1]) and result.lowered_by == 1
    assert world.fleet_members(fleet_id) == before and world.fleet_target(fleet_id) == 3


def test_fleets_are_found_by_tag_and_in_clusterman_s3_listing(world):
    by_fleet_tag = world.fleet("web", target=1)
    by_spec_tag = world.fleet("web", target=1, tag_on_launch_spec=True)  # where Clusterman reads tags
    listed = world.fleet(None, target=1)
    listed_other_pool = world.fleet(None, target=1)
    cancelled_running = world.fleet("web", target=1)
    gone = world.fleet(None, target=1)
    world.ec2.cancel_spot_fleet_requests(SpotFleetRequestIds=[cancelled_running], TerminateInstances=False)
    world.ec2.cancel_spot_fleet_requests(SpotFleetRequestIds=[gone], TerminateInstances=True)

    bucket = world.unique("fleets")
    world.s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})

    def put(key, resources):
        world.s3.put_object(Bucket=bucket, Key=key, Body=json.dumps({"cluster_autoscaling_resources": resources}))

    put("us-west-2/web.json", {"aws_spot_fleet_request.web": {"id": listed, "pool": "web"}})
    put("us-west-2/old.json", {"aws_spot_fleet_request.old": {"id": gone, "pool": "web"}})
    put("us-west-2/db.json", {"aws_spot_fleet_request.db": {"id": listed_other_pool, "pool": "db"}})
    put("us-west-2/dns.json", {"aws_route53_record.x": {"id": "not-a-fleet", "pool": "web"}})
    world.s3.put_object(Bucket=bucket, Key="us-west-2/broken.json", Body=b"{not json")
    world.s3.put_object(Bucket=bucket, Key="elsewhere/web.json", Body=b"{}")

    entries = [
        ResourceGroupConfig("sfr", tag=TAG_KEY),
        ResourceGroupConfig("sfr", s3_bucket=bucket, s3_prefix="us-west-2"),
    ]
    found = discover_groups(world.cluster, "web", entries, Clouds(aws=clients(world.url)))
    assert sorted(g.id for g in found.groups) == sorted([by_fleet_tag, by_spec_tag, listed, cancelled_running])
    assert len(found.errors) == 1 and f"s3://{bucket}/us-west-2/broken.json" in str(found.errors[0])

    readings = read_groups(found.groups)
    stale = readings.states[cancelled_running].group
    assert stale.stale and stale.target_capacity == 0 and stale.fulfilled_capacity == 1


def test_a_cancelled_fleet_is_drained_without_touching_its_target(world, moto_server):
    fleet_id = world.fleet("web", target=2)
    world.ec2.cancel_spot_fleet_requests(SpotFleetRequestIds=[fleet_id], TerminateInstances=False)
    with FaultyProxy(moto_server.url) as proxy:
        group = SpotFleetGroup(fleet_id, clients(proxy.url))
        change = group.set_target_capacity(5)
        assert not change.changed and "cancelled_running" in change.note
        members = world.fleet_members(fleet_id)
        result = group.terminate_instances(members)
        assert sorted(result.terminated) == members and result.lowered_by == 0
        assert proxy.calls("ModifySpotFleetRequest") == []
    assert world.fleet_members(fleet_id) == []


def test_moto_compares_the_termination_policy_case_sensitively(world):
    """moto difference: only "Default" terminates excess instances; AWS documents "default" (and
    "noTermination") and treats a missing policy as "default". We always send noTermination."""
    spelled_as_aws = world.fleet("web", target=3)
    world.ec2.modify_spot_fleet_request(
        SpotFleetRequestId=spelled_as_aws, TargetCapacity=1, ExcessCapacityTerminationPolicy="default"
    )
    assert len(world.fleet_members(spelled_as_aws)) == 3  # AWS would terminate 2 here

    capitalised = world.fleet("web", target=3)
    world.ec2.modify_spot_fleet_request(
        SpotFleetRequestId=capitalised, TargetCapacity=1, ExcessCapacityTerminationPolicy="Default"
    )
    assert len(world.fleet_members(capitalised)) == 1

    omitted = world.fleet("web", target=3)
    world.ec2.modify_spot_fleet_request(SpotFleetRequestId=omitted, TargetCapacity=1)
    assert len(world.fleet_members(omitted)) == 1  # a missing policy terminates, in moto as in AWS

    ours = world.fleet("web", target=3)
    SpotFleetGroup(ours, clients(world.url)).set_target_capacity(1)
    assert len(world.fleet_members(ours)) == 3 and world.fleet_target(ours) == 1


def test_a_broken_fleet_gives_an_error_and_the_others_carry_on(world, moto_server):
    deleted, denied, good = (world.fleet("web", target=1) for _ in range(3))
    world.ec2.cancel_spot_fleet_requests(SpotFleetRequestIds=[deleted], TerminateInstances=True)
    with FaultyProxy(moto_server.url) as proxy:
        proxy.add(Fault(contains=denied, code="UnauthorizedOperation", status=403, times=None, message="denied"))
        groups = [SpotFleetGroup(f, clients(proxy.url)) for f in (deleted, denied, good)]
        readings = read_groups(groups)
        assert list(readings.states) == [good]
        assert "no such Spot Fleet request" in str(readings.errors[0]) and deleted in str(readings.errors[0])
        assert str(readings.errors[1]) == (
            f"sfr {denied}: DescribeSpotFleetRequests failed: UnauthorizedOperation: denied"
        )
        with pytest.raises(ResourceGroupError, match=denied):
            groups[1].set_target_capacity(4)
        assert groups[2].set_target_capacity(2).target == 2
    assert len(world.fleet_members(good)) == 2 and world.fleet_target(denied) == 1
