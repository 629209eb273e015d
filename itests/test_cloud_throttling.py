"""Throttling injected at the HTTP level never makes a change apply twice, nor get lost.

A proxy in front of moto answers chosen requests with AWS's ``Throttling`` error, either before
they reach moto or after (the change happened; the client cannot know). botocore's retries run
for real, with clients allowed 2 attempts per call, so the tests also reach our own re-read-and-retry.
"""

from __future__ import annotations

import pytest

from clusterman.aws.session import AwsSettings
from clusterman.aws.session import CallBudgetExceeded
from clusterman.aws.session import client
from clusterman.cloud.asg import AutoScalingGroup
from clusterman.cloud.clients import AwsClients
from clusterman.cloud.resource_group import ResourceGroupError
from clusterman.cloud.spot_fleet import SpotFleetGroup
from itests.aws_proxy import Fault
from itests.aws_proxy import FaultyProxy
from itests.aws_world import World
from itests.aws_world import clients


def no_sleep(seconds: float) -> None:
    pass


@pytest.fixture
def world(moto_server):
    return World(moto_server.url)


@pytest.fixture
def proxy(moto_server):
    with FaultyProxy(moto_server.url) as p:
        yield p


def test_throttled_after_applying_is_read_back_not_sent_again(world, proxy):
    name = world.asg("web", desired=2)
    group = AutoScalingGroup(name, clients(proxy.url, retries=1), sleep=no_sleep)
    proxy.add(Fault(action="SetDesiredCapacity", after=True, times=2))  # every attempt botocore makes

    change = group.set_target_capacity(5)

    assert change.target == 5
    sent = proxy.calls("SetDesiredCapacity")
    assert [c["DesiredCapacity"] for c in sent] == ["5", "5"]  # botocore's two attempts, both absolute
    assert world.desired(name) == 5 and len(world.asg_members(name)) == 5  # not 8


def test_throttled_before_reaching_aws_is_sent_again_after_reading_back(world, proxy):
    name = world.asg("web", desired=2)
    group = AutoScalingGroup(name, clients(proxy.url, retries=1), sleep=no_sleep)
    proxy.add(Fault(action="SetDesiredCapacity", times=3))  # botocore gives up after 2; we read, then send again

    assert group.set_target_capacity(4).target == 4

    assert len(proxy.calls("SetDesiredCapacity", reached_moto=False)) == 3
    assert [c["DesiredCapacity"] for c in proxy.calls("SetDesiredCapacity")] == ["4"]
    assert world.desired(name) == 4 and len(world.asg_members(name)) == 4


def test_throttling_that_never_ends_is_an_error_naming_the_group(world, proxy):
    name = world.asg("web", desired=2)
    group = AutoScalingGroup(name, clients(proxy.url, retries=1), attempts=2, sleep=no_sleep)
    proxy.add(Fault(action="SetDesiredCapacity", times=None))
    with pytest.raises(ResourceGroupError, match=rf"asg {name}: SetDesiredCapacity to 6 did not take.*Throttling"):
        group.set_target_capacity(6)
    assert world.desired(name) == 2


def test_fleet_target_throttled_after_applying_launches_once(world, proxy):
    fleet_id = world.fleet("web", target=2, specs=[("m5.large", 2.0)])
    group = SpotFleetGroup(fleet_id, clients(proxy.url, retries=1), sleep=no_sleep)
    proxy.add(Fault(action="ModifySpotFleetRequest", after=True, times=2))

    assert group.set_target_capacity(6).target == 6

    assert [c["TargetCapacity"] for c in proxy.calls("ModifySpotFleetRequest")] == ["6", "6"]  # then read back
    assert world.fleet_target(fleet_id) == 6 and len(world.fleet_members(fleet_id)) == 3  # 3 × weight 2


def test_termination_throttled_after_applying_lowers_the_target_once(world, proxy):
    name = world.asg("web", desired=4)
    group = AutoScalingGroup(name, clients(proxy.url, retries=1), sleep=no_sleep)
    doomed = world.asg_members(name)[0]
    proxy.add(Fault(action="TerminateInstanceInAutoScalingGroup", after=True, times=1))

    result = group.terminate_instances([doomed])

    # botocore's retry reached moto again and failed there (the instance had left the group);
    # reading the group back settled it: terminated once, the target lowered once.
    assert result.terminated == (doomed,) and result.lowered_by == 1 and result.failed == ()
    assert world.desired(name) == 3 and doomed not in world.asg_members(name)
    assert len(world.asg_members(name)) == 3


def test_fleet_termination_throttled_after_applying_is_settled_by_ec2(world, proxy):
    fleet_id = world.fleet("web", target=3)
    group = SpotFleetGroup(fleet_id, clients(proxy.url, retries=1), sleep=no_sleep)
    doomed = world.fleet_members(fleet_id)[:2]
    proxy.add(Fault(action="TerminateInstances", after=True, times=1))
    proxy.add(Fault(action="ModifySpotFleetRequest", after=True, times=1))

    result = group.terminate_instances(doomed)

    assert sorted(result.terminated) == doomed and result.lowered_by == 2 and result.failed == ()
    assert world.fleet_target(fleet_id) == 1
    assert [c["TargetCapacity"] for c in proxy.calls("ModifySpotFleetRequest")] == ["1", "1"]  # botocore's retry
    assert {world.ec2_state(i) for i in doomed} == {"terminated"}


def test_a_call_throttled_until_its_budget_runs_out_says_throttled(proxy):
    """AWS answered every attempt with Throttling: the error says so, not that AWS did not answer
    (what it said before, and what an endpoint that hangs still gets)."""
    settings = AwsSettings("us-west-2", endpoint_url=proxy.url)
    autoscaling = client(settings, "autoscaling", call_budget_seconds=1.0, retries={"max_attempts": 30})
    proxy.add(Fault(action="DescribeAutoScalingGroups", times=None))
    with pytest.raises(CallBudgetExceeded, match=r"throttled \(Throttling\) on every attempt within the call budget"):
        autoscaling.describe_auto_scaling_groups()


def test_a_termination_that_landed_and_was_answered_past_the_budget_is_read_back(world, proxy):
    """Each attempt reaches moto and its answer comes after the attempt's timeout (AWS slow to
    answer): the call ends past its budget (``CallBudgetExceeded``), yet the first attempt landed.
    The group is read back: the instance is terminated, not failed."""
    name = world.asg("web", desired=3)
    budgeted = AwsClients(AwsSettings("us-west-2", endpoint_url=proxy.url), timeout_seconds=3)
    group = AutoScalingGroup(name, budgeted, sleep=no_sleep)
    doomed = world.asg_members(name)[0]
    proxy.add(Fault(action="TerminateInstanceInAutoScalingGroup", after=True, slow_seconds=4, times=None))

    result = group.terminate_instances([doomed])

    assert world.ec2_state(doomed) in ("shutting-down", "terminated") and doomed not in world.asg_members(name)
    assert result.terminated == (doomed,) and result.failed == (), result
    assert world.desired(name) == 2


def test_a_target_that_landed_and_was_answered_past_the_budget_is_read_back(world, proxy):
    name = world.asg("web", desired=2)
    budgeted = AwsClients(AwsSettings("us-west-2", endpoint_url=proxy.url), timeout_seconds=3)
    group = AutoScalingGroup(name, budgeted, sleep=no_sleep)
    proxy.add(Fault(action="SetDesiredCapacity", after=True, slow_seconds=4, times=None))

    change = group.set_target_capacity(4)  # before: "SetDesiredCapacity failed: CallBudgetExceeded"

    assert change.target == 4 and world.desired(name) == 4
