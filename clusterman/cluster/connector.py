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

from clusterman.core.cloud_view import CloudView
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

    def join(self, view: SchedulerView, cloud: CloudView, now: float) -> PoolSnapshot:
        """The pool at ``now``: the scheduler's view joined to the cloud's."""
        return PoolSnapshot(now, join(view.nodes, cloud, self._joined), cloud.groups, view.pending, view.stale)

    def snapshot(self, now: float) -> PoolSnapshot:
        """The pool now, its scheduler's view joined to the connector's own cloud source (without
        one, the view alone). The run reads the groups itself, for what they could not show
        (``run/reading.py``)."""
        view = self.scheduler_view(now)
        if self.cloud is None:
            return PoolSnapshot(now, view.nodes, (), view.pending, view.stale)
        return self.join(view, self.cloud.cloud_view(now), now)

    def close(self) -> None:  # noqa: B027 - connectors that hold no connection need not override
        """Release connections; the connector may be used again afterwards (it reconnects)."""
