"""Build Auto Scaling groups and Spot Fleets in moto's server, each test in its own cluster name."""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Iterable
from typing import Any

import boto3

from clusterman.aws.session import AwsSettings
from clusterman.cloud.clients import AwsClients

REGION = "us-west-2"
ZONE = "us-west-2a"
TAG_KEY = "puppet:role::paasta"  # the key Yelp's pool configs name
FLEET_ROLE = "arn:aws:iam::123456789012:role/fleet"


@functools.cache
def image_id(url: str) -> str:
    """An AMI from moto's built-in list (moto refuses images it does not know)."""
    ec2 = boto3.client("ec2", endpoint_url=url, region_name=REGION)
    images = ec2.describe_images(Owners=["amazon"], Filters=[{"Name": "name", "Values": ["amzn2-ami-hvm-*"]}])
    return str(sorted(i["ImageId"] for i in images["Images"])[0])


def pool_tag(cluster: str, pool: str) -> str:
    return json.dumps({"pool": pool, "paasta_cluster": cluster})


def clients(url: str, retries: int = 2) -> AwsClients:
    """Clients whose botocore makes 1 + ``retries`` attempts per call (botocore's max_attempts counts retries)."""
    return AwsClients(AwsSettings(REGION, endpoint_url=url), retries={"max_attempts": retries, "mode": "standard"})


class World:
    """One test's corner of moto: a unique cluster name, a VPC with one subnet, setup clients."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.cluster = f"itest-{uuid.uuid4().hex[:8]}"
        self.ec2 = boto3.client("ec2", endpoint_url=url, region_name=REGION)
        self.autoscaling = boto3.client("autoscaling", endpoint_url=url, region_name=REGION)
        self.s3 = boto3.client("s3", endpoint_url=url, region_name=REGION)
        self.image = image_id(url)
        vpc = self.ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        subnet = self.ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/20", AvailabilityZone=ZONE)
        self.subnet = subnet["Subnet"]["SubnetId"]

    def unique(self, prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:8]}"

    def asg(
        self,
        pool: str,
        desired: int,
        *,
        min_size: int = 0,
        max_size: int = 10,
        instance_type: str = "m5.large",
        weights: Iterable[tuple[str, int]] = (),
        extra_tags: dict[str, str] | None = None,
        protected: bool = True,
        template_version: str = "$Latest",
    ) -> str:
        """An ASG tagged for ``pool``, its instances protected from scale-in (Clusterman expects it)
        unless not ``protected``: then moto, like AWS, terminates instances of its choosing when the
        desired capacity goes below them."""
        name = self.unique(f"{pool}-asg")
        template = {"LaunchTemplateName": name, "Version": template_version}
        self.ec2.create_launch_template(
            LaunchTemplateName=name, LaunchTemplateData={"ImageId": self.image, "InstanceType": instance_type}
        )
        tags = {TAG_KEY: pool_tag(self.cluster, pool), **(extra_tags or {})}
        launch: dict[str, Any] = {"LaunchTemplate": template}
        overrides = [{"InstanceType": t, "WeightedCapacity": str(w)} for t, w in weights]
        if overrides:
            launch = {
                "MixedInstancesPolicy": {
                    "LaunchTemplate": {"LaunchTemplateSpecification": template, "Overrides": overrides}
                }
            }
        self.autoscaling.create_auto_scaling_group(
            AutoScalingGroupName=name,
            MinSize=min_size,
            MaxSize=max_size,
            DesiredCapacity=desired,
            VPCZoneIdentifier=self.subnet,
            NewInstancesProtectedFromScaleIn=protected,
            Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": False} for k, v in tags.items()],
            **launch,
        )
        return name

    def fleet(
        self,
        pool: str | None,
        target: int,
        specs: Iterable[tuple[str, float]] = (("m5.large", 1.0),),
        *,
        tag_on_launch_spec: bool = False,
    ) -> str:
        """A Spot Fleet request; tagged for ``pool`` on the fleet (or, Yelp style, on its launch spec)."""
        tags = [{"Key": TAG_KEY, "Value": pool_tag(self.cluster, pool)}] if pool else []
        launch_specs: list[dict[str, Any]] = [
            {"ImageId": self.image, "InstanceType": t, "SubnetId": self.subnet, "WeightedCapacity": w} for t, w in specs
        ]
        config: dict[str, Any] = {
            "TargetCapacity": target,
            "IamFleetRole": FLEET_ROLE,
            "AllocationStrategy": "diversified",
            "LaunchSpecifications": launch_specs,
        }
        if tags and tag_on_launch_spec:
            for spec in launch_specs:
                spec["TagSpecifications"] = [{"ResourceType": "instance", "Tags": tags}]
        elif tags:
            config["TagSpecifications"] = [{"ResourceType": "spot-fleet-request", "Tags": tags}]
        return str(self.ec2.request_spot_fleet(SpotFleetRequestConfig=config)["SpotFleetRequestId"])

    def asg_members(self, name: str) -> list[str]:
        group = self.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]
        return sorted(i["InstanceId"] for i in group["Instances"])

    def desired(self, name: str) -> int:
        group = self.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]
        return int(group["DesiredCapacity"])

    def fleet_members(self, fleet_id: str) -> list[str]:
        active = self.ec2.describe_spot_fleet_instances(SpotFleetRequestId=fleet_id)["ActiveInstances"]
        return sorted(i["InstanceId"] for i in active if self.ec2_state(i["InstanceId"]) in ("pending", "running"))

    def fleet_target(self, fleet_id: str) -> int:
        config = self.ec2.describe_spot_fleet_requests(SpotFleetRequestIds=[fleet_id])["SpotFleetRequestConfigs"][0]
        return int(config["SpotFleetRequestConfig"]["TargetCapacity"])

    def ec2_state(self, instance_id: str) -> str:
        found = self.ec2.describe_instances(Filters=[{"Name": "instance-id", "Values": [instance_id]}])
        return str(found["Reservations"][0]["Instances"][0]["State"]["Name"])
