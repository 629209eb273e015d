"""Spot Fleet pieces that need no cloud: weights, tags, staleness (the rest is in itests)."""

from datetime import UTC
from datetime import datetime
from datetime import timedelta

from clusterman.aws.session import AwsSettings
from clusterman.cloud.clients import AwsClients
from clusterman.cloud.spot_fleet import SpotFleetGroup
from clusterman.cloud.spot_fleet import fleet_tags
from clusterman.cloud.spot_fleet import launch_specs
from clusterman.cloud.spot_fleet import weight_of


def test_fleet_weights_come_from_the_matching_launch_specification():
    raw = {
        "SpotFleetRequestConfig": {
            "LaunchSpecifications": [
                {"InstanceType": "m5.large", "WeightedCapacity": 1, "SubnetId": "subnet-a, subnet-b"},
                {"InstanceType": "m5.large", "WeightedCapacity": 3, "SubnetId": "subnet-c"},
            ],
            "LaunchTemplateConfigs": [
                {"Overrides": [{"InstanceType": "c5.xlarge", "WeightedCapacity": 2, "AvailabilityZone": "us-west-2b"}]}
            ],
        }
    }
    specs = launch_specs(raw)
    assert weight_of(specs, "m5.large", "subnet-b", "") == 1
    assert weight_of(specs, "m5.large", "subnet-c", "") == 3
    assert weight_of(specs, "c5.xlarge", "subnet-z", "us-west-2b") == 2
    assert weight_of(specs, "r5.large", "subnet-a", "") == 1  # no specification: weight 1


def test_a_fleet_past_its_valid_until_is_stale():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    group = SpotFleetGroup("sfr-1", AwsClients(AwsSettings("us-west-2")), clock=now.timestamp)
    raw = {"SpotFleetRequestState": "active", "SpotFleetRequestConfig": {"TargetCapacity": 3}}
    assert not group._stale(raw)
    raw["SpotFleetRequestConfig"]["ValidUntil"] = now - timedelta(seconds=1)
    assert group._stale(raw) and group._status(raw) == "expired"
    raw["SpotFleetRequestConfig"]["ValidUntil"] = now + timedelta(hours=1)
    assert not group._stale(raw)
    assert group._stale({**raw, "SpotFleetRequestState": "cancelled_running"})


def test_fleet_tags_are_its_own_else_its_first_launch_specifications():
    spec_tags = [{"Key": "k", "Value": "from-spec"}]
    spec = {"TagSpecifications": [{"ResourceType": "instance", "Tags": spec_tags}]}
    raw = {"SpotFleetRequestConfig": {"LaunchSpecifications": [spec]}}
    assert fleet_tags(raw) == {"k": "from-spec"}
    assert fleet_tags({**raw, "Tags": [{"Key": "k", "Value": "own"}]}) == {"k": "own"}
    assert fleet_tags({"SpotFleetRequestConfig": {}}) == {}
