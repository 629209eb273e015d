"""The drain machinery's part of the decision: nodes that leave for a reason, the capacity they
take, their replacement, the order and pace of drain steps, and drains given up
(docs/node_lifecycle.md, "One drain machinery").

Every node leaves the same way: taint, drain (one step per run, paced), terminate. What differs
is why, and so when it may go:
  notices    a node named by a ``Notice`` (a Spot interruption, a migration, ...) is leaving
             capacity from the run that reads it: it is taken out of the ready capacity, its pods
             stay demand, and the capacity it takes is asked for in the same run (its weight is
             kept in its group's target beside it until it goes). It is terminated once empty,
             at its deadline less ``ahead_seconds`` whatever still runs there (those pods are
             lost, and counted), or, without a deadline, when the drain is given up
  scale-down a node the decision tainted (``node_choice.py``); terminated by the grace periods
  give up   a drain without a deadline that has not finished within ``threshold_seconds``
             (Clusterman's ``draining_time_threshold_seconds``) is given up: the node is
             untainted and returned to the pool, and is not chosen again for as long; with
             ``force_terminate`` it is terminated instead, its pods with it. The notice that
             started it does not start it again (only a later one does)
  pace      a node is given a drain step at most every ``redrain_seconds`` (Clusterman's
             ``redraining_delay_seconds``), and a drain without a deadline slows down as it ages
             (a step at most every eighth of its age, up to ``MAX_STEP_GAP``), so that a
             disruption budget refusing for good is not asked thousands of times

What is remembered (``DrainState``, kept in the ``AutoscalerState`` and so in the state store): the
nodes leaving for a notice with their reason, deadline and the replacement kept for them, the
last drain step of each node, and the nodes given up on. A node's taint (and its time) is on the
node itself; a process killed mid-drain finds both when it comes back and goes on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from fractions import Fraction
from typing import Any

from clusterman.core.accounting import account_node
from clusterman.core.model import NO_TIME
from clusterman.core.model import Node
from clusterman.core.model import NodeState
from clusterman.core.notices import KEEP_SECONDS
from clusterman.core.notices import LeaveReason
from clusterman.core.notices import Notice
from clusterman.core.stored import is_amount
from clusterman.decision.exact import ZERO
from clusterman.decision.exact import exact
from clusterman.decision.exact import show
from clusterman.decision.pool_view import PoolView

MAX_STEP_GAP = 300.0  # seconds: the slowest pace of a long drain


@dataclass(frozen=True)
class DrainPolicy:
    """Clusterman's ``draining`` block (its defaults), and when a node with a deadline goes."""

    threshold_seconds: float = 1800.0  # draining_time_threshold_seconds
    redrain_seconds: float = 15.0  # redraining_delay_seconds
    force_terminate: bool = False
    ahead_seconds: float = 10.0  # terminate a node with a deadline this long before it


@dataclass(frozen=True)
class Leaving:
    """One node leaving for a notice. ``replacement``: the weight kept in its group's target beside
    it until it goes (0 when it was already not counted: a node the decision had tainted)."""

    node_id: str
    instance_id: str
    group_id: str
    reason: LeaveReason
    since: float
    deadline: float = NO_TIME
    replacement: float = 0.0
    drain: bool = True
    key: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "node": self.node_id,
            "instance": self.instance_id,
            "group": self.group_id,
            "reason": self.reason.value,
            "since": self.since,
            "deadline": None if self.deadline == NO_TIME else self.deadline,
            "replacement": self.replacement,
            "drain": self.drain,
            "key": self.key,
        }

    @staticmethod
    def from_json(data: Any) -> Leaving:
        if not isinstance(data, Mapping):
            raise ValueError(f"drains.leaving: expected an object, got {data!r}")
        try:
            reason = LeaveReason(data.get("reason"))
        except ValueError:
            raise ValueError(f"drains.leaving.reason: unknown reason {data.get('reason')!r}") from None
        for name in ("node", "instance", "group", "key"):
            if not isinstance(data.get(name, ""), str):
                raise ValueError(f"drains.leaving.{name}: expected a string, got {data.get(name)!r}")
        for name in ("since", "replacement"):
            if not is_amount(data.get(name)):
                raise ValueError(f"drains.leaving.{name}: expected a number >= 0, got {data.get(name)!r}")
        deadline = data.get("deadline")
        if deadline is not None and not is_amount(deadline):
            raise ValueError(f"drains.leaving.deadline: expected a time or null, got {deadline!r}")
        return Leaving(
            data.get("node", ""),
            data.get("instance", ""),
            data.get("group", ""),
            reason,
            float(data["since"]),
            NO_TIME if deadline is None else float(deadline),
            float(data["replacement"]),
            bool(data.get("drain", True)),
            data.get("key", ""),
        )


@dataclass(frozen=True)
class DrainState:
    leaving: tuple[Leaving, ...] = ()
    steps: tuple[tuple[str, float], ...] = ()  # node -> its last drain step
    given_up: tuple[tuple[str, float], ...] = ()  # node -> when its drain was given up

    def given_up_after(self, node_id: str, at: float) -> bool:
        """Whether the node's drain was given up at ``at`` or later."""
        return any(n == node_id and t >= at for n, t in self.given_up)

    def resting(self, now: float, policy: DrainPolicy) -> frozenset[str]:
        """Nodes given up on less than ``threshold_seconds`` ago: not tainted again before then."""
        return frozenset(n for n, at in self.given_up if now - at < policy.threshold_seconds)

    def as_json(self) -> dict[str, Any]:
        return {
            "leaving": [entry.as_json() for entry in self.leaving],
            "steps": dict(self.steps),
            "given_up": dict(self.given_up),
        }

    @staticmethod
    def from_json(data: Any) -> DrainState:
        """The inverse of ``as_json``; absent (state kept by an earlier version): empty."""
        if data is None:
            return DrainState()
        if not isinstance(data, Mapping):
            raise ValueError(f"drains: expected an object, got {data!r}")
        leaving = data.get("leaving") or []
        if not isinstance(leaving, list):
            raise ValueError(f"drains.leaving: expected a list, got {leaving!r}")
        return DrainState(tuple(Leaving.from_json(e) for e in leaving), _times(data, "steps"), _times(data, "given_up"))


def _times(data: Mapping[str, Any], name: str) -> tuple[tuple[str, float], ...]:
    value = data.get(name) or {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and is_amount(t) for k, t in value.items()):
        raise ValueError(f"drains.{name}: expected an object of node id -> time, got {value!r}")
    return tuple(sorted((k, float(t)) for k, t in value.items()))


# --- before the target: what is leaving ---------------------------------------------------------


@dataclass(frozen=True)
class Leavers:
    """What the notices and the record say is leaving, as this run sees it.

    ``view``: the pool view with the leaving nodes out of the ready capacity (their pods stay
    demand) and each group's target without the replacements kept from earlier runs, so that the
    decision sizes the pool it wants ready, as if nothing were leaving. ``leaving``: by node id,
    every node leaving for a notice (new ones with the replacement this run may ask for).
    ``unknown``: notices for no node of the pool."""

    view: PoolView
    leaving: dict[str, Leaving] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)  # the leaving nodes, as the snapshot has them
    new: tuple[str, ...] = ()
    unknown: tuple[Notice, ...] = ()
    to_taint: tuple[str, ...] = ()  # leaving nodes still ready in the snapshot

    @property
    def draining(self) -> frozenset[str]:
        return frozenset(n for n, e in self.leaving.items() if e.drain)


def leavers(view: PoolView, notices: Iterable[Notice], state: DrainState, now: float) -> Leavers:
    """Match the notices and the record to the view's nodes (by node id or instance id)."""
    nodes = [*view.ready, *view.tainted, *view.orphans, *view.cordoned]
    by_id = {n.id: n for n in nodes}
    by_instance = {n.instance_id: n for n in nodes if n.instance_id}
    leaving: dict[str, Leaving] = {}
    kept = {g: ZERO for g in view.groups}
    notices = tuple(notices)
    named = {n.node_id for n in notices if n.node_id} | {n.instance_id for n in notices if n.instance_id}
    for entry in state.leaving:
        if entry.group_id in kept:
            kept[entry.group_id] += exact(entry.replacement)  # kept beside it since an earlier run
        if _withdrawn(entry, named):
            continue  # its replacement is no longer asked for: the node stays, as capacity
        node = by_id.get(entry.node_id) or by_instance.get(entry.instance_id)
        if node is not None:
            leaving[node.id] = entry
    new: list[str] = []
    unknown: list[Notice] = []
    for notice in notices:
        node = by_id.get(notice.node_id) if notice.node_id else by_instance.get(notice.instance_id)
        if node is None:
            unknown.append(notice)
            continue
        before = leaving.get(node.id)
        if before is not None:
            leaving[node.id] = _merged(before, notice)
            continue
        if notice.deadline == NO_TIME and state.given_up_after(node.id, notice.noticed_at):
            continue  # the drain it started was given up: the node is back in the pool
        weight = node.weight if notice.replace and node.state is NodeState.READY else 0.0
        leaving[node.id] = Leaving(
            node.id, node.instance_id, node.group_id, notice.reason, now, notice.deadline, weight, notice.drain,
            notice.key,
        )  # fmt: skip
        new.append(node.id)
    ready = [n for n in view.ready if n.id in leaving]
    return Leavers(
        _without(view, ready, kept, now) if ready or any(kept.values()) else view,
        leaving,
        {n.id: n for n in nodes if n.id in leaving},
        tuple(new),
        tuple(unknown),
        tuple(n.id for n in ready if leaving[n.id].drain),
    )


def _withdrawn(entry: Leaving, named: set[str]) -> bool:
    """A node a migration only replaces ahead (not draining yet) stays leaving only while the
    migration names it each run: a migration that fails or is stopped before draining it withdraws
    its replacement at once (docs/node_lifecycle.md, "Node migration")."""
    ahead = entry.reason is LeaveReason.NODE_MIGRATION and not entry.drain
    return ahead and entry.node_id not in named and entry.instance_id not in named


def _merged(before: Leaving, notice: Notice) -> Leaving:
    """A node already leaving, noticed again: the same notice again changes nothing (duplicates);
    a graver one takes over (a rebalance recommendation, then the interruption itself), keeping
    the replacement already asked for and the drain's start. A node only replaced ahead until now
    starts its drain now: ``draining_time_threshold_seconds`` counts from then, not from the
    replacement (a migration's step waits for its replacements to join before it drains)."""
    deadline = before.deadline
    if notice.deadline != NO_TIME and (deadline == NO_TIME or notice.deadline < deadline):
        deadline = notice.deadline
    if deadline == before.deadline and (before.drain or not notice.drain):
        return before
    starts = notice.drain and not before.drain
    graver = deadline != before.deadline or starts
    reason = notice.reason if graver else before.reason
    since = notice.noticed_at if starts else before.since
    return replace(
        before, reason=reason, deadline=deadline, drain=before.drain or notice.drain, key=notice.key, since=since
    )


def _without(view: PoolView, ready: list[Node], kept: dict[str, Fraction], now: float) -> PoolView:
    """The view with ``ready`` nodes moved out of the ready capacity (as tainted: leaving, their
    pods still demand) and the groups' targets less the replacements ``kept``."""
    gone = {n.id for n in ready}
    weight = dict(view.ready_weight)
    capacity = dict(view.capacity)
    slack = dict(view.slack)
    for node in ready:
        weight[node.group_id] = weight.get(node.group_id, ZERO) - exact(node.weight)
        for name, value in node.allocatable.items():
            capacity[name] = capacity.get(name, ZERO) - exact(value)
        if any(node.reserved):
            for name, value in account_node(node).slack.items():
                slack[name] = slack.get(name, ZERO) - exact(value)
    groups = {
        gid: replace(g, target_capacity=float(max(ZERO, exact(g.target_capacity) - kept.get(gid, ZERO))))
        for gid, g in view.groups.items()
    }
    return PoolView(
        groups,
        [n for n in view.ready if n.id not in gone],
        [*view.tainted, *(n.moved(state=NodeState.TAINTED, tainted_at=now) for n in ready)],
        view.orphans,
        view.cordoned,
        view.ignored,
        weight,
        capacity,
        slack,
        view.largest,
    )


# --- after the target: what to do with each draining node ----------------------------------------


@dataclass(frozen=True)
class DrainActions:
    """The machinery's choices this run, beside the scale-down's (``node_choice.NodeActions``)."""

    taint: tuple[str, ...] = ()
    terminate: tuple[str, ...] = ()
    untaint: tuple[str, ...] = ()  # drains given up: the node is returned to the pool
    drain: tuple[str, ...] = ()  # nodes given a drain step now, most urgent first
    replacement: dict[str, Fraction] = field(default_factory=dict)  # per group, kept in its target
    reasons: dict[str, str] = field(default_factory=dict)
    why: dict[str, LeaveReason] = field(default_factory=dict)  # per node acted on
    given_up: dict[str, str] = field(default_factory=dict)  # node -> why its drain was given up
    lost: dict[str, int] = field(default_factory=dict)  # node terminated with pods still on it -> how many
    unknown: tuple[Notice, ...] = ()  # notices for no node of the pool
    new: tuple[str, ...] = ()  # nodes noticed for the first time this run
    notes: tuple[str, ...] = ()
    state: DrainState = field(default_factory=DrainState)


def drain_actions(
    leavers: Leavers,
    view: PoolView,
    scaled: tuple[str, ...],
    terminating: frozenset[str],
    untainting: frozenset[str],
    keeping: frozenset[str],
    state: DrainState,
    policy: DrainPolicy,
    now: float,
    hard_grace: bool = False,
) -> DrainActions:
    """``view``: as the decision saw it (``leavers.view``); ``scaled``: the nodes the scale-down
    taints now; ``terminating``/``untainting``: what it terminates or untaints; ``keeping``: nodes
    consolidation drains to keep (they have their own limit); ``hard_grace``: the pool sets a hard
    grace period, which ends its scale-down drains instead of the threshold."""
    taint = list(leavers.to_taint)
    terminate: list[str] = []
    untaint: list[str] = []
    reasons: dict[str, str] = {}
    why: dict[str, LeaveReason] = {}
    given_up: dict[str, str] = {}
    lost: dict[str, int] = {}
    still: dict[str, Leaving] = {}
    for node_id, entry in leavers.leaving.items():
        node = leavers.nodes[node_id]
        why[node_id] = entry.reason
        tasks = node.usage.tasks
        left = entry.deadline - now if entry.deadline != NO_TIME else math.inf
        age = now - entry.since
        going = ""
        if not entry.drain:  # replaced ahead: it stays, with its pods, until an interruption comes
            if age >= policy.threshold_seconds:  # nothing came: it is capacity again
                reasons[node_id] = f"{entry.reason.value}: replaced ahead {age:g}s ago, no interruption followed"
            else:
                still[node_id] = entry
            continue
        if node.state is NodeState.ORPHAN:
            going = "never joined"
        elif tasks == 0 and node_id not in taint:
            going = "drained"
        elif tasks == 0:
            going = "empty"
        elif left <= policy.ahead_seconds:
            going = f"its deadline is {max(left, 0):g}s away"
            lost[node_id] = tasks
        elif entry.deadline == NO_TIME and age >= policy.threshold_seconds:
            limit = _not_drained(policy, tasks)
            if policy.force_terminate:
                going = f"{limit}: force_terminate"
                lost[node_id] = tasks
            else:
                given_up[node_id] = limit
                untaint.append(node_id)
                reasons[node_id] = f"untaint: {entry.reason.value} drain given up: {limit}"
                continue
        if going:
            terminate.append(node_id)
            reasons[node_id] = f"terminate: {entry.reason.value}: {going}"
            continue
        still[node_id] = entry
        if node_id in taint:
            deadline = f", gone in {left:g}s" if left != math.inf else ""
            reasons[node_id] = f"taint: {entry.reason.value}{deadline}"
    # scale-down drains that do not finish: given up, or with force_terminate ended
    resting = dict(state.given_up)
    for node in view.tainted:
        if hard_grace or node.id in leavers.leaving or node.id in keeping or node.id in terminating:
            continue
        if node.id in untainting:
            continue
        age = now - node.tainted_at if node.tainted_at != NO_TIME else 0.0
        if node.usage.tasks and age >= policy.threshold_seconds:
            why[node.id] = LeaveReason.SCALING_DOWN
            limit = _not_drained(policy, node.usage.tasks)
            if policy.force_terminate:
                terminate.append(node.id)
                lost[node.id] = node.usage.tasks
                reasons[node.id] = f"terminate: scaling_down: {limit}: force_terminate"
            else:
                given_up[node.id] = limit
                untaint.append(node.id)
                reasons[node.id] = f"untaint: scaling_down drain given up: {limit}"
    for node_id in given_up:
        resting[node_id] = now
    # the drain steps: every node tainted and staying, most urgent first, each at its pace
    out = set(terminate) | set(untaint) | terminating | untainting
    tainted_now = [*taint, *scaled]
    candidates = [n.id for n in view.tainted if n.id not in out and leavers.leaving.get(n.id, _DRAIN).drain]
    candidates += [n for n in tainted_now if n not in out and n not in candidates]
    steps = dict(state.steps)
    tainted_at = {n.id: n.tainted_at if n.tainted_at != NO_TIME else now for n in view.tainted}
    drain: list[str] = []
    for node_id in sorted(candidates, key=lambda n: _urgency(n, still)):
        noticed = still.get(node_id)
        since = noticed.since if noticed is not None else tainted_at.get(node_id, now)
        last = steps.get(node_id)
        if last is not None and node_id not in tainted_now and now - last < _gap(noticed, now - since, policy):
            continue
        drain.append(node_id)
        steps[node_id] = now
    alive = set(candidates)
    replacement: dict[str, Fraction] = {}
    notes: list[str] = []
    for entry in still.values():
        if entry.replacement:
            replacement[entry.group_id] = replacement.get(entry.group_id, ZERO) + exact(entry.replacement)
    replacement = {g: w for g, w in replacement.items() if g in view.groups}
    if leavers.unknown:
        subjects = ", ".join(n.subject for n in leavers.unknown[:3])
        more = f" and {len(leavers.unknown) - 3} more" if len(leavers.unknown) > 3 else ""
        notes.append(f"notice for no node of the pool: {subjects}{more}")
    after = DrainState(
        tuple(sorted(still.values(), key=lambda e: e.node_id)),
        tuple(sorted((n, t) for n, t in steps.items() if n in alive)),
        # remembered as long as the notice that started the drain may still be read
        tuple(sorted((n, t) for n, t in resting.items() if now - t < max(policy.threshold_seconds, KEEP_SECONDS))),
    )
    return DrainActions(
        tuple(taint),
        tuple(terminate),
        tuple(untaint),
        tuple(drain),
        replacement,
        reasons,
        why,
        given_up,
        lost,
        leavers.unknown,
        leavers.new,
        tuple(notes),
        after,
    )


def _not_drained(policy: DrainPolicy, pods: int) -> str:
    return f"not drained within draining_time_threshold_seconds {policy.threshold_seconds:g}s ({pods} pods left)"


_DRAIN = Leaving("", "", "", LeaveReason.SCALING_DOWN, 0.0)


def _urgency(node_id: str, leaving: Mapping[str, Leaving]) -> tuple[float, int]:
    """Nodes with the nearest deadline first, then the other leaving nodes, then scale-down's (in
    the order they come: tainted earlier first)."""
    entry = leaving.get(node_id)
    if entry is not None:
        return (entry.deadline if entry.deadline != NO_TIME else math.inf, 0)
    return (math.inf, 1)


def _gap(entry: Leaving | None, age: float, policy: DrainPolicy) -> float:
    """The least time between two drain steps on one node: ``redrain_seconds`` while a deadline
    is near; otherwise an eighth of the drain's age, up to ``MAX_STEP_GAP``."""
    if entry is not None and entry.deadline != NO_TIME:
        return policy.redrain_seconds
    return max(policy.redrain_seconds, min(age / 8, MAX_STEP_GAP))


def described(replacement: Mapping[str, Fraction], leaving: Mapping[str, Leaving]) -> str:
    """``"replacing 1 (spot_interruption: i-abc)"`` for the line, "" when nothing is replaced."""
    total = sum(replacement.values(), ZERO)
    if not total:
        return ""
    named = [f"{e.reason.value}: {e.node_id}" for e in leaving.values() if e.replacement]
    return f"replacing {show(total)} ({', '.join(named[:3])}{'...' if len(named) > 3 else ''})"
