"""One read of the pool, as one value: the snapshot, and what its resource groups could not show.

The connector joins the scheduler's view to one read of the pool's groups; that read's problems
and group handles come back beside the snapshot, so the run passes on what it read instead of
asking the groups afterwards what happened.
"""

from __future__ import annotations

from dataclasses import dataclass

from clusterman.cloud.groups_view import GroupsCloudView
from clusterman.cloud.groups_view import GroupsReading
from clusterman.cloud.resource_group import CloudGroup
from clusterman.cloud.resource_group import ResourceGroupError
from clusterman.cluster.connector import ClusterConnector
from clusterman.core.cloud_view import CloudView
from clusterman.core.model import PoolSnapshot


@dataclass(frozen=True)
class PoolReading:
    snapshot: PoolSnapshot
    unreadable: tuple[ResourceGroupError, ...]  # groups not found or not read: capacity not all known
    mistagged: tuple[ResourceGroupError, ...]  # groups whose tag names no pool: worth a word
    groups: tuple[CloudGroup, ...]  # the handles to act on

    @property
    def groups_by_id(self) -> dict[str, CloudGroup]:
        return {g.id: g for g in self.groups}


class _OneRead:
    """The groups as the connector's cloud source for one snapshot, keeping what the read found."""

    def __init__(self, cloud: GroupsCloudView) -> None:
        self.cloud = cloud
        self.reading: GroupsReading | None = None

    def cloud_view(self, now: float) -> CloudView:
        self.reading = self.cloud.read(now)
        return self.reading.view


def read_pool(connector: ClusterConnector, cloud: GroupsCloudView, now: float) -> PoolReading:
    """The pool at ``now``; raises ConnectorError when the scheduler cannot be read."""
    source = _OneRead(cloud)
    snapshot = connector.snapshot(now, source)
    groups = source.reading
    assert groups is not None, f"{type(connector).__name__} did not read the pool's groups"
    return PoolReading(snapshot, groups.unreadable, groups.mistagged, groups.groups)
