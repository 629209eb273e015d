"""The kinds of resource group as one table, ``KINDS``: for each, how a pool's groups are found,
which cloud they live in, and the adapter that acts on them.

A new kind is its module (a ``CloudGroup``, and the search that lists a pool's groups) and one row
here; ``tests/test_extension_points.py`` checks that every ``GroupKind`` has its row. A kind of a
cloud not yet reached also adds that cloud to ``Clouds``, and the wiring connects to it
(``wiring/build.py: clouds_for``). docs/architecture.md, "Adding a scheduler or a cloud kind".
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field
from dataclasses import fields
from typing import Any

from clusterman.cloud.asg import AutoScalingGroup
from clusterman.cloud.asg import find_groups
from clusterman.cloud.clients import AwsClients
from clusterman.cloud.ec2_instances import InstanceTypeCatalog
from clusterman.cloud.resource_group import DEFAULT_TAG_KEY
from clusterman.cloud.resource_group import CloudGroup
from clusterman.cloud.resource_group import ResourceGroupError
from clusterman.cloud.simulated_group import SimulatedCloud
from clusterman.cloud.simulated_group import SimulatedGroup
from clusterman.cloud.spot_fleet import SpotFleetGroup
from clusterman.cloud.spot_fleet import find_fleets
from clusterman.core.config import GroupKind
from clusterman.core.config import ResourceGroupConfig


@dataclass(frozen=True)
class Clouds:
    """The clouds a program reaches (None: not from this program); their clients connect on first use."""

    aws: AwsClients | None = None
    simulated: SimulatedCloud | None = None  # the simulator's or the local stack's groups, in this process


@dataclass(frozen=True)
class Search:
    """One pass over a pool's ``resource_groups``: which pool, with which clouds, whether the groups
    read what they launch now (``launches``, for drift: cloud/launches.py), and what the entries
    share in one pass (EC2's instance types, asked once for every AWS entry)."""

    cluster: str
    pool: str
    clouds: Clouds
    launches: bool = False
    catalog: InstanceTypeCatalog | None = None

    @classmethod
    def start(cls, cluster: str, pool: str, clouds: Clouds, launches: bool = False) -> Search:
        aws = clouds.aws
        catalog = InstanceTypeCatalog(lambda: aws.ec2) if aws is not None else None
        return cls(cluster, pool, clouds, launches, catalog)


@dataclass(frozen=True)
class Found:
    """One entry's groups, the groups with its tag key whose value names no pool, and what went wrong."""

    groups: list[CloudGroup]
    mistagged: list[str]
    problems: list[str] = field(default_factory=list)


# (the row's cloud, the entry, the pass, the entry's label for errors) -> what the entry finds
Finder = Callable[[Any, ResourceGroupConfig, Search, str], Found]


@dataclass(frozen=True)
class KindRow:
    kind: GroupKind
    adapter: type[CloudGroup]  # acts on one group of the kind (its ``kind`` is the row's)
    cloud: str  # the field of ``Clouds`` its groups are found and read with
    needs: str  # that cloud in words, for the error when a program does not reach it
    find: Finder
    # its groups live in the process that simulates them, which builds them from the pool's
    # ``simulation`` block: no program connects to them (the metrics collector reads no cloud for them)
    in_process: bool = False


def tag_key_of(entry: ResourceGroupConfig) -> str | None:
    """The tag key an entry searches by: its own, the default when it names no S3 listing either."""
    if entry.tag:
        return entry.tag
    return None if entry.s3_bucket else DEFAULT_TAG_KEY


def _auto_scaling_groups(aws: AwsClients, entry: ResourceGroupConfig, search: Search, label: str) -> Found:
    tag_key = tag_key_of(entry)
    if tag_key is None:
        raise ResourceGroupError(label, "an asg entry is found by tag only; s3 listings are for sfr")
    names, mistagged = find_groups(aws.autoscaling, tag_key, search.cluster, search.pool)
    return Found([AutoScalingGroup(name, aws, search.catalog, launches=search.launches) for name in names], mistagged)


def _spot_fleets(aws: AwsClients, entry: ResourceGroupConfig, search: Search, label: str) -> Found:
    s3 = (entry.s3_bucket, entry.s3_prefix or "") if entry.s3_bucket else None
    listing = aws.s3 if s3 else None
    ids, mistagged, problems = find_fleets(aws.ec2, listing, tag_key_of(entry), s3, search.cluster, search.pool)
    return Found(
        [SpotFleetGroup(fleet_id, aws, search.catalog, launches=search.launches) for fleet_id in ids],
        mistagged,
        problems,
    )


def _simulated_groups(cloud: SimulatedCloud, entry: ResourceGroupConfig, search: Search, label: str) -> Found:
    groups, mistagged = cloud.find(tag_key_of(entry) or DEFAULT_TAG_KEY, search.cluster, search.pool)
    return Found(list(groups), mistagged)


AWS = "AWS clients (the aws block of clusterman.yaml)"
KINDS: dict[GroupKind, KindRow] = {
    row.kind: row
    for row in (
        KindRow(GroupKind.ASG, AutoScalingGroup, "aws", AWS, _auto_scaling_groups),
        KindRow(GroupKind.SFR, SpotFleetGroup, "aws", AWS, _spot_fleets),
        KindRow(
            GroupKind.SIMULATED,
            SimulatedGroup,
            "simulated",
            "a simulated cloud (the simulator or local stack)",
            _simulated_groups,
            in_process=True,
        ),
    )
}
CLOUDS = frozenset(f.name for f in fields(Clouds))


def kind_row(kind: GroupKind) -> KindRow:
    """The row of ``kind``; a kind with none is a bug this says plainly (the test keeps it from shipping)."""
    row = KINDS.get(kind)
    if row is None:
        raise LookupError(f"no row for the resource group kind {kind!r} in cloud/kinds.py: KINDS")
    return row


def clouds_needed(entries: Iterable[ResourceGroupConfig]) -> frozenset[str]:
    """The clouds a program must connect to for these entries (in-process groups need none)."""
    return frozenset(row.cloud for row in map(kind_row, (e.kind for e in entries)) if not row.in_process)
