"""A simulated resource group: cloud-side instances for the simulator and the local stack.

It behaves like an Auto Scaling group whose instances are protected from scale-in:
- the instances of the initial target are running from the start;
- raising the target launches instances at once (``pending``); each is ``running`` after a join
  delay plus seeded jitter;
- lowering the target terminates nothing;
- ``terminate_instances`` removes exactly the chosen instances and lowers the target by their
  weight, never below the minimum (below it, the group replaces them).

It is pure but for the clock, which is passed in, and a random generator seeded from ``seed`` and
the group id. So the same calls at the same times give the same instances, ids and join times in
every process. Simulated *nodes* (the scheduler's view)
belong to ``clusterman.cluster.simulated_scheduler``; this module only knows instances.

A read costs what changed since the last one: the group's state is rebuilt only after a launch, a
termination, a target change, or when a pending instance turns running; otherwise the same
``GroupState`` comes back (the simulator reads every group every simulated minute).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import replace

from clusterman.cloud.instance_types import CATALOG
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
from clusterman.core.config import GroupKind
from clusterman.core.config import PoolConfig
from clusterman.core.config import PoolIdentity
from clusterman.core.config import SimulationConfig
from clusterman.core.config_schema import ConfigError
from clusterman.core.model import Offer
from clusterman.core.model import ResourceGroup
from clusterman.core.model import unit_size
from clusterman.core.resources import Resources


@dataclass(frozen=True)
class SimulatedMarket:
    """One kind of instance the group launches: type, zone, weight, hardware and price (per instance)."""

    instance_type: str
    availability_zone: str
    weight: float = 1.0
    resources: Resources = UNKNOWN_SIZE
    spot: bool = False
    price: float = 0.0  # dollars per instance-hour: on demand, or a spot market's price without a series


@dataclass(frozen=True)
class _Launched:
    id: str
    market: SimulatedMarket
    launched_at: float
    running_at: float  # launched_at + the join delay
    template: str = ""  # the group's launch template version when it was launched

    def at(self, now: float) -> Instance:
        state = InstanceState.RUNNING if now >= self.running_at else InstanceState.PENDING
        m = self.market
        return Instance(
            self.id, m.instance_type, m.availability_zone, m.weight, self.launched_at, state, m.spot,
            template=self.template,
        )  # fmt: skip


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
        self.template_version = 1  # its launch template's version: instances launched before a new one drift
        self._clock = clock
        self._rng = random.Random(f"{seed}:{group_id}")  # str seeds hash with SHA-512: same in every process
        self._target = float(min(max(math.ceil(target_capacity), min_capacity), max_capacity))
        self._instances: dict[str, _Launched] = {}
        self._values: dict[str, Instance] = {}  # each instance as last read
        self._pending: dict[str, _Launched] = {}  # not running yet
        self._fulfilled = 0.0  # weight of self._instances
        self._state: GroupState | None = None  # the last read, while nothing changed
        self._broken = ""
        self._launch(clock(), joined=True)  # the initial target: instances already up when the story starts

    def break_with(self, problem: str) -> None:
        """Make every call fail with ``problem`` (an outage, a deleted group); "" mends it."""
        self._broken = problem

    def mark_stale(self, stale: bool = True) -> None:
        self.stale = stale
        self._state = None

    @property
    def template(self) -> str:
        return f"{self.id}:{self.template_version}"

    def new_template_version(self) -> None:
        """A new version of the group's launch template: what it launches from now on (drift)."""
        self.template_version += 1
        self._state = None

    def lose_instances(self, instance_ids: Iterable[str]) -> list[str]:
        """The cloud takes instances away (a spot interruption): the target stays, so they are replaced."""
        lost = [i for i in instance_ids if i in self._instances]
        self._removed(lost)
        self._launch(self._clock())
        return lost

    def read(self) -> GroupState:
        now = self._advance()
        running = [i for i in self._pending.values() if now >= i.running_at] if self._pending else []
        for launched in running:
            del self._pending[launched.id]
            self._values[launched.id] = launched.at(now)
        if self._state is None or running:
            self._state = GroupState(self._value(), tuple(self._values.values()))
        return self._state

    def set_target_capacity(self, new_target: float, dry_run: bool = False) -> TargetChange:
        self._advance()
        previous = 0.0 if self.stale else self._target
        if self.stale:
            note = "group is stale: its target cannot change"
            return TargetChange(self.id, previous, new_target, previous, dry_run, note)
        wanted, note = clamp_target(self.label, new_target, self.min_capacity, self.max_capacity)
        if not dry_run:
            if self._target != wanted:
                self._target = float(wanted)
                self._state = None
            self._launch(self._clock())
        return TargetChange(self.id, previous, new_target, float(wanted), dry_run, note)

    def terminate_instances(self, instance_ids: Iterable[str], dry_run: bool = False) -> Termination:
        instances = self.read().instances
        plan = plan_termination(self, instances, instance_ids, self._target, self.min_capacity, drain=self.stale)
        if not dry_run and plan.chosen:
            self._target -= plan.lowered_by
            self._removed([inst.id for inst in plan.chosen])
            self._launch(self._clock())
        return plan.result(dry_run)

    def _removed(self, instance_ids: list[str]) -> None:
        for instance_id in instance_ids:
            del self._instances[instance_id]
            del self._values[instance_id]
            self._pending.pop(instance_id, None)
        self._fulfilled = math.fsum(i.market.weight for i in self._instances.values())
        self._state = None

    def _advance(self) -> float:
        if self._broken:
            raise ResourceGroupError(self.label, self._broken)
        now = self._clock()
        self._launch(now)
        return now

    def _launch(self, now: float, joined: bool = False) -> None:
        """Launch until the target is met (possibly overshooting by less than one weight, like AWS)."""
        while not self.stale and self._fulfilled < self._target:
            market = self._rng.choice(self.markets)
            self._fulfilled += market.weight
            jitter = self._rng.uniform(0, self.join_jitter_seconds) if self.join_jitter_seconds else 0.0
            instance_id = f"i-{self._rng.getrandbits(68):017x}"
            running_at = now if joined else now + self.join_delay_seconds + jitter
            launched = _Launched(instance_id, market, now, running_at, self.template)
            self._instances[instance_id] = launched
            self._values[instance_id] = launched.at(now)
            if launched.running_at > now:
                self._pending[instance_id] = launched
            self._state = None

    def _value(self) -> ResourceGroup:
        offers = tuple(Offer(m.instance_type, m.weight, m.resources) for m in self.markets)
        return ResourceGroup(
            id=self.id,
            target_capacity=0.0 if self.stale else self._target,
            fulfilled_capacity=self._fulfilled,
            min_capacity=self.min_capacity,
            max_capacity=self.max_capacity,
            stale=self.stale,
            kind=self.kind,
            node_resources=unit_size(offers),
            offers=offers,
            template=self.template,
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


def markets_from_config(sim: SimulationConfig, source: str) -> list[SimulatedMarket]:
    """The ``simulation`` block's markets, their size and price taken from the catalog where not given."""
    markets = []
    for i, m in enumerate(sim.market_configs()):
        known = CATALOG.get(m.instance_type)
        resources = m.resources if m.resources is not None else (known.resources if known else None)
        price = m.price if m.price is not None else (known.on_demand_price if known else None)
        if resources is None or price is None:
            key = f"simulation.markets[{i}].instance_type" if sim.markets else "simulation.instance_type"
            raise ConfigError(
                source,
                key,
                f"unknown instance type {m.instance_type!r}: give its resources and price under simulation.markets "
                f"(the catalog knows {', '.join(sorted(CATALOG))})",
            )
        markets.append(SimulatedMarket(m.instance_type, m.availability_zone, m.weight, resources, m.spot, price))
    return markets


def groups_from_config(
    identity: PoolIdentity,
    pool: PoolConfig,
    clock: Callable[[], float],
    source: str,
    *,
    seed: int | None = None,
    every_kind: bool = False,
) -> list[SimulatedGroup]:
    """One simulated group per ``resource_groups`` entry, launching the ``simulation`` block's markets.

    A ``simulated: {tag: X}`` entry's group is named X, any other ``<kind>-<index>``. Only
    ``simulated`` entries are allowed unless ``every_kind`` (the simulator stands in for ASGs and
    Spot Fleets too; a Spot Fleet's markets are spot). The initial capacity (``initial_capacity``,
    else ``min_capacity``) is shared out over the groups and already running at the start.
    """
    entries = pool.resource_groups
    if not entries:
        problem = f"the pool {identity} has no resource groups to simulate (add `- simulated: {{tag: <group id>}}`)"
        raise ConfigError(source, "resource_groups", problem)
    others = sorted({e.kind for e in entries if e.kind is not GroupKind.SIMULATED})
    if others and not every_kind:
        problem = f"the simulated pool {identity} needs a cloud adapter for its {', '.join(others)} groups"
        raise ConfigError(source, "resource_groups", problem)
    sim = pool.simulation
    markets = markets_from_config(sim, source)
    initial = sim.initial_capacity if sim.initial_capacity is not None else pool.scaling_limits.min_capacity
    groups: list[SimulatedGroup] = []
    for i, entry in enumerate(entries):
        group_id = entry.tag if entry.kind is GroupKind.SIMULATED and entry.tag else f"{entry.kind}-{i}"
        if any(g.id == group_id for g in groups):
            raise ConfigError(source, f"resource_groups[{i}]", f"a second group named {group_id!r}")
        own = [replace(m, spot=True) for m in markets] if entry.kind is GroupKind.SFR else markets
        share = initial // len(entries) + (1 if i < initial % len(entries) else 0)
        groups.append(
            SimulatedGroup(group_id, own, clock, target_capacity=share, seed=sim.seed if seed is None else seed)
        )
    return groups


def default_task(markets: Sequence[SimulatedMarket]) -> Resources:
    """One CPU of the smallest instance's shape (all of it when it has less than one CPU)."""
    smallest = min((m.resources for m in markets), key=lambda r: (r.cpus, r.mem, r.disk, r.gpus))
    if smallest.cpus <= 0:
        raise ValueError("the smallest instance has no CPUs: give simulation.demand_task")
    return smallest * (min(1.0, smallest.cpus) / smallest.cpus)
