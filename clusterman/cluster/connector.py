"""The cluster connector interface: one pool's state, read from its scheduler, as a PoolSnapshot.

Connectors are adapters: constructors take plain values and never touch the network; the first
``snapshot`` connects. A connector is read-only: tainting and draining belong to the node lifecycle
(``cluster/lifecycle.py``), terminating to the resource groups. When a ``CloudViewSource`` is
given, the scheduler's nodes are joined to the cloud's instances (``cloud_view.join``); without
one, the snapshot has no groups and nodes keep the state the scheduler reports (docs/cluster.md).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

from clusterman.core.cloud_view import CloudViewSource
from clusterman.core.cloud_view import Joined
from clusterman.core.cloud_view import join
from clusterman.core.model import Node
from clusterman.core.model import PoolSnapshot
from clusterman.core.model import Task
from clusterman.errors import UserError


class ConnectorError(UserError):
    """The scheduler could not be read, or answered something we cannot use; the message says which
    endpoint or object, and why."""


@dataclass(frozen=True)
class SchedulerView:
    """What a scheduler alone says: its nodes in the pool, and work it could not place."""

    nodes: tuple[Node, ...] = ()
    pending: tuple[Task, ...] = ()
    stale: str = ""  # why this view may be too old to shrink the pool on ("" when it is not)


class ClusterConnector(abc.ABC):
    def __init__(self, cloud: CloudViewSource | None = None) -> None:
        self.cloud = cloud
        self._joined: dict[str, Joined] = {}  # the last join, reused for the nodes that did not change

    @abc.abstractmethod
    def scheduler_view(self, now: float) -> SchedulerView:
        """Read the scheduler; raise ConnectorError when it cannot be read."""

    def snapshot(self, now: float, cloud: CloudViewSource | None = None) -> PoolSnapshot:
        """The pool now; ``cloud`` is read for the join in place of the connector's own source."""
        view = self.scheduler_view(now)
        source = cloud or self.cloud
        if source is None:
            return PoolSnapshot(now, view.nodes, (), view.pending, view.stale)
        seen = source.cloud_view(now)
        return PoolSnapshot(now, join(view.nodes, seen, self._joined), seen.groups, view.pending, view.stale)

    def close(self) -> None:  # noqa: B027 - connectors that hold no connection need not override
        """Release connections; the connector may be used again afterwards (it reconnects)."""
