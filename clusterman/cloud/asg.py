"""An AWS Auto Scaling group as a resource group.

Capacity is the group's DesiredCapacity, in weight units: with a mixed-instances policy each
instance type counts for its override's ``WeightedCapacity`` (1 when not given), as AWS counts
it. Targets are set with ``SetDesiredCapacity(HonorCooldown=False)``, clamped to the group's
MinSize and MaxSize on our side. Chosen instances are terminated with
``TerminateInstanceInAutoScalingGroup(ShouldDecrementDesiredCapacity=True)``, so the group does
not replace them. Like Clusterman, we expect the group's instances to be protected from scale-in:
lowering the desired capacity must never let AWS pick instances to kill. Where some are not, a
target is never set below the weight of the group's members that are not leaving, so that only
the terminations of chosen instances lower it (as Escalator shrinks a group).

A group is stale (to be drained to 0) while AWS deletes it, or when tagged
``clusterman:is_stale: true``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import replace
from typing import Any
from typing import Final

from clusterman.cloud.aws_calls import cloud_call
from clusterman.cloud.aws_calls import write_absolute
from clusterman.cloud.clients import AwsClients
from clusterman.cloud.ec2_instances import STALE_TAG
from clusterman.cloud.ec2_instances import InstanceTypeCatalog
from clusterman.cloud.ec2_instances import describe_instances
from clusterman.cloud.ec2_instances import instance_from_ec2
from clusterman.cloud.ec2_instances import is_true
from clusterman.cloud.ec2_instances import tags_of
from clusterman.cloud.launches import UNKNOWN
from clusterman.cloud.launches import Launch
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
from clusterman.core.model import Offer
from clusterman.core.model import ResourceGroup
from clusterman.core.model import unit_size

log = logging.getLogger(__name__)

DELETING: Final = "Delete in progress"  # the group's Status while AWS deletes it
LEAVING_LIFECYCLE: Final = ("Terminating", "Terminated", "Detaching", "Detached")
STANDBY_LIFECYCLE: Final = ("Standby", "EnteringStandby")


def override_weights(raw: dict[str, Any]) -> dict[str, float]:
    """Instance type -> weight, from the mixed-instances policy's overrides."""
    policy = raw.get("MixedInstancesPolicy") or {}
    overrides = (policy.get("LaunchTemplate") or {}).get("Overrides") or ()
    return {o["InstanceType"]: float(o.get("WeightedCapacity") or 1) for o in overrides if o.get("InstanceType")}


def member_weight(member: dict[str, Any], weights: dict[str, float]) -> float:
    """AWS reports each member's weight; moto does not, so fall back to the policy's overrides."""
    return float(member.get("WeightedCapacity") or weights.get(member.get("InstanceType", ""), 1.0))


def member_state(member: dict[str, Any], ec2_state: InstanceState) -> InstanceState:
    """The instance's state, corrected by the group's lifecycle view (EC2 lags behind it)."""
    lifecycle = str(member.get("LifecycleState", ""))
    if lifecycle.startswith(LEAVING_LIFECYCLE) and ec2_state.live:
        return InstanceState.SHUTTING_DOWN
    if lifecycle in STANDBY_LIFECYCLE:
        return InstanceState.STANDBY
    return ec2_state


class AutoScalingGroup(CloudGroup):
    kind = "asg"

    def __init__(
        self,
        name: str,
        clients: AwsClients,
        instance_types: InstanceTypeCatalog | None = None,
        *,
        attempts: int = 3,
        sleep: Callable[[float], None] = time.sleep,
        launches: bool = False,
    ) -> None:
        """``launches``: read what the group launches now at each read, for drift (cloud/launches.py)."""
        super().__init__(name)
        self._clients = clients
        self._types = instance_types or InstanceTypeCatalog(lambda: clients.ec2)
        self._attempts = attempts
        self._sleep = sleep
        self._launches = launches

    def read(self) -> GroupState:
        raw = self._describe()
        instances = self._instances(raw)
        weights = override_weights(raw)
        launch = self._launch(raw) if self._launches or not weights else UNKNOWN  # no weights: its type sizes a unit
        offers = self._types.offers(self.label, list(weights.items()) or self._launched_type(launch))
        return GroupState(self._value(raw, instances, offers, launch if self._launches else UNKNOWN), instances)

    def set_target_capacity(self, new_target: float, dry_run: bool = False) -> TargetChange:
        raw = self._describe()
        previous = float(raw["DesiredCapacity"])
        if raw.get("Status") == DELETING:
            return TargetChange(self.id, previous, new_target, previous, dry_run, "being deleted: left alone")
        wanted, note = clamp_target(self.label, new_target, raw["MinSize"], raw["MaxSize"])
        if wanted < previous:
            staying, unprotected = self._unprotected_floor(raw)
            floor = int(min(previous, staying))
            if wanted < floor:  # AWS would choose which of them to kill
                note = (
                    f"not lowered below {floor} (asked {wanted}): {unprotected} of its instances are not protected "
                    "from scale-in, so AWS would choose which to kill; terminating chosen instances lowers it"
                )
                log.warning("%s: %s", self.label, note)
                wanted = floor
        if wanted == previous:
            return TargetChange(self.id, previous, new_target, previous, dry_run, note)
        if dry_run:
            log.info("dry run: %s would set desired capacity %g -> %d %s", self.label, previous, wanted, note)
            return TargetChange(self.id, previous, new_target, wanted, True, note)
        self._set_desired(wanted)
        log.info("%s: desired capacity %g -> %d %s", self.label, previous, wanted, note)
        return TargetChange(self.id, previous, new_target, wanted, False, note)

    def _unprotected_floor(self, raw: dict[str, Any]) -> tuple[int, int]:
        """(the weight of the members a scale-in may take: neither leaving nor in standby, how many
        of them are not protected from it); (0, 0) when all are."""
        lifecycles = (*LEAVING_LIFECYCLE, *STANDBY_LIFECYCLE)
        members = [m for m in raw.get("Instances") or () if not str(m.get("LifecycleState", "")).startswith(lifecycles)]
        unprotected = sum(1 for m in members if not m.get("ProtectedFromScaleIn"))
        if not unprotected:
            return 0, 0
        weights = override_weights(raw)
        return whole_units(sum(member_weight(m, weights) for m in members)), unprotected

    def terminate_instances(self, instance_ids: Iterable[str], dry_run: bool = False) -> Termination:
        raw = self._describe()
        desired = float(raw["DesiredCapacity"])
        plan = plan_termination(self, self._instances(raw), instance_ids, desired, raw["MinSize"])
        if dry_run or not plan.chosen:
            return plan.result(dry_run)
        lowering = {i.id for i in plan.lower}
        done: list[str] = []
        unsure: list[tuple[str, str]] = []
        failed: list[tuple[str, str]] = []
        for inst in plan.chosen:
            try:
                with cloud_call(self.label, f"TerminateInstanceInAutoScalingGroup({inst.id})"):
                    self._clients.autoscaling.terminate_instance_in_auto_scaling_group(
                        InstanceId=inst.id, ShouldDecrementDesiredCapacity=inst.id in lowering
                    )
                done.append(inst.id)
            except ResourceGroupError as e:
                (unsure if e.ambiguous else failed).append((inst.id, e.problem))

        try:
            after = self._describe()
        except ResourceGroupError as e:
            raise ResourceGroupError(self.label, f"terminated {', '.join(done) or 'nothing'}, then {e.problem}") from e
        # An ambiguous failure (e.g. throttled after AWS acted) is settled by what the group shows now.
        still_in = {m["InstanceId"] for m in after.get("Instances", []) if member_state(m, InstanceState.RUNNING).live}
        for instance_id, problem in unsure:
            if instance_id in still_in:
                failed.append((instance_id, problem))
            else:
                done.append(instance_id)

        result = plan.result(False, done, failed)
        expected = max(float(raw["MinSize"]), desired - result.lowered_by)
        if result.lowered_by and float(after["DesiredCapacity"]) != expected:
            # AWS lowers by the instance's weight; moto lowers by 1 per instance. Say what we mean.
            log.warning(
                "%s: desired capacity is %s after terminating weight %g from %g; setting %g",
                self.label,
                after["DesiredCapacity"],
                result.lowered_by,
                desired,
                expected,
            )
            self._set_desired(whole_units(expected))
        return settled(self.label, result)

    def _describe(self) -> dict[str, Any]:
        with cloud_call(self.label, "DescribeAutoScalingGroups"):
            found = self._clients.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[self.id])
        groups = found.get("AutoScalingGroups", [])
        if not groups:
            raise ResourceGroupError(self.label, "no such Auto Scaling group (deleted?)")
        group: dict[str, Any] = groups[0]
        return group

    def _set_desired(self, wanted: int) -> None:
        def write() -> None:
            with cloud_call(self.label, "SetDesiredCapacity"):
                self._clients.autoscaling.set_desired_capacity(
                    AutoScalingGroupName=self.id, DesiredCapacity=wanted, HonorCooldown=False
                )

        def read_back() -> float:
            return float(self._describe()["DesiredCapacity"])

        write_absolute(self.label, "SetDesiredCapacity", wanted, write, read_back, self._attempts, self._sleep)

    def _instances(self, raw: dict[str, Any]) -> tuple[Instance, ...]:
        members = raw.get("Instances") or []
        details = describe_instances(self._clients.ec2, self.label, [m["InstanceId"] for m in members])
        weights = override_weights(raw)
        instances = []
        for m in members:
            instance_type = m.get("InstanceType", "")
            weight = member_weight(m, weights)
            inst = instance_from_ec2(
                m["InstanceId"], details.get(m["InstanceId"]), weight, instance_type, m.get("AvailabilityZone", "")
            )
            state = member_state(m, inst.state)
            instances.append(replace(inst, state=state))
        return tuple(instances)

    def _value(
        self, raw: dict[str, Any], instances: tuple[Instance, ...], offers: tuple[Offer, ...], launch: Launch
    ) -> ResourceGroup:
        stale = raw.get("Status") == DELETING or is_true(tags_of(raw).get(STALE_TAG))
        return ResourceGroup(
            id=self.id,
            target_capacity=float(raw["DesiredCapacity"]),
            fulfilled_capacity=sum(i.weight for i in instances if i.state.live),
            min_capacity=float(raw["MinSize"]),
            max_capacity=float(raw["MaxSize"]),
            stale=stale,
            kind=self.kind,
            node_resources=unit_size(offers),
            offers=offers,
            template=launch.template,
            image_id=launch.image_id,
        )

    @staticmethod
    def _launched_type(launch: Launch) -> list[tuple[str, float]]:
        return [(launch.instance_type, 1.0)] if launch.instance_type else []

    def _launch(self, raw: dict[str, Any]) -> Launch:
        """What the group launches now: its template's version (an override naming a template of
        its own makes the group's unknown: drift is then not judged), or its launch configuration's
        image; and the instance type either names. UNKNOWN when it cannot be read."""
        policy = (raw.get("MixedInstancesPolicy") or {}).get("LaunchTemplate") or {}
        spec = raw.get("LaunchTemplate") or policy.get("LaunchTemplateSpecification")
        try:
            if spec:
                launch = of_template(self._clients.ec2, self.label, spec)
                if any(o.get("LaunchTemplateSpecification") for o in policy.get("Overrides") or ()):
                    return Launch(instance_type=launch.instance_type)
                return launch
            if raw.get("LaunchConfigurationName"):
                with cloud_call(self.label, "DescribeLaunchConfigurations"):
                    configs = self._clients.autoscaling.describe_launch_configurations(
                        LaunchConfigurationNames=[raw["LaunchConfigurationName"]]
                    )["LaunchConfigurations"]
                if configs:
                    return Launch("", str(configs[0].get("ImageId") or ""), str(configs[0].get("InstanceType") or ""))
        except ResourceGroupError as e:
            log.warning("what the group launches is unknown (the size of a capacity unit, drift): %s", e)
        return UNKNOWN


def find_groups(autoscaling: Any, tag_key: str, cluster: str, pool: str) -> tuple[list[str], list[str]]:
    """Names of the Auto Scaling groups whose ``tag_key`` tag names this pool, and mistagged groups.

    Clusterman's convention: the tag's value is JSON ``{"pool": ..., "paasta_cluster": ...}``. A
    group whose value is not such JSON belongs to no pool we can name: it is reported and skipped,
    and never hides the others.
    """
    names: list[str] = []
    mistagged: list[str] = []
    label = f"asg tag {tag_key}"
    with cloud_call(label, "DescribeTags"):
        pages = autoscaling.get_paginator("describe_tags").paginate(Filters=[{"Name": "key", "Values": [tag_key]}])
        tags = [t for page in pages for t in page.get("Tags", [])]
    for tag in tags:
        if tag.get("ResourceType", "auto-scaling-group") != "auto-scaling-group" or tag.get("Key") != tag_key:
            continue
        try:
            if tag_names_pool(tag.get("Value"), cluster, pool):
                names.append(tag["ResourceId"])
        except ValueError as e:
            mistagged.append(f"asg {tag['ResourceId']}: tag {tag_key}: {e}")
    return sorted(set(names)), mistagged
