"""Find a pool's resource groups from its ``resource_groups`` config entries.

Each entry is searched on its own: an entry whose search fails is an error (the pool may have
groups that were not seen, so the autoscaler holds scale-down), and never hides the groups the
other entries find. A group whose tag value is not valid JSON names no pool: it is reported as
*mistagged* and holds nothing, since in an account shared by many pools one hand-tagged group
must not stop every pool from scaling down. A group found by two entries is kept once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field

from clusterman.cloud.asg import AutoScalingGroup
from clusterman.cloud.asg import find_groups
from clusterman.cloud.clients import AwsClients
from clusterman.cloud.ec2_instances import InstanceTypeCatalog
from clusterman.cloud.resource_group import DEFAULT_TAG_KEY
from clusterman.cloud.resource_group import CloudGroup
from clusterman.cloud.resource_group import ResourceGroupError
from clusterman.cloud.simulated_group import SimulatedCloud
from clusterman.cloud.spot_fleet import SpotFleetGroup
from clusterman.cloud.spot_fleet import find_fleets
from clusterman.core.config import ResourceGroupConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Discovery:
    groups: tuple[CloudGroup, ...]
    errors: tuple[ResourceGroupError, ...]  # searches that failed: some of the pool's groups may be missing
    mistagged: tuple[ResourceGroupError, ...] = ()  # groups with the tag key whose value names no pool


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
    launches: bool = False,
) -> Discovery:
    """``launches``: the groups read what they launch now, for drift (cloud/launches.py)."""
    groups: dict[tuple[str, str], CloudGroup] = {}
    errors: list[ResourceGroupError] = []
    mistagged: list[ResourceGroupError] = []
    catalog = InstanceTypeCatalog(lambda: aws.ec2) if aws else None
    for i, entry in enumerate(entries):
        label = f"resource_groups[{i}] ({entry.kind})"
        try:
            found = _search(entry, label, cluster, pool, aws, simulated, catalog, launches)
        except ResourceGroupError as e:
            errors.append(e if e.group == label else ResourceGroupError(label, str(e), e.ambiguous))
            continue
        errors += (ResourceGroupError(label, p) for p in found.problems)
        mistagged += (ResourceGroupError(label, p) for p in found.mistagged)
        for g in found.groups:
            groups.setdefault((g.kind, g.id), g)
    for error in (*errors, *mistagged):
        log.warning("%s", error)
    log.info("%s/%s: resource groups %s", cluster, pool, ", ".join(g.label for g in groups.values()) or "none")
    return Discovery(tuple(groups.values()), tuple(errors), tuple(mistagged))


@dataclass(frozen=True)
class _Found:
    groups: list[CloudGroup]
    mistagged: list[str]
    problems: list[str] = field(default_factory=list)


def _search(
    entry: ResourceGroupConfig,
    label: str,
    cluster: str,
    pool: str,
    aws: AwsClients | None,
    simulated: SimulatedCloud | None,
    catalog: InstanceTypeCatalog | None,
    launches: bool = False,
) -> _Found:
    tag_key = tag_key_of(entry)
    if entry.kind == "simulated":
        if simulated is None:
            raise ResourceGroupError(label, "simulated groups need a simulated cloud (the simulator or local stack)")
        sim_groups, mistagged = simulated.find(tag_key or DEFAULT_TAG_KEY, cluster, pool)
        return _Found(list(sim_groups), mistagged)
    if aws is None:
        raise ResourceGroupError(label, f"{entry.kind} groups need AWS clients (the aws block of clusterman.yaml)")
    make: Callable[[str], CloudGroup]
    problems: list[str] = []
    if entry.kind == "asg":
        if tag_key is None:
            raise ResourceGroupError(label, "an asg entry is found by tag only; s3 listings are for sfr")
        ids, mistagged = find_groups(aws.autoscaling, tag_key, cluster, pool)

        def make(name: str) -> CloudGroup:
            return AutoScalingGroup(name, aws, catalog, launches=launches)
    elif entry.kind == "sfr":
        s3 = (entry.s3_bucket, entry.s3_prefix or "") if entry.s3_bucket else None
        ids, mistagged, problems = find_fleets(aws.ec2, aws.s3 if s3 else None, tag_key, s3, cluster, pool)

        def make(fleet_id: str) -> CloudGroup:
            return SpotFleetGroup(fleet_id, aws, catalog, launches=launches)
    else:
        raise ResourceGroupError(label, f"unknown resource group kind {entry.kind!r}")
    return _Found([make(i) for i in ids], mistagged, problems)
