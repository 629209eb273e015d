"""Drift read from moto's server: each instance's launch template version and image (EC2's
``aws:ec2launchtemplate:*`` tags, ``ImageId``) against what its group launches now
(``DescribeLaunchTemplateVersions`` of the group's template, resolved), for an Auto Scaling group
and a Spot Fleet, through the real adapters and boto3 over HTTP."""

from __future__ import annotations

from dataclasses import replace

import boto3
import pytest

from clusterman.cloud.asg import AutoScalingGroup
from clusterman.cloud.groups_view import cloud_view_of
from clusterman.cloud.resource_group import read_groups
from clusterman.cloud.spot_fleet import SpotFleetGroup
from clusterman.core.cloud_view import join
from clusterman.core.model import Node
from clusterman.core.model import NodeState
from clusterman.core.model import PoolSnapshot
from clusterman.core.resources import Resources
from clusterman.decision.drift import drifted
from itests.aws_world import FLEET_ROLE
from itests.aws_world import REGION
from itests.aws_world import World
from itests.aws_world import clients


@pytest.fixture
def world(moto_server):
    return World(moto_server.url)


def second_image(url: str, first: str) -> str:
    ec2 = boto3.client("ec2", endpoint_url=url, region_name=REGION)
    images = ec2.describe_images(Owners=["amazon"], Filters=[{"Name": "name", "Values": ["amzn2-ami-hvm-*"]}])
    return next(i for i in sorted(i["ImageId"] for i in images["Images"]) if i != first)


def pool_of(group, world) -> PoolSnapshot:
    """Every instance of ``group`` joined as a ready node, as the run's snapshot joins them."""
    readings = read_groups([group])
    view = cloud_view_of(readings)
    nodes = [Node(f"node-{i.instance_id}", NodeState.READY, Resources(cpus=2), instance_id=i.instance_id)
             for i in view.instances]  # fmt: skip
    return PoolSnapshot(0.0, join(nodes, view), view.groups)


def test_an_asg_s_instances_from_an_older_template_version_or_image_have_drifted(world):
    name = world.asg("web", desired=2, template_version="$Default")
    (template,) = world.ec2.describe_launch_templates(LaunchTemplateNames=[name])["LaunchTemplates"]
    lt = template["LaunchTemplateId"]
    group = AutoScalingGroup(name, clients(world.url), launches=True)
    before = pool_of(group, world)
    assert before.groups[0].template == f"{lt}:1" and before.groups[0].image_id == world.image
    assert {n.template for n in before.nodes} == {f"{lt}:1"} and drifted(before) == {}

    newer = second_image(world.url, world.image)
    world.ec2.create_launch_template_version(
        LaunchTemplateId=lt, SourceVersion="1", LaunchTemplateData={"ImageId": newer}
    )
    world.ec2.modify_launch_template(LaunchTemplateId=lt, DefaultVersion="2")
    old = world.asg_members(name)
    world.autoscaling.set_desired_capacity(AutoScalingGroupName=name, DesiredCapacity=3)
    (new,) = set(world.asg_members(name)) - set(old)
    after = pool_of(group, world)
    assert (after.groups[0].template, after.groups[0].image_id) == (f"{lt}:2", newer)
    assert drifted(after) == {f"node-{i}": f"launched from {lt}:1, its group launches {lt}:2" for i in old}
    assert f"node-{new}" not in drifted(after)

    # a group that does not look for drift reads no template: nothing drifts, no extra call
    plain = pool_of(AutoScalingGroup(name, clients(world.url), launches=False), world)
    assert plain.groups[0].template == plain.groups[0].image_id == "" and drifted(plain) == {}


def test_a_fleet_s_instances_on_an_older_image_have_drifted(world):
    """moto's server launches a fleet's LaunchTemplateConfigs but describes the fleet without them
    (as launch specifications): the description is completed here as AWS returns it, and the rest
    (the template's versions, the instances) is moto's."""
    name = world.unique("fleet-lt")
    lt = world.ec2.create_launch_template(
        LaunchTemplateName=name, LaunchTemplateData={"ImageId": world.image, "InstanceType": "m5.large"}
    )["LaunchTemplate"]["LaunchTemplateId"]
    templates = [
        {
            "LaunchTemplateSpecification": {"LaunchTemplateId": lt, "Version": "$Latest"},
            "Overrides": [{"InstanceType": "m5.large", "SubnetId": world.subnet, "WeightedCapacity": 1.0}],
        }
    ]
    config = {"TargetCapacity": 2, "IamFleetRole": FLEET_ROLE, "AllocationStrategy": "diversified"}
    config["LaunchTemplateConfigs"] = templates
    fleet = world.ec2.request_spot_fleet(SpotFleetRequestConfig=config)["SpotFleetRequestId"]
    group = SpotFleetGroup(fleet, clients(world.url), launches=True)
    newer = second_image(world.url, world.image)
    world.ec2.create_launch_template_version(
        LaunchTemplateId=lt, SourceVersion="1", LaunchTemplateData={"ImageId": newer}
    )

    raw = group._describe()
    raw["SpotFleetRequestConfig"] = {**raw["SpotFleetRequestConfig"], "LaunchTemplateConfigs": templates}
    raw["SpotFleetRequestConfig"].pop("LaunchSpecifications")
    launch = group._launch(raw)
    assert (launch.template, launch.image_id) == (
        f"{lt}:2",
        newer,
    )  # $Latest, resolved by DescribeLaunchTemplateVersions
    pool = pool_of(group, world)
    pool = replace(pool, groups=(replace(pool.groups[0], template=launch.template, image_id=launch.image_id),))
    assert set(drifted(pool)) == {f"node-{i}" for i in world.fleet_members(fleet)}
    assert set(drifted(pool).values()) == {f"runs image {world.image}, its group launches {newer}"}

    # launch specifications (what moto describes): their one image; the fleet's instances run it
    assert group._launch(group._describe()).image_id == world.image and drifted(pool_of(group, world)) == {}
