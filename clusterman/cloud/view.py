"""The cloud's view of a pool, read from its resource groups (``cluster.cloud_view.CloudView``).

This is how a connector learns which instances are the pool's machines: every group is read; a
group that cannot be read is reported in ``errors`` and left out, and its machines then look
unknown to the join (neither capacity nor removable), which keeps them safe.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence

from clusterman.cloud.discovery import Discovery
from clusterman.cloud.resource_group import CloudGroup
from clusterman.cloud.resource_group import GroupReadings
from clusterman.cloud.resource_group import ResourceGroupError
from clusterman.cloud.resource_group import read_groups
from clusterman.cluster.cloud_view import CloudInstance
from clusterman.cluster.cloud_view import CloudView


def cloud_view_of(readings: GroupReadings) -> CloudView:
    groups = tuple(state.group for state in readings.states.values())
    instances = tuple(
        CloudInstance(
            instance_id=i.id,
            group_id=group_id,
            weight=i.weight,
            launched_at=i.launched_at,
            instance_type=i.instance_type,
            market=i.availability_zone,
            ip=i.private_ip,
        )
        for group_id, state in readings.states.items()
        for i in state.live_instances()
    )
    return CloudView(groups, instances)


class GroupsCloudView:
    """A ``CloudViewSource`` over the pool's ``CloudGroup``s; remembers the last read's problems.

    ``errors`` are the pool's groups that could not be found or read (the view may miss some of
    its capacity); ``mistagged`` are groups whose tag names no pool (worth a word, nothing more).
    With ``discover``, the groups are found again before every read (as Clusterman does each run),
    so a new group is picked up and a deleted one dropped without a restart.
    """

    def __init__(self, groups: Sequence[CloudGroup] = (), discover: Callable[[], Discovery] | None = None) -> None:
        self.groups = list(groups)
        self.discover = discover
        self.errors: tuple[ResourceGroupError, ...] = ()
        self.mistagged: tuple[ResourceGroupError, ...] = ()

    def cloud_view(self, now: float) -> CloudView:
        found_errors: tuple[ResourceGroupError, ...] = ()
        if self.discover is not None:
            discovery = self.discover()
            self.groups, found_errors, self.mistagged = list(discovery.groups), discovery.errors, discovery.mistagged
        readings = read_groups(self.groups)
        self.errors = found_errors + readings.errors
        return cloud_view_of(readings)
