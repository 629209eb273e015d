"""One read of the pool, as one value: the snapshot, and what its resource groups could not show.

Three steps: the scheduler's view, one read of the pool's groups, and the connector's join of the
two. That read's problems and group handles come back beside the snapshot, so the run passes on
what it read instead of asking the groups afterwards what happened.
"""

from __future__ import annotations

from dataclasses import dataclass

from clusterman.cloud.groups_view import GroupsCloudView
from clusterman.cloud.resource_group import CloudGroup
from clusterman.cloud.resource_group import ResourceGroupError
from clusterman.cluster.connector import ClusterConnector
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


def read_pool(connector: ClusterConnector, cloud: GroupsCloudView, now: float) -> PoolReading:
    """The pool at ``now``; raises ConnectorError when the scheduler cannot be read (the groups
    are then not read)."""
    view = connector.scheduler_view(now)
    groups = cloud.read(now)
    snapshot = connector.join(view, groups.view, now)
    return PoolReading(snapshot, groups.unreadable, groups.mistagged, groups.groups)
