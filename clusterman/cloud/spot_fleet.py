"""An AWS Spot Fleet request as a resource group.

Capacity is the fleet's TargetCapacity, in the weight units of its launch specifications
(``WeightedCapacity``, 1 when not given). Every ``ModifySpotFleetRequest`` says
``ExcessCapacityTerminationPolicy=noTermination``: a fleet never terminates instances by itself
when its target drops; Clusterman chooses what to terminate, then terminates exactly that with EC2
``TerminateInstances`` after lowering the target by its weight.

A fleet that is cancelled, failed or past its ``ValidUntil`` is stale: it launches nothing more,
its target counts as 0, and its remaining instances are drained. Fleets with nothing left to
drain (``cancelled``, ``cancelled_terminating``) are not loaded at all, as in Clusterman.

Fleets are found by tag, or in Clusterman's S3 listing: JSON objects under ``s3://bucket/prefix/``
shaped ``{"cluster_autoscaling_resources": {"aws_spot_fleet_request.<name>": {"id": "sfr-...",
"pool": "<pool>"}}}``.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from typing import Final

from clusterman.cloud.aws_calls import cloud_call
from clusterman.cloud.aws_calls import write_absolute
from clusterman.cloud.clients import AwsClients
from clusterman.cloud.ec2_instances import InstanceTypeCatalog
from clusterman.cloud.ec2_instances import describe_instances
from clusterman.cloud.ec2_instances import instance_from_ec2
from clusterman.cloud.ec2_instances import unix_seconds
from clusterman.cloud.launches import UNKNOWN
from clusterman.cloud.launches import Launch
from clusterman.cloud.launches import of_images
from clusterman.cloud.launches import of_template
from clusterman.cloud.resource_group import CloudGroup
from clusterman.cloud.resource_group import GroupState
from clusterman.cloud.resource_group import Instance
from clusterman.cloud.resource_group import InstanceState
from clusterman.cloud.resource_group import ResourceGroupError
from clusterman.cloud.resource_group import TargetChange
from clusterman.cloud.resource_group import Termination
from clusterman.cloud.resource_group import clamp_target
from clusterman.cloud.resource_group import plan_termination
from clusterman.cloud.resource_group import settled
from clusterman.cloud.resource_group import tag_names_pool
from clusterman.cloud.resource_group import whole_units
from clusterman.core.model import NO_TIME
from clusterman.core.model import Offer
from clusterman.core.model import ResourceGroup
from clusterman.core.model import unit_size

log = logging.getLogger(__name__)

# AWS's spelling. moto compares this value case-sensitively against "Default" (and treats a
# missing value as "Default", i.e. terminate), so we always send it.
NO_TERMINATION: Final = "noTermination"
GONE_STATES: Final = frozenset({"cancelled", "cancelled_terminating"})
# "expired" is our name for a fleet past its ValidUntil that AWS has not cancelled yet.
STALE_STATES: Final = frozenset({"cancelled", "cancelled_running", "cancelled_terminating", "failed", "expired"})
S3_RESOURCE_PREFIX: Final = "aws_spot_fleet_request"
_TERMINATE_CHUNK = 500


@dataclass(frozen=True)
class LaunchSpec:
    """Where and what a fleet launches, and what each such instance weighs."""

    instance_type: str
    weight: float
    subnets: frozenset[str] = frozenset()
    availability_zone: str = ""


def launch_specs(raw: dict[str, Any]) -> list[LaunchSpec]:
    """The fleet's launch specifications and launch-template overrides, with their weights."""
    config = raw.get("SpotFleetRequestConfig") or {}
    specs = []
    for spec in config.get("LaunchSpecifications") or ():
        specs.append(_spec(spec, (spec.get("Placement") or {}).get("AvailabilityZone", "")))
    for template in config.get("LaunchTemplateConfigs") or ():
        for override in template.get("Overrides") or ():
            specs.append(_spec(override, override.get("AvailabilityZone", "")))
    return specs


def _spec(raw: dict[str, Any], availability_zone: str) -> LaunchSpec:
    subnets = frozenset(s.strip() for s in str(raw.get("SubnetId") or "").split(",") if s.strip())
    return LaunchSpec(raw.get("InstanceType", ""), float(raw.get("WeightedCapacity") or 1), subnets, availability_zone)


def weight_of(specs: list[LaunchSpec], instance_type: str, subnet: str, availability_zone: str) -> float:
    """The weight of the launch specification an instance came from (1 when none matches)."""
    candidates = [s for s in specs if s.instance_type == instance_type]
    for narrower in (
        [s for s in candidates if subnet and subnet in s.subnets],
        [s for s in candidates if availability_zone and s.availability_zone == availability_zone],
    ):
        if narrower:
            candidates = narrower
            break
    return candidates[0].weight if candidates else 1.0


def fleet_tags(raw: dict[str, Any]) -> dict[str, str]:
    """The fleet's own tags, else (as Clusterman reads them) its first launch specification's."""
    tags: list[dict[str, str]] = raw.get("Tags") or []
    if not tags:
        specs = (raw.get("SpotFleetRequestConfig") or {}).get("LaunchSpecifications") or []
        try:
            tags = specs[0]["TagSpecifications"][0]["Tags"]
        except (IndexError, KeyError, TypeError):
            tags = []
    return {t["Key"]: t["Value"] for t in tags if "Key" in t}


class SpotFleetGroup(CloudGroup):
    kind = "sfr"

    def __init__(
        self,
        fleet_id: str,
        clients: AwsClients,
        instance_types: InstanceTypeCatalog | None = None,
        *,
        attempts: int = 3,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        launches: bool = False,
    ) -> None:
        """``launches``: read what the fleet launches now at each read, for drift (cloud/launches.py)."""
        super().__init__(fleet_id)
        self._clients = clients
        self._types = instance_types or InstanceTypeCatalog(lambda: clients.ec2)
        self._attempts = attempts
        self._sleep = sleep
        self._clock = clock
        self._launches = launches

    def read(self) -> GroupState:
        raw = self._describe()
        instances = self._instances(raw)
        offers = self._types.offers(self.label, ((s.instance_type, s.weight) for s in launch_specs(raw)))
        launch = self._launch(raw) if self._launches else UNKNOWN
        return GroupState(self._value(raw, instances, offers, launch), instances)

    def _launch(self, raw: dict[str, Any]) -> Launch:
        """Its one launch template's version now (several: unknown), else its specifications' image."""
        config = raw.get("SpotFleetRequestConfig") or {}
        templates = config.get("LaunchTemplateConfigs") or []
        try:
            if len(templates) == 1 and templates[0].get("LaunchTemplateSpecification"):
                return of_template(self._clients.ec2, self.label, templates[0]["LaunchTemplateSpecification"])
        except ResourceGroupError as e:
            log.warning("what the fleet launches is unknown (drift): %s", e)
            return UNKNOWN
        if templates:
            return UNKNOWN
        return of_images(str(spec.get("ImageId") or "") for spec in config.get("LaunchSpecifications") or ())

    def set_target_capacity(self, new_target: float, dry_run: bool = False) -> TargetChange:
        raw = self._describe()
        stale = self._stale(raw)
        previous = 0.0 if stale else float(raw["SpotFleetRequestConfig"]["TargetCapacity"])
        if stale:
            note = f"fleet is {self._status(raw)}: its target cannot change"
            return TargetChange(self.id, previous, new_target, previous, dry_run, note)
        wanted, note = clamp_target(self.label, new_target, 0, math.inf)
        if wanted == previous:
            return TargetChange(self.id, previous, new_target, previous, dry_run, note)
        if dry_run:
            log.info("dry run: %s would set target capacity %g -> %d %s", self.label, previous, wanted, note)
            return TargetChange(self.id, previous, new_target, wanted, True, note)
        self._set_target(wanted)
        log.info("%s: target capacity %g -> %d %s", self.label, previous, wanted, note)
        return TargetChange(self.id, previous, new_target, wanted, False, note)

    def terminate_instances(self, instance_ids: Iterable[str], dry_run: bool = False) -> Termination:
        raw = self._describe()
        target = float(raw["SpotFleetRequestConfig"]["TargetCapacity"])
        # A stale fleet launches nothing more: terminating drains it and leaves its target alone.
        plan = plan_termination(self, self._instances(raw), instance_ids, target, 0, drain=self._stale(raw))
        if dry_run or not plan.chosen:
            return plan.result(dry_run)
        if plan.lowered_by:
            # Target first: with noTermination the fleet keeps everything until we terminate it.
            self._set_target(whole_units(target - plan.lowered_by))
        done, failed = self._terminate([i.id for i in plan.chosen])
        return settled(self.label, plan.result(False, done, failed))

    def _terminate(self, ids: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
        done: list[str] = []
        failed: list[tuple[str, str]] = []
        for start in range(0, len(ids), _TERMINATE_CHUNK):
            chunk = ids[start : start + _TERMINATE_CHUNK]
            try:
                with cloud_call(self.label, "TerminateInstances"):
                    response = self._clients.ec2.terminate_instances(InstanceIds=chunk)
                gone = {t["InstanceId"] for t in response.get("TerminatingInstances", [])}
            except ResourceGroupError as e:
                if not e.ambiguous:
                    failed.extend((i, e.problem) for i in chunk)
                    continue
                # Maybe EC2 acted before the error: whatever is on its way out is done.
                details = describe_instances(self._clients.ec2, self.label, chunk)
                gone = {i for i, raw in details.items() if not InstanceState.parse(raw["State"]["Name"]).live}
                failed.extend((i, e.problem) for i in chunk if i not in gone)
            done.extend(i for i in chunk if i in gone)
        return done, failed

    def _describe(self) -> dict[str, Any]:
        with cloud_call(self.label, "DescribeSpotFleetRequests"):
            found = self._clients.ec2.describe_spot_fleet_requests(SpotFleetRequestIds=[self.id])
        configs = found.get("SpotFleetRequestConfigs", [])
        if not configs:
            raise ResourceGroupError(self.label, "no such Spot Fleet request (deleted?)")
        config: dict[str, Any] = configs[0]
        return config

    def _set_target(self, wanted: int) -> None:
        def write() -> None:
            with cloud_call(self.label, "ModifySpotFleetRequest"):
                response = self._clients.ec2.modify_spot_fleet_request(
                    SpotFleetRequestId=self.id, TargetCapacity=wanted, ExcessCapacityTerminationPolicy=NO_TERMINATION
                )
            if not response.get("Return", False):
                raise ResourceGroupError(self.label, f"ModifySpotFleetRequest to {wanted} was refused (Return false)")

        def read_back() -> float:
            return float(self._describe()["SpotFleetRequestConfig"]["TargetCapacity"])

        write_absolute(self.label, "ModifySpotFleetRequest", wanted, write, read_back, self._attempts, self._sleep)

    def _instances(self, raw: dict[str, Any]) -> tuple[Instance, ...]:
        with cloud_call(self.label, "DescribeSpotFleetInstances"):
            paginator = self._clients.ec2.get_paginator("describe_spot_fleet_instances")
            pages = paginator.paginate(SpotFleetRequestId=self.id)
            active = [a for page in pages for a in page.get("ActiveInstances", [])]
        details = describe_instances(self._clients.ec2, self.label, [a["InstanceId"] for a in active])
        specs = launch_specs(raw)
        instances = []
        for a in active:
            detail = details.get(a["InstanceId"])
            instance_type = (detail or a).get("InstanceType", "")
            subnet = (detail or {}).get("SubnetId", "")
            zone = ((detail or {}).get("Placement") or {}).get("AvailabilityZone", "")
            weight = weight_of(specs, instance_type, subnet, zone)
            instances.append(instance_from_ec2(a["InstanceId"], detail, weight, instance_type, zone))
        return tuple(instances)

    def _status(self, raw: dict[str, Any]) -> str:
        valid_until = unix_seconds(raw.get("SpotFleetRequestConfig", {}).get("ValidUntil"))
        if valid_until != NO_TIME and valid_until <= self._clock():
            return "expired"
        return str(raw.get("SpotFleetRequestState", ""))

    def _stale(self, raw: dict[str, Any]) -> bool:
        return self._status(raw) in STALE_STATES

    def _value(
        self, raw: dict[str, Any], instances: tuple[Instance, ...], offers: tuple[Offer, ...], launch: Launch
    ) -> ResourceGroup:
        stale = self._stale(raw)
        return ResourceGroup(
            id=self.id,
            target_capacity=0.0 if stale else float(raw["SpotFleetRequestConfig"]["TargetCapacity"]),
            fulfilled_capacity=sum(i.weight for i in instances if i.state.live),
            min_capacity=0.0,
            stale=stale,
            kind=self.kind,
            node_resources=unit_size(offers),
            offers=offers,
            template=launch.template,
            image_id=launch.image_id,
        )


def fleets_in_s3(s3: Any, bucket: str, prefix: str, pool: str) -> tuple[list[str], list[str]]:
    """Fleet ids that Clusterman's S3 listing assigns to ``pool``, and problems met (per object)."""
    ids: list[str] = []
    problems: list[str] = []
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    label = f"sfr s3://{bucket}/{prefix}"
    with cloud_call(label, "ListObjectsV2"):
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    for key in keys:
        where = f"s3://{bucket}/{key}"
        with cloud_call(f"sfr {where}", "GetObject"):
            body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        try:
            resources = json.loads(body)["cluster_autoscaling_resources"]
            for name, resource in resources.items():
                if name.startswith(S3_RESOURCE_PREFIX) and resource["pool"] == pool:
                    ids.append(str(resource["id"]))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            problems.append(
                f'{where}: expected JSON {{"cluster_autoscaling_resources": {{name: {{id, pool}}}}}}: '
                f"{type(e).__name__}: {e}"
            )
    return ids, problems


def find_fleets(
    ec2: Any,
    s3: Any,
    tag_key: str | None,
    s3_location: tuple[str, str] | None,
    cluster: str,
    pool: str,
) -> tuple[list[str], list[str], list[str]]:
    """Ids of this pool's Spot Fleet requests (by tag and/or S3 listing), fleets whose tag names no
    pool (reported, skipped), and problems with the S3 listing (which may hide this pool's fleets)."""
    mistagged: list[str] = []
    problems: list[str] = []
    wanted: set[str] = set()
    with cloud_call(f"sfr tag {tag_key}" if tag_key else "sfr", "DescribeSpotFleetRequests"):
        pages = ec2.get_paginator("describe_spot_fleet_requests").paginate()
        fleets = {f["SpotFleetRequestId"]: f for page in pages for f in page.get("SpotFleetRequestConfigs", [])}
    if tag_key:
        for fleet_id, raw in fleets.items():
            try:
                if tag_names_pool(fleet_tags(raw).get(tag_key), cluster, pool):
                    wanted.add(fleet_id)
            except ValueError as e:
                mistagged.append(f"sfr {fleet_id}: tag {tag_key}: {e}")
    if s3_location:
        listed, s3_problems = fleets_in_s3(s3, *s3_location, pool)
        problems += s3_problems
        for fleet_id in listed:
            if fleet_id not in fleets:
                log.info("sfr %s is listed in s3://%s/%s but no longer exists; ignored", fleet_id, *s3_location)
            wanted.add(fleet_id)
    live = [f for f in wanted if f in fleets and fleets[f].get("SpotFleetRequestState") not in GONE_STATES]
    return sorted(live), mistagged, problems
