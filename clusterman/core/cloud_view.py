"""The cloud's view of a pool, and how it is joined to the scheduler's view.

The scheduler (Kubernetes, Mesos) knows which nodes run and what is on them; the cloud (an Auto
Scaling group, a Spot Fleet, a simulated group) knows which instances exist, in which group, with
which weight and since when. A snapshot needs both in one record per node (as Clusterman joins
them), plus the instances that have not joined yet (orphans). The resource-group adapters provide
a ``CloudViewSource``; ``join`` is the one place the two views meet.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from clusterman.core.model import NO_TIME
from clusterman.core.model import Node
from clusterman.core.model import NodeState
from clusterman.core.model import ResourceGroup
from clusterman.core.resources import Resources


@dataclass(frozen=True, slots=True)
class CloudInstance:
    """One running instance of one of the pool's resource groups."""

    instance_id: str
    group_id: str
    weight: float = 1.0  # capacity units it counts for in its group
    launched_at: float = NO_TIME  # Unix seconds
    instance_type: str = ""
    market: str = ""  # availability zone
    ip: str = ""  # private address
    template: str = ""  # the launch template version it was launched from, "lt-0abc:3"
    image_id: str = ""


@dataclass(frozen=True)
class CloudView:
    groups: tuple[ResourceGroup, ...] = ()
    instances: tuple[CloudInstance, ...] = ()


class CloudViewSource(Protocol):
    """Anything that can say what the pool's resource groups hold right now."""

    def cloud_view(self, now: float) -> CloudView: ...


# a node joined last time: the scheduler's node, the instance it met, and the joined node
Joined = tuple[Node, "CloudInstance | None", Node]


def join(scheduler_nodes: Iterable[Node], cloud: CloudView, memo: dict[str, Joined] | None = None) -> tuple[Node, ...]:
    """One node per scheduler node and per instance that has not joined yet.

    A scheduler node is matched to an instance by instance id (Kubernetes' ``spec.providerID``),
    else by private IP (Mesos agents carry no instance id). A matched node takes the cloud's group,
    weight, launch time, type and market. A scheduler node with no instance is ``UNKNOWN``: it is
    not one of the pool's groups' machines, so it is neither capacity the autoscaler controls nor
    a node it may remove. An instance with no scheduler node is an ``ORPHAN`` with no allocatable.

    ``memo`` (kept by the caller from join to join): a scheduler node that is the very object of
    the last join and meets an equal instance is the same joined node as then.
    """
    by_id = {i.instance_id: i for i in cloud.instances}
    by_ip = {i.ip: i for i in cloud.instances if i.ip}
    joined: list[Node] = []
    matched: set[str] = set()
    kept: dict[str, Joined] = {}
    for node in scheduler_nodes:
        instance = by_id.get(node.instance_id) if node.instance_id else None
        if instance is None and node.ip:
            instance = by_ip.get(node.ip)
        if instance is not None and instance.instance_id in matched:
            instance = None  # taken by another node: this one is not the pool's
        last = memo.get(node.id) if memo is not None else None
        if last is not None and last[0] is node and last[1] == instance:
            result = last[2]
        elif instance is None:
            result = node.moved(state=NodeState.UNKNOWN, group_id="")
        else:
            result = node.moved(
                group_id=instance.group_id,
                instance_id=instance.instance_id,
                weight=instance.weight,
                launched_at=instance.launched_at if instance.launched_at != NO_TIME else node.launched_at,
                instance_type=instance.instance_type or node.instance_type,
                market=instance.market or node.market,
                ip=node.ip or instance.ip,
                template=instance.template,
                image_id=instance.image_id,
            )
        if instance is not None:
            matched.add(instance.instance_id)
        kept[node.id] = (node, instance, result)
        joined.append(result)
    for instance in cloud.instances:
        if instance.instance_id not in matched:
            joined.append(orphan(instance))
    if memo is not None:
        memo.clear()
        memo.update(kept)
    return tuple(joined)


def orphan(instance: CloudInstance) -> Node:
    """An instance the scheduler does not know (yet): no capacity, no tasks."""
    return Node(
        id=instance.instance_id,
        state=NodeState.ORPHAN,
        allocatable=Resources(),
        group_id=instance.group_id,
        instance_id=instance.instance_id,
        weight=instance.weight,
        launched_at=instance.launched_at,
        instance_type=instance.instance_type,
        market=instance.market,
        ip=instance.ip,
        template=instance.template,
        image_id=instance.image_id,
    )
