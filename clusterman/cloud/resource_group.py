"""The resource-group interface: one group of cloud instances that the autoscaler reads and resizes.

A group is an AWS Auto Scaling group, a Spot Fleet request or a simulated group; the autoscaler
treats them all alike. It reads a group's state (a ``clusterman.core.model.ResourceGroup``
value in capacity units, plus the group's instances), sets an absolute target, and terminates the
instances it chose. Constructors never touch the network. Every cloud failure surfaces as a
``ResourceGroupError`` naming the group, so one broken group never stops the others.

Capacity is counted in *weight units*: an instance counts for its weight (1 unless the group
weights its instance types), and targets are whole units, as AWS takes them.
"""

from __future__ import annotations

import abc
import enum
import json
import logging
import math
from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from clusterman.core.model import ResourceGroup
from clusterman.core.resources import Resources
from clusterman.errors import UserError

log = logging.getLogger(__name__)

# The tag key whose JSON value names a group's pool, for `resource_groups` entries that name
# neither a tag key nor an S3 listing. Yelp's configs always name one (e.g. `puppet:role::paasta`).
DEFAULT_TAG_KEY = "clusterman:pool"

# ``node_resources`` of a group whose capacity unit has no known size.
UNKNOWN_SIZE = Resources()

# Capacity arithmetic in floats: 42.0000001 units are 42, never 43 (Clusterman's ceil artefact).
UNIT_TOLERANCE = 1e-6


class ResourceGroupError(UserError):
    """A resource group could not be read or changed; the message names the group.

    ``ambiguous`` is true when the cloud may or may not have applied the request (throttled after
    sending, a timeout, a server error): the caller must re-read before trying again.
    """

    def __init__(self, group: str, problem: str, ambiguous: bool = False) -> None:
        self.group = group
        self.problem = problem
        self.ambiguous = ambiguous
        super().__init__(f"{group}: {problem}")


class InstanceState(enum.Enum):
    """EC2's instance states, and UNKNOWN for an instance the cloud did not describe (yet)."""

    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    SHUTTING_DOWN = "shutting-down"
    TERMINATED = "terminated"
    STANDBY = "standby"  # an Auto Scaling group's instance taken out of service by an operator
    UNKNOWN = "unknown"

    @classmethod
    def parse(cls, name: str) -> InstanceState:
        try:
            return cls(name)
        except ValueError:
            return cls.UNKNOWN

    @property
    def live(self) -> bool:
        return self in LIVE_STATES


# Count as capacity: launched and not on its way out. UNKNOWN is a launch not yet visible.
LIVE_STATES = (InstanceState.PENDING, InstanceState.RUNNING, InstanceState.UNKNOWN)


@dataclass(frozen=True, slots=True)
class Instance:
    """One machine of a group, as the cloud sees it."""

    id: str
    instance_type: str
    availability_zone: str
    weight: float  # capacity units it counts for in its group
    launched_at: float  # Unix seconds; NO_TIME when the cloud has not said
    state: InstanceState
    spot: bool = False
    stale: bool = False  # marked for replacement (Clusterman's `clusterman:is_stale` tag)
    private_ip: str = ""
    private_dns: str = ""
    template: str = ""  # the launch template version it was launched from, "lt-0abc:3" (cloud/launches.py)
    image_id: str = ""


@dataclass(frozen=True)
class GroupState:
    """A group's state at one moment: the capacity figures and the instances behind them."""

    group: ResourceGroup
    instances: tuple[Instance, ...] = ()

    def live_instances(self) -> list[Instance]:
        return [i for i in self.instances if i.state.live]

    def instance(self, instance_id: str) -> Instance:
        for i in self.instances:
            if i.id == instance_id:
                return i
        raise KeyError(instance_id)


@dataclass(frozen=True)
class TargetChange:
    """What ``set_target_capacity`` did (or, in a dry run, would do)."""

    group_id: str
    previous: float
    requested: float
    target: float  # the target the group has now (dry run: would have)
    dry_run: bool
    note: str = ""  # why ``target`` differs from ``requested``, or why nothing was sent

    @property
    def changed(self) -> bool:
        return self.target != self.previous


@dataclass(frozen=True)
class Termination:
    """What ``terminate_instances`` did (or, in a dry run, would do)."""

    group_id: str
    dry_run: bool
    terminated: tuple[str, ...] = ()  # every instance asked to terminate, replaced ones included
    replaced: tuple[str, ...] = ()  # terminated without lowering the target: the group was at its minimum
    lowered_by: float = 0.0  # capacity units taken off the group's target
    skipped: tuple[tuple[str, str], ...] = ()  # (instance id, why it was left alone)
    failed: tuple[tuple[str, str], ...] = ()  # (instance id, the cloud's error)


class CloudGroup(abc.ABC):
    """One resource group in the cloud; its state as a value is ``core.model.ResourceGroup``.

    Scaling down is ``terminate_instances``: it lowers the target by the weight of what it
    terminates, so to shrink a group to T, terminate the chosen instances first and then set T (an
    absolute target, so nothing is lowered twice). Lowering a target alone never terminates
    anything: ASGs protect their instances from scale-in and fleets are told not to terminate.
    """

    kind: ClassVar[str]

    def __init__(self, group_id: str) -> None:
        self.id = group_id

    @property
    def label(self) -> str:
        """How messages name the group, e.g. ``asg web-a``."""
        return f"{self.kind} {self.id}"

    @abc.abstractmethod
    def read(self) -> GroupState:
        """The group's capacity figures and instances; ``ResourceGroupError`` when unreadable."""

    @abc.abstractmethod
    def set_target_capacity(self, new_target: float, dry_run: bool = False) -> TargetChange:
        """Set an absolute target, rounded up to whole units and clamped to the group's min and max."""

    @abc.abstractmethod
    def terminate_instances(self, instance_ids: Iterable[str], dry_run: bool = False) -> Termination:
        """Terminate exactly these instances (those of this group), lowering the target by their weight."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id}>"


@dataclass(frozen=True)
class GroupReadings:
    states: dict[str, GroupState]
    errors: tuple[ResourceGroupError, ...]


def read_groups(groups: Iterable[CloudGroup]) -> GroupReadings:
    """Read every group; a group that fails is reported and the others are still read."""
    states: dict[str, GroupState] = {}
    errors: list[ResourceGroupError] = []
    for g in groups:
        try:
            states[g.id] = g.read()
        except ResourceGroupError as e:
            log.warning("skipping %s", e)
            errors.append(e)
    return GroupReadings(states, tuple(errors))


def whole_units(capacity: float) -> int:
    """Round a target up to whole capacity units, forgiving float noise."""
    return max(0, math.ceil(capacity - UNIT_TOLERANCE))


def clamp_target(label: str, requested: float, minimum: float, maximum: float) -> tuple[int, str]:
    """The whole-unit target to send for ``requested``, and a note when it had to change."""
    if not math.isfinite(requested) or requested < 0:
        raise ResourceGroupError(label, f"refusing target capacity {requested!r}: not a finite number >= 0")
    wanted = whole_units(requested)
    if wanted > maximum:
        return int(maximum), f"clamped to the group's maximum {maximum:g} (asked {requested:g})"
    if wanted < minimum:
        return math.ceil(minimum), f"clamped to the group's minimum {minimum:g} (asked {requested:g})"
    if wanted != requested:
        return wanted, f"rounded up to whole units (asked {requested:g})"
    return wanted, ""


@dataclass(frozen=True)
class TerminationPlan:
    group_id: str
    lower: tuple[Instance, ...]  # terminate and lower the target by their weight
    replace: tuple[Instance, ...]  # terminate and keep the target: the group replaces them
    skipped: tuple[tuple[str, str], ...]
    drain: bool = False  # a stale group: terminate, and leave its target alone

    @property
    def chosen(self) -> tuple[Instance, ...]:
        return self.lower + self.replace

    @property
    def lowered_by(self) -> float:
        return 0.0 if self.drain else sum(i.weight for i in self.lower)

    def result(
        self, dry_run: bool, done: Iterable[str] | None = None, failed: Sequence[tuple[str, str]] = ()
    ) -> Termination:
        """The ``Termination`` once ``done`` (default: every chosen instance) went."""
        ids = {i.id for i in self.chosen} if done is None else set(done)
        if dry_run and ids:
            log.info("dry run: %s would terminate %s", self.group_id, ", ".join(sorted(ids)))
        return Termination(
            self.group_id,
            dry_run,
            terminated=tuple(i.id for i in self.chosen if i.id in ids),
            replaced=() if self.drain else tuple(i.id for i in self.replace if i.id in ids),
            lowered_by=0.0 if self.drain else sum(i.weight for i in self.lower if i.id in ids),
            skipped=self.skipped,
            failed=tuple(failed),
        )


def plan_termination(
    group: CloudGroup,
    instances: Iterable[Instance],
    instance_ids: Iterable[str],
    target: float,
    minimum: float,
    drain: bool = False,
) -> TerminationPlan:
    """Which of the chosen instances to terminate, and which of those lower the target.

    Only the group's live instances are terminated; the rest are skipped with a reason. The
    target never drops below the group's minimum: an instance whose weight would take it there is
    still terminated, but replaced (the cloud launches another). A stale group is drained.
    """
    lower: list[Instance] = []
    replace: list[Instance] = []
    skipped: list[tuple[str, str]] = []
    by_id = {i.id: i for i in instances}
    for instance_id in dict.fromkeys(instance_ids):
        inst = by_id.get(instance_id)
        if inst is None:
            skipped.append((instance_id, f"not an instance of {group.label}"))
        elif not inst.state.live:
            skipped.append((instance_id, f"already {inst.state.value}"))
        elif drain or target - inst.weight >= minimum - UNIT_TOLERANCE:
            lower.append(inst)
            target -= inst.weight
        else:
            replace.append(inst)
    for instance_id, why in skipped:
        log.warning("%s: not terminating %s: %s", group.label, instance_id, why)
    return TerminationPlan(group.id, tuple(lower), tuple(replace), tuple(skipped), drain)


def settled(label: str, result: Termination) -> Termination:
    """Log a termination's outcome; an error when nothing at all could be terminated."""
    for instance_id, problem in result.failed:
        log.warning("%s: could not terminate %s: %s", label, instance_id, problem)
    if result.failed and not result.terminated:
        raise ResourceGroupError(label, "; ".join(problem for _, problem in result.failed))
    log.info("%s: terminated %s (target lowered by %g)", label, ", ".join(result.terminated), result.lowered_by)
    return result


def pool_of_tag(value: str) -> tuple[str, str]:
    """(paasta_cluster, pool) from Clusterman's tag value ``{"pool": ..., "paasta_cluster": ...}``."""
    try:
        data = json.loads(value)
        return str(data["paasta_cluster"]), str(data["pool"])
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f'expected JSON like {{"pool": "...", "paasta_cluster": "..."}}, got {value!r}') from e


def tag_names_pool(value: str | None, cluster: str, pool: str) -> bool:
    """Whether a group's tag value places it in ``cluster``/``pool``; a malformed value is a ValueError."""
    if value is None:
        return False
    return pool_of_tag(value) == (cluster, pool)
