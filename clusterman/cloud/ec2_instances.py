"""What EC2 says about a group's instances (launch time, state, tags) and about instance types.

Groups list their instance ids; EC2 fills in the rest. Instances are looked up with an
``instance-id`` *filter*, not ``InstanceIds``: AWS rejects the whole call when one id is not
visible yet (a launch seconds old), while a filter just leaves it out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Sequence
from typing import Any
from typing import Final

from clusterman.cloud.aws_calls import cloud_call
from clusterman.cloud.resource_group import Instance
from clusterman.cloud.resource_group import InstanceState
from clusterman.cloud.resource_group import ResourceGroupError
from clusterman.core.model import NO_TIME
from clusterman.core.model import Offer
from clusterman.core.resources import Resources

log = logging.getLogger(__name__)

STALE_TAG: Final = "clusterman:is_stale"  # Clusterman marks instances to be replaced with it
# EC2's own tags on an instance launched from a launch template: which, and the version resolved
TEMPLATE_ID_TAG: Final = "aws:ec2launchtemplate:id"
TEMPLATE_VERSION_TAG: Final = "aws:ec2launchtemplate:version"
MB_PER_MIB: Final = 1.048576
MB_PER_GB: Final = 1000.0
_FILTER_CHUNK = 100


def unix_seconds(value: Any) -> float:
    """Unix seconds from a boto3 datetime, or NO_TIME when absent."""
    return float(value.timestamp()) if value is not None and hasattr(value, "timestamp") else NO_TIME


def tags_of(raw: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in raw.get("Tags") or () if "Key" in t}


def is_true(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("true", "1", "yes")


def describe_instances(ec2: Any, label: str, instance_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """EC2's description of each instance that is visible, by id."""
    found: dict[str, dict[str, Any]] = {}
    paginator = ec2.get_paginator("describe_instances")
    for start in range(0, len(instance_ids), _FILTER_CHUNK):
        chunk = list(instance_ids[start : start + _FILTER_CHUNK])
        with cloud_call(label, "DescribeInstances"):
            for page in paginator.paginate(Filters=[{"Name": "instance-id", "Values": chunk}]):
                for reservation in page.get("Reservations", []):
                    for raw in reservation.get("Instances", []):
                        found[raw["InstanceId"]] = raw
    return found


def instance_from_ec2(
    instance_id: str,
    raw: dict[str, Any] | None,
    weight: float,
    instance_type: str = "",
    availability_zone: str = "",
) -> Instance:
    """An ``Instance`` from EC2's description; ``raw`` None means EC2 does not show it yet."""
    if raw is None:
        return Instance(instance_id, instance_type, availability_zone, weight, NO_TIME, InstanceState.UNKNOWN)
    tags = tags_of(raw)
    template_id, version = tags.get(TEMPLATE_ID_TAG, ""), tags.get(TEMPLATE_VERSION_TAG, "")
    return Instance(
        id=instance_id,
        instance_type=raw.get("InstanceType") or instance_type,
        availability_zone=(raw.get("Placement") or {}).get("AvailabilityZone") or availability_zone,
        weight=weight,
        launched_at=unix_seconds(raw.get("LaunchTime")),
        state=InstanceState.parse((raw.get("State") or {}).get("Name", "")),
        spot=raw.get("InstanceLifecycle") == "spot",
        stale=is_true(tags.get(STALE_TAG)),
        private_ip=raw.get("PrivateIpAddress") or "",
        private_dns=raw.get("PrivateDnsName") or "",
        template=f"{template_id}:{version}" if template_id and version else "",
        image_id=raw.get("ImageId") or "",
    )


def resources_of_type(raw: dict[str, Any]) -> Resources:
    """The hardware of one instance type, in clusterman's units (cpus, MB, MB, devices)."""
    storage = raw.get("InstanceStorageInfo") or {}
    gpus = (raw.get("GpuInfo") or {}).get("Gpus") or ()
    return Resources(
        cpus=float((raw.get("VCpuInfo") or {}).get("DefaultVCpus", 0)),
        mem=float((raw.get("MemoryInfo") or {}).get("SizeInMiB", 0)) * MB_PER_MIB,
        disk=float(storage.get("TotalSizeInGB", 0)) * MB_PER_GB,
        gpus=float(sum(g.get("Count", 0) for g in gpus)),
    )


class InstanceTypeCatalog:
    """Instance types' hardware from DescribeInstanceTypes, asked once per type and remembered."""

    def __init__(self, ec2: Callable[[], Any]) -> None:
        self._ec2 = ec2  # a factory: no client is built until a type is looked up
        self._known: dict[str, Resources] = {}

    def resources(self, label: str, types: Iterable[str]) -> dict[str, Resources]:
        wanted = sorted({t for t in types if t})
        missing = [t for t in wanted if t not in self._known]
        for start in range(0, len(missing), 100):
            with cloud_call(label, "DescribeInstanceTypes"):
                pages = self._ec2().get_paginator("describe_instance_types")
                for page in pages.paginate(InstanceTypes=missing[start : start + 100]):
                    for raw in page.get("InstanceTypes", []):
                        self._known[raw["InstanceType"]] = resources_of_type(raw)
        return {t: self._known[t] for t in wanted if t in self._known}

    def offers(self, label: str, options: Iterable[tuple[str, float]]) -> tuple[Offer, ...]:
        """The group's instance types with their weights and hardware (all zero when the types cannot
        be looked up: the group still works, only their size is not known)."""
        options = [(t, w) for t, w in options if t and w > 0]
        try:
            known = self.resources(label, (t for t, _ in options))
        except ResourceGroupError as e:
            log.warning("size of the group's instance types unknown: %s", e)
            known = {}
        return tuple(Offer(t, w, known.get(t, Resources())) for t, w in options)
