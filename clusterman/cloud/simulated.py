"""A simulated resource group: cloud-side instances for the simulator and the local stack.

It behaves like an Auto Scaling group whose instances are protected from scale-in: instances of
the initial target are running from the start; raising the target launches instances at once
(``pending``), each ``running`` after a join delay (plus seeded jitter); lowering the target
terminates nothing; ``terminate_instances`` removes exactly the chosen instances and lowers the
target by their weight, never below the minimum (below it, the group replaces them).

Pure apart from the clock, which is passed in (the simulator's clock, or ``time.time``), and a
random generator seeded from ``seed`` and the group id: the same calls at the same times give the
same instances, ids and join times in every process. Simulated *nodes* (the scheduler's view)
belong to ``clusterman.cluster.simulated``; this module only knows instances.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass

from clusterman.cloud.resource_group import UNKNOWN_SIZE
from clusterman.cloud.resource_group import CloudGroup
from clusterman.cloud.resource_group import GroupState
from clusterman.cloud.resource_group import Instance
from clusterman.cloud.resource_group import InstanceState
from clusterman.cloud.resource_group import ResourceGroupError
from clusterman.cloud.resource_group import TargetChange
from clusterman.cloud.resource_group import Termination
from clusterman.cloud.resource_group import clamp_target
from clusterman.cloud.resource_group import plan_termination
from clusterman.cloud.resource_group import tag_names_pool
from clusterman.cluster.model import ResourceGroup
from clusterman.resources import Resources


@dataclass(frozen=True)
class SimulatedMarket:
    """One kind of instance the group launches: type, zone, weight and hardware (per instance)."""

    instance_type: str
    availability_zone: str
    weight: float = 1.0
    resources: Resources = UNKNOWN_SIZE
    spot: bool = False


@dataclass(frozen=True)
class _Launched:
    id: str
    market: SimulatedMarket
    launched_at: float
    running_at: float  # launched_at + the join delay

    def at(self, now: float) -> Instance:
        state = InstanceState.RUNNING if now >= self.running_at else InstanceState.PENDING
        m = self.market
        return Instance(self.id, m.instance_type, m.availability_zone, m.weight, self.launched_at, state, m.spot)


class SimulatedGroup(CloudGroup):
    kind = "simulated"

    def __init__(
        self,
        group_id: str,
        markets: Sequence[SimulatedMarket],
        clock: Callable[[], float],
        *,
        min_capacity: float = 0.0,
        max_capacity: float = math.inf,
        target_capacity: float = 0.0,
        join_delay_seconds: float = 0.0,
        join_jitter_seconds: float = 0.0,
        seed: int = 0,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(group_id)
        if not markets:
            raise ValueError(f"simulated group {group_id}: needs at least one market")
        if any(m.weight <= 0 for m in markets):
            raise ValueError(f"simulated group {group_id}: market weights must be greater than 0")
        if not 0 <= min_capacity <= max_capacity:
            raise ValueError(f"simulated group {group_id}: need 0 <= min_capacity <= max_capacity")
        if join_delay_seconds < 0 or join_jitter_seconds < 0:
            raise ValueError(f"simulated group {group_id}: join delay and jitter must be at least 0")
        self.markets = tuple(markets)
        self.min_capacity = min_capacity
        self.max_capacity = max_capacity
        self.join_delay_seconds = join_delay_seconds
        self.join_jitter_seconds = join_jitter_seconds
        self.tags = dict(tags or {})
        self.stale = False  # a stale group launches nothing more and is drained
        self._clock = clock
        self._rng = random.Random(f"{seed}:{group_id}")  # str seeds hash with SHA-512: same in every process
        self._target = float(min(max(math.ceil(target_capacity), min_capacity), max_capacity))
        self._instances: dict[str, _Launched] = {}
        self._broken = ""
        self._launch(clock(), joined=True)  # the initial target: instances already up when the story starts

    def break_with(self, problem: str) -> None:
        """Make every call fail with ``problem`` (an outage, a deleted group); "" mends it."""
        self._broken = problem

    def mark_stale(self, stale: bool = True) -> None:
        self.stale = stale

    def lose_instances(self, instance_ids: Iterable[str]) -> list[str]:
        """The cloud takes instances away (a spot interruption): the target stays, so they are replaced."""
        lost = [i for i in instance_ids if self._instances.pop(i, None) is not None]
        self._launch(self._clock())
        return lost

    def read(self) -> GroupState:
        now = self._advance()
        instances = tuple(i.at(now) for i in self._instances.values())
        return GroupState(self._value(instances), instances)

    def set_target_capacity(self, new_target: float, dry_run: bool = False) -> TargetChange:
        self._advance()
        previous = 0.0 if self.stale else self._target
        if self.stale:
            note = "group is stale: its target cannot change"
            return TargetChange(self.id, previous, new_target, previous, dry_run, note)
        wanted, note = clamp_target(self.label, new_target, self.min_capacity, self.max_capacity)
        if not dry_run:
            self._target = float(wanted)
            self._launch(self._clock())
        return TargetChange(self.id, previous, new_target, float(wanted), dry_run, note)

    def terminate_instances(self, instance_ids: Iterable[str], dry_run: bool = False) -> Termination:
        instances = self.read().instances
        plan = plan_termination(self, instances, instance_ids, self._target, self.min_capacity, drain=self.stale)
        if not dry_run:
            for inst in plan.chosen:
                del self._instances[inst.id]
            self._target -= plan.lowered_by
            self._launch(self._clock())
        return plan.result(dry_run)

    def _advance(self) -> float:
        if self._broken:
            raise ResourceGroupError(self.label, self._broken)
        now = self._clock()
        self._launch(now)
        return now

    def _launch(self, now: float, joined: bool = False) -> None:
        """Launch until the target is met (possibly overshooting by less than one weight, like AWS)."""
        fulfilled = sum(i.market.weight for i in self._instances.values())
        while not self.stale and fulfilled < self._target:
            market = self._rng.choice(self.markets)
            fulfilled += market.weight
            jitter = self._rng.uniform(0, self.join_jitter_seconds) if self.join_jitter_seconds else 0.0
            instance_id = f"i-{self._rng.getrandbits(68):017x}"
            running_at = now if joined else now + self.join_delay_seconds + jitter
            self._instances[instance_id] = _Launched(instance_id, market, now, running_at)

    def _value(self, instances: tuple[Instance, ...]) -> ResourceGroup:
        per_unit = [m.resources * (1.0 / m.weight) for m in self.markets]
        return ResourceGroup(
            id=self.id,
            target_capacity=0.0 if self.stale else self._target,
            fulfilled_capacity=sum(i.weight for i in instances),
            min_capacity=self.min_capacity,
            max_capacity=self.max_capacity,
            stale=self.stale,
            kind=self.kind,
            node_resources=Resources(*(min(values) for values in zip(*per_unit, strict=True))),
        )


class SimulatedCloud:
    """The simulated groups of one simulated account, found by tag the way AWS groups are."""

    def __init__(self, groups: Iterable[SimulatedGroup] = ()) -> None:
        self.groups: dict[str, SimulatedGroup] = {}
        for g in groups:
            self.add(g)

    def add(self, group: SimulatedGroup) -> SimulatedGroup:
        if group.id in self.groups:
            raise ValueError(f"simulated group {group.id} already exists")
        self.groups[group.id] = group
        return group

    def find(self, tag_key: str, cluster: str, pool: str) -> tuple[list[SimulatedGroup], list[str]]:
        """The groups whose ``tag_key`` tag names this pool, and problems met."""
        found: list[SimulatedGroup] = []
        problems: list[str] = []
        for group_id, g in sorted(self.groups.items()):
            try:
                if tag_names_pool(g.tags.get(tag_key), cluster, pool):
                    found.append(g)
            except ValueError as e:
                problems.append(f"simulated {group_id}: tag {tag_key}: {e}")
        return found, problems
