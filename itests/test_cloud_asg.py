"""Auto Scaling groups in moto's server, driven through the resource-group interface over HTTP."""

from __future__ import annotations

import pytest

from clusterman.cloud.asg import AutoScalingGroup
from clusterman.cloud.discovery import discover_groups
from clusterman.cloud.kinds import Clouds
from clusterman.cloud.resource_group import InstanceState
from clusterman.cloud.resource_group import ResourceGroupError
from clusterman.cloud.resource_group import read_groups
from clusterman.core.config import ResourceGroupConfig
from clusterman.core.resources import Resources
from itests.aws_proxy import Fault
from itests.aws_proxy import FaultyProxy
from itests.aws_world import TAG_KEY
from itests.aws_world import World
from itests.aws_world import clients

ASG_ENTRY = ResourceGroupConfig("asg", tag=TAG_KEY)


@pytest.fixture
def world(moto_server):
    return World(moto_server.url)


def test_asg_is_found_by_tag_and_follows_its_targets(world):
    mine = world.asg("web", desired=2)
    world.asg("db", desired=1)  # another pool of the same cluster
    world.asg("web", desired=0, extra_tags={TAG_KEY: "not json"})  # reported, never hides the others

    found = discover_groups(world.cluster, "web", [ASG_ENTRY], Clouds(aws=clients(world.url)))
    assert [g.id for g in found.groups] == [mine]
    assert found.errors == () and len(found.mistagged) == 1 and "expected JSON like" in str(found.mistagged[0])
    (group,) = found.groups

    state = group.read()
    assert (state.group.kind, state.group.target_capacity, state.group.fulfilled_capacity) == ("asg", 2, 2)
    assert (state.group.min_capacity, state.group.max_capacity, state.group.stale) == (0, 10, False)
    assert state.group.node_resources == Resources(cpus=2, mem=8192 * 1.048576)  # m5.large, from the template
    assert sorted(i.id for i in state.instances) == world.asg_members(mine)
    assert {(i.instance_type, i.availability_zone, i.state, i.weight) for i in state.instances} == {
        ("m5.large", "us-west-2a", InstanceState.RUNNING, 1.0)
    }
    assert all(i.launched_at > 0 and i.private_ip for i in state.instances)

    change = group.set_target_capacity(5)
    assert (change.previous, change.target, change.dry_run) == (2, 5, False)
    assert len(world.asg_members(mine)) == 5 and world.desired(mine) == 5

    # Lowering the target terminates nothing: the instances are protected from scale-in.
    assert group.set_target_capacity(4).target == 4
    assert len(world.asg_members(mine)) == 5

    members = world.asg_members(mine)
    chosen = [members[1], members[3]]
    result = group.terminate_instances([*chosen, "i-0123456789abcdef0"])
    assert sorted(result.terminated) == sorted(chosen) and result.lowered_by == 2
    assert result.skipped == (("i-0123456789abcdef0", f"not an instance of asg {mine}"),)
    assert world.asg_members(mine) == sorted(set(members) - set(chosen))
    assert {world.ec2_state(i) for i in chosen} == {"terminated"}
    assert {world.ec2_state(i) for i in world.asg_members(mine)} == {"running"}
    assert world.desired(mine) == 2


def test_instances_not_protected_from_scale_in_are_only_ever_terminated_by_choice(world):
    """AWS (and moto) kill instances of their choosing when the desired capacity drops below the
    unprotected ones: the target never goes below them; terminating chosen ones lowers it."""
    name = world.asg("web", desired=3, protected=False)
    group = AutoScalingGroup(name, clients(world.url))
    members = world.asg_members(name)

    change = group.set_target_capacity(1)
    assert (change.previous, change.target) == (3, 3)
    assert "3 of its instances are not protected from scale-in" in change.note, change.note
    assert world.desired(name) == 3 and all(world.ec2_state(m) == "running" for m in members)

    assert group.terminate_instances([members[2]]).lowered_by == 1
    assert group.set_target_capacity(1).target == 2  # the two that stay
    assert world.desired(name) == 2 and [world.ec2_state(m) for m in members[:2]] == ["running", "running"]
    assert group.set_target_capacity(4).target == 4  # raising is never held back


def test_dry_run_changes_nothing(world):
    name = world.asg("web", desired=3)
    group = AutoScalingGroup(name, clients(world.url))
    before = world.asg_members(name)

    change = group.set_target_capacity(7, dry_run=True)
    assert (change.previous, change.target, change.dry_run) == (3, 7, True)
    result = group.terminate_instances(before[:2], dry_run=True)
    assert result.dry_run and sorted(result.terminated) == before[:2] and result.lowered_by == 2

    assert world.asg_members(name) == before and world.desired(name) == 3
    assert {world.ec2_state(i) for i in before} == {"running"}


def test_terminating_at_the_minimum_replaces_the_instance(world):
    """AWS refuses to decrement below MinSize; moto does not check. We never ask it to."""
    name = world.asg("web", desired=2, min_size=2)
    group = AutoScalingGroup(name, clients(world.url))
    doomed = world.asg_members(name)[0]
    result = group.terminate_instances([doomed])
    assert result.terminated == (doomed,) and result.replaced == (doomed,) and result.lowered_by == 0
    assert world.desired(name) == 2
    members = world.asg_members(name)
    assert len(members) == 2 and doomed not in members


def test_moto_ignores_max_size_so_we_clamp(world):
    """moto difference: SetDesiredCapacity above MaxSize is accepted (AWS answers ValidationError)."""
    name = world.asg("web", desired=1, max_size=3)
    world.autoscaling.set_desired_capacity(AutoScalingGroupName=name, DesiredCapacity=6, HonorCooldown=False)
    assert world.desired(name) == 6 and len(world.asg_members(name)) == 6  # moto went past MaxSize

    other = world.asg("web", desired=1, max_size=3)
    change = AutoScalingGroup(other, clients(world.url)).set_target_capacity(6)
    assert change.target == 3 and "maximum 3" in change.note
    assert world.desired(other) == 3 and len(world.asg_members(other)) == 3


def test_moto_ignores_mixed_instance_weights_so_we_count_them(world):
    """moto differences with a mixed-instances policy: members carry no WeightedCapacity, and
    terminating with decrement lowers DesiredCapacity by 1 instead of the instance's weight."""
    name = world.asg("web", desired=4, weights=[("m5.large", 2), ("c5.xlarge", 4)])
    raw = world.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]
    assert len(raw["Instances"]) == 2 and not any("WeightedCapacity" in i for i in raw["Instances"])

    group = AutoScalingGroup(name, clients(world.url))
    state = group.read()
    assert {i.weight for i in state.instances} == {2.0}  # from the overrides
    assert (state.group.target_capacity, state.group.fulfilled_capacity) == (4, 4)
    assert state.group.node_resources == Resources(cpus=1, mem=2048 * 1.048576)  # c5.xlarge: 8192 MiB / 4
    # the types it launches, for the plan's smaller-instance line (docs/consolidation.md)
    assert [(o.instance_type, o.weight, o.resources.cpus) for o in state.group.offers] == [
        ("m5.large", 2.0, 2), ("c5.xlarge", 4.0, 4)
    ]  # fmt: skip

    world.autoscaling.terminate_instance_in_auto_scaling_group(
        InstanceId=world.asg_members(name)[0], ShouldDecrementDesiredCapacity=True
    )
    assert world.desired(name) == 3  # moto: minus 1; AWS: minus the weight, 2

    result = group.terminate_instances([world.asg_members(name)[0]])
    assert result.lowered_by == 2
    assert world.desired(name) == 1  # 3 - 2: we set what AWS would have


def test_the_stale_tag_marks_the_group_stale(world):
    name = world.asg("web", desired=1, extra_tags={"clusterman:is_stale": "true"})
    assert AutoScalingGroup(name, clients(world.url)).read().group.stale


def test_a_broken_group_gives_an_error_and_the_others_carry_on(world, moto_server):
    deleted, denied, good = (world.asg("web", desired=1) for _ in range(3))
    with FaultyProxy(moto_server.url) as proxy:
        aws = clients(proxy.url)
        proxy.add(Fault(contains=denied, code="AccessDenied", status=403, times=None, message="not for you"))
        world.autoscaling.delete_auto_scaling_group(AutoScalingGroupName=deleted, ForceDelete=True)
        groups = [AutoScalingGroup(n, aws) for n in (deleted, denied, good)]

        readings = read_groups(groups)
        assert list(readings.states) == [good]
        assert [e.group for e in readings.errors] == [f"asg {deleted}", f"asg {denied}"]
        assert "no such Auto Scaling group" in str(readings.errors[0])
        assert "AccessDenied: not for you" in str(readings.errors[1])

        for broken in groups[:2]:
            with pytest.raises(ResourceGroupError, match=broken.id):
                broken.set_target_capacity(3)
            with pytest.raises(ResourceGroupError, match=broken.id):
                broken.terminate_instances(["i-0123456789abcdef0"])
        assert groups[2].set_target_capacity(3).target == 3
        assert len(world.asg_members(good)) == 3
