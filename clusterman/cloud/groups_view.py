"""Reading a pool's resource groups, each run: the ``core.cloud_view.CloudView`` they make, and what failed.

This is how a connector learns which instances are the pool's machines: every group is read; a
group that cannot be read is named in the reading's ``unreadable`` and left out, and its machines
then look unknown to the join (neither capacity nor removable), which keeps them safe.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass

from clusterman.cloud.discovery import Discovery
from clusterman.cloud.resource_group import LIVE_STATES
from clusterman.cloud.resource_group import CloudGroup
from clusterman.cloud.resource_group import GroupReadings
from clusterman.cloud.resource_group import GroupState
from clusterman.cloud.resource_group import Instance
from clusterman.cloud.resource_group import ResourceGroupError
from clusterman.cloud.resource_group import read_groups
from clusterman.core.cloud_view import CloudInstance
from clusterman.core.cloud_view import CloudView

Made = dict[str, tuple[Instance, CloudInstance]]  # instance id -> (the Instance, its CloudInstance)


def cloud_view_of(readings: GroupReadings, made: Made | None = None) -> CloudView:
    """The view of these readings; ``made`` (updated in place) reuses the CloudInstance of an
    Instance object seen before, so a group that changed a little costs little."""
    made = {} if made is None else made
    groups = tuple(state.group for state in readings.states.values())
    instances = []
    # Identity checks against local names: this loop runs over every instance of every snapshot,
    # and tuple membership costs a third more.
    pending, running, unknown = LIVE_STATES
    for group_id, state in readings.states.items():
        for i in state.instances:
            s = i.state
            if s is not running and s is not pending and s is not unknown:
                continue
            seen = made.get(i.id)
            if seen is None or seen[0] is not i or seen[1].group_id != group_id:
                seen = made[i.id] = (i, _cloud_instance(i, group_id))
            instances.append(seen[1])
    if len(made) > len(instances):
        live = {i.instance_id for i in instances}
        for instance_id in [k for k in made if k not in live]:
            del made[instance_id]
    return CloudView(groups, tuple(instances))


def _cloud_instance(i: Instance, group_id: str) -> CloudInstance:
    return CloudInstance(
        instance_id=i.id,
        group_id=group_id,
        weight=i.weight,
        launched_at=i.launched_at,
        instance_type=i.instance_type,
        market=i.availability_zone,
        ip=i.private_ip,
        template=i.template,
        image_id=i.image_id,
    )


@dataclass(frozen=True)
class GroupsReading:
    """One read of the pool's resource groups: what they hold, and what could not be read.

    ``unreadable`` are the pool's groups that could not be found or read (the view may miss some
    of its capacity); ``mistagged`` are groups whose tag names no pool (worth a word, nothing more).
    ``groups`` are the handles to act on.
    """

    view: CloudView
    groups: tuple[CloudGroup, ...] = ()
    unreadable: tuple[ResourceGroupError, ...] = ()
    mistagged: tuple[ResourceGroupError, ...] = ()


class GroupsCloudView:
    """A ``CloudViewSource`` over the pool's ``CloudGroup``s.

    With ``discover``, the groups are found again before every read (as Clusterman does each run),
    so a new group is picked up and a deleted one dropped without a restart. When every group
    returns the very state object it returned last time (a simulated group that did not change),
    the previous view is returned as it is, so readers can tell "nothing changed" by identity.
    """

    def __init__(self, groups: Sequence[CloudGroup] = (), discover: Callable[[], Discovery] | None = None) -> None:
        self.groups = list(groups)
        self.discover = discover
        self._last: tuple[tuple[GroupState, ...], CloudView] | None = None
        self._made: Made = {}

    def cloud_view(self, now: float) -> CloudView:
        return self.read(now).view

    def read(self, now: float) -> GroupsReading:
        found_errors: tuple[ResourceGroupError, ...] = ()
        mistagged: tuple[ResourceGroupError, ...] = ()
        if self.discover is not None:
            discovery = self.discover()
            self.groups, found_errors, mistagged = list(discovery.groups), discovery.errors, discovery.mistagged
        readings = read_groups(self.groups)
        unreadable = found_errors + readings.errors
        states = tuple(readings.states.values())
        last = self._last
        if last is not None and len(states) == len(last[0]) and all(map(operator.is_, states, last[0])):
            view = last[1]
        else:
            view = cloud_view_of(readings, self._made)
            self._last = (states, view)
        return GroupsReading(view, tuple(self.groups), unreadable, mistagged)
