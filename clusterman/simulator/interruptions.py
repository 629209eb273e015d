"""Spot interruptions in a simulation: each instance of a market is interrupted at random, at the
market's rate per instance-hour, with AWS's two-minute warning (docs/simulator.md).

At the warning, the notice reaches the autoscaler's run at once (as the drainer and the inbox bring
it on a real pool), unless ``interruption_handling`` is off; at the deadline the cloud takes the
instance if it is still there, with whatever still runs on it: those tasks are lost, and pending
again only ``lost_pods_return_seconds`` later (the time Kubernetes takes to see the node gone and
delete its pods). Draws come from a generator seeded by the run's seed, so the same inputs give
the same interruptions, with handling or without.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass

from clusterman.cloud.simulated_group import SimulatedGroup
from clusterman.cluster.simulated_scheduler import SimulatedScheduler
from clusterman.core.cloud_view import CloudView
from clusterman.core.model import PoolSnapshot
from clusterman.core.notices import NO_NOTICES
from clusterman.core.notices import DrainOutcome
from clusterman.core.notices import LeaveReason
from clusterman.core.notices import Notice
from clusterman.notices.events import SPOT_WARNING_SECONDS


@dataclass
class InterruptionCounts:
    warned: int = 0  # instances interrupted (each warned two minutes ahead)
    taken: int = 0  # ... still there at the deadline: the cloud took them
    pods_at_warning: int = 0  # tasks on the interrupted instances when warned
    pods_lost: int = 0  # tasks still on an instance when the cloud took it

    @property
    def evicted_share(self) -> float:
        """The share of the interrupted nodes' pods that left before their instance went (1 when none)."""
        if not self.pods_at_warning:
            return 1.0
        return max(0.0, 1.0 - self.pods_lost / self.pods_at_warning)  # pods may come within the two minutes

    def as_json(self) -> dict[str, float]:
        return {
            "warned": self.warned,
            "taken": self.taken,
            "pods_at_warning": self.pods_at_warning,
            "pods_lost": self.pods_lost,
            "evicted_share": self.evicted_share,
        }


class Interruptions:
    """The cloud's side (``step``) and the run's source of notices (``NoticeSource``) in one."""

    def __init__(
        self,
        groups: list[SimulatedGroup],
        scheduler: SimulatedScheduler,
        rates: Mapping[tuple[str, str], float],
        default_rate: float,
        step_seconds: float,
        seed: int,
        handling: bool = True,
        lost_seconds: float = 60.0,
    ) -> None:
        """``rates``: per (instance type, zone), interruptions per instance-hour; others ``default_rate``."""
        self.groups = groups
        self.scheduler = scheduler
        self.rates = dict(rates)
        self.default_rate = default_rate
        self.step_hours = step_seconds / 3600.0
        self.rng = random.Random(f"interruptions-{seed}")
        self.handling = handling
        self.lost_seconds = lost_seconds
        self.warnings: dict[str, tuple[float, float]] = {}  # instance -> (warned at, deadline)
        self.counts = InterruptionCounts()
        self._news = False

    @property
    def active(self) -> bool:
        return self.default_rate > 0 or any(r > 0 for r in self.rates.values())

    def step(self, now: float, view: CloudView) -> None:
        """The cloud at ``now``: instances past their deadline are taken; new warnings drawn."""
        due = [i for i, (_, deadline) in self.warnings.items() if now >= deadline]
        live = {i.instance_id: i for i in view.instances}
        for instance_id in due:
            del self.warnings[instance_id]
            instance = live.get(instance_id)
            if instance is None:
                continue  # the autoscaler ended it first
            self.counts.taken += 1
            self.counts.pods_lost += self.scheduler.take([instance_id], now + self.lost_seconds)
            for group in self.groups:
                if group.id == instance.group_id:
                    group.lose_instances([instance_id])
        for instance in view.instances:
            if instance.instance_id in self.warnings:
                continue
            rate = self.rates.get((instance.instance_type, instance.market), self.default_rate)
            if rate > 0 and self.rng.random() < 1.0 - math.exp(-rate * self.step_hours):
                self.warnings[instance.instance_id] = (now, now + SPOT_WARNING_SECONDS)
                self.counts.warned += 1
                self.counts.pods_at_warning += self.scheduler.tasks_on(instance.instance_id)
                self._news = self.handling

    # the run's source of notices ---------------------------------------------------------------

    def notices(self, snapshot: PoolSnapshot, now: float) -> tuple[Notice, ...]:
        if not self.handling:
            return NO_NOTICES
        self._news = False
        return tuple(
            Notice(LeaveReason.SPOT_INTERRUPTION, at, instance_id, deadline=deadline, key=f"sim-{instance_id}")
            for instance_id, (at, deadline) in self.warnings.items()
        )

    def waiting(self) -> bool:
        """A warning came since the last run: the autoscaler runs at once (it would within seconds)."""
        return self._news

    def settle(self, outcome: DrainOutcome) -> None:
        pass

    def close(self) -> None:
        pass
