"""Find a pool's resource groups from its ``resource_groups`` config entries.

Each entry is searched on its own: an entry whose search fails, or a group whose tag is not valid
JSON, is reported as a ``ResourceGroupError`` and never hides the groups the other entries find.
A group found by two entries is kept once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import dataclass

from clusterman.cloud.asg import AutoScalingGroup
from clusterman.cloud.asg import find_groups
from clusterman.cloud.clients import AwsClients
from clusterman.cloud.ec2_instances import InstanceTypeCatalog
from clusterman.cloud.resource_group import DEFAULT_TAG_KEY
from clusterman.cloud.resource_group import CloudGroup
from clusterman.cloud.resource_group import ResourceGroupError
from clusterman.cloud.simulated import SimulatedCloud
from clusterman.cloud.spot_fleet import SpotFleetGroup
from clusterman.cloud.spot_fleet import find_fleets
from clusterman.config.model import ResourceGroupConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Discovery:
    groups: tuple[CloudGroup, ...]
    errors: tuple[ResourceGroupError, ...]


def tag_key_of(entry: ResourceGroupConfig) -> str | None:
    """The tag key an entry searches by: its own, the default when it names no S3 listing either."""
    if entry.tag:
        return entry.tag
    return None if entry.s3_bucket else DEFAULT_TAG_KEY


def discover_groups(
    cluster: str,
    pool: str,
    entries: Iterable[ResourceGroupConfig],
    *,
    aws: AwsClients | None = None,
    simulated: SimulatedCloud | None = None,
) -> Discovery:
    groups: dict[tuple[str, str], CloudGroup] = {}
    errors: list[ResourceGroupError] = []
    catalog = InstanceTypeCatalog(lambda: aws.ec2) if aws else None
    for i, entry in enumerate(entries):
        label = f"resource_groups[{i}] ({entry.kind})"
        try:
            found, problems = _search(entry, label, cluster, pool, aws, simulated, catalog)
        except ResourceGroupError as e:
            errors.append(e if e.group == label else ResourceGroupError(label, str(e), e.ambiguous))
            continue
        errors += (ResourceGroupError(label, p) for p in problems)
        for g in found:
            groups.setdefault((g.kind, g.id), g)
    for error in errors:
        log.warning("%s", error)
    log.info("%s/%s: resource groups %s", cluster, pool, ", ".join(g.label for g in groups.values()) or "none")
    return Discovery(tuple(groups.values()), tuple(errors))


def _search(
    entry: ResourceGroupConfig,
    label: str,
    cluster: str,
    pool: str,
    aws: AwsClients | None,
    simulated: SimulatedCloud | None,
    catalog: InstanceTypeCatalog | None,
) -> tuple[list[CloudGroup], list[str]]:
    tag_key = tag_key_of(entry)
    if entry.kind == "simulated":
        if simulated is None:
            raise ResourceGroupError(label, "simulated groups need a simulated cloud (the simulator or local stack)")
        sim_groups, problems = simulated.find(tag_key or DEFAULT_TAG_KEY, cluster, pool)
        return list(sim_groups), problems
    if aws is None:
        raise ResourceGroupError(label, f"{entry.kind} groups need AWS clients (the aws block of clusterman.yaml)")
    make: Callable[[str], CloudGroup]
    if entry.kind == "asg":
        if tag_key is None:
            raise ResourceGroupError(label, "an asg entry is found by tag only; s3 listings are for sfr")
        ids, problems = find_groups(aws.autoscaling, tag_key, cluster, pool)

        def make(name: str) -> CloudGroup:
            return AutoScalingGroup(name, aws, catalog)
    elif entry.kind == "sfr":
        s3 = (entry.s3_bucket, entry.s3_prefix or "") if entry.s3_bucket else None
        ids, problems = find_fleets(aws.ec2, aws.s3 if s3 else None, tag_key, s3, cluster, pool)

        def make(fleet_id: str) -> CloudGroup:
            return SpotFleetGroup(fleet_id, aws, catalog)
    else:
        raise ResourceGroupError(label, f"unknown resource group kind {entry.kind!r}")
    return [make(i) for i in ids], problems
