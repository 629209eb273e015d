"""The decision: a pure function of the pool's snapshot, the apps' requests, the policy, the state
carried from the previous decision, and the time (docs/scaling.md).

The stages, each its own module and testable alone:
  pool_view    which nodes count, exact totals
  utilisation  load (demand + slack) over ready capacity, the most constrained resource
  target       the target before limits (Clusterman's rules, Escalator's math)
  limits       Clusterman's clamping of the change
  distribute   the new total across resource groups
  breaker      no raising while requested capacity does not arrive (judged on what the groups take)
  node_choice  untaint, taint, terminate
The autoscaler loop and the simulator call ``decide`` and apply the Decision; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from clusterman.core.model import PoolSnapshot
from clusterman.core.resources import ResourceRequest
from clusterman.core.timestamps import format_time
from clusterman.decision.decision import Decision
from clusterman.decision.decision import Reason
from clusterman.decision.decision import action_of
from clusterman.decision.demand import total_request
from clusterman.decision.distribute import distribute
from clusterman.decision.exact import ZERO
from clusterman.decision.exact import exact
from clusterman.decision.exact import show
from clusterman.decision.exact import signed
from clusterman.decision.limits import clamp
from clusterman.decision.loss_guard import NodeMemory
from clusterman.decision.node_choice import NodeActions
from clusterman.decision.node_choice import choose
from clusterman.decision.policy import ScalingPolicy
from clusterman.decision.pool_view import PoolView
from clusterman.decision.pool_view import view_of
from clusterman.decision.scale_lock import ScaleLock
from clusterman.decision.slots import largest_in
from clusterman.decision.state import AutoscalerState
from clusterman.decision.target import propose
from clusterman.decision.utilisation import Utilisation
from clusterman.decision.utilisation import measure


def decide(
    snapshot: PoolSnapshot,
    requests: Mapping[str, ResourceRequest],
    policy: ScalingPolicy,
    state: AutoscalerState,
    now: float,
    hold_scale_down: str = "",
) -> Decision:
    """What the pool should look like at ``now`` (Unix seconds), and why.

    ``requests`` holds one request per app (its signal's answer, the default signal's, or
    ``demand_from_snapshot`` for internal pools). ``hold_scale_down`` names a reason the caller
    knows for not shrinking this run (e.g. a resource group it could not read). Raises
    SnapshotError for a snapshot it cannot trust; the caller then keeps the pool as it is.
    """
    view = view_of(snapshot)
    util = measure(view, total_request(requests), policy.excluded_resources)
    T, W = view.target, view.ready_total
    live_ready = sum((view.ready_weight[g.id] for g in view.live_groups), ZERO)
    notes = list(util.notes)
    if view.ignored:
        notes.append(f"{view.ignored} nodes outside the pool's groups ignored")
    joined = _joined_ids(view) if policy.prevent_scale_down_after_capacity_loss else frozenset()
    lost = _capacity_loss(joined, policy, state.memory)
    blocked = lost or hold_scale_down
    breaker = state.breaker.observe(live_ready)

    held = _hold_reason(view, state.scale_lock, live_ready, now)
    if held:
        lock = state.scale_lock if view.live_groups else ScaleLock()
        after = AutoscalerState(lock, breaker, _remember(snapshot, joined, state.memory, ()))
        as_is = {g.id: exact(g.target_capacity) for g in view.groups.values()}  # a hold changes nothing
        why = Reason.SCALE_LOCK if view.live_groups else Reason.NO_GROUPS
        return _decision(view, util, T, as_is, NodeActions(), held, notes, after, why)

    slot = largest_in(view, snapshot.pending) if policy.slot_reserve else None
    proposal = propose(view, util, policy, slot)
    clamped = clamp(T, proposal.target, policy, blocked, Reason.CAPACITY_LOSS if lost else Reason.HELD)
    why = clamped.reason
    reason = proposal.reason
    if clamped.notes:
        reason += f"; limited by {', '.join(clamped.notes)} → {show(clamped.target)}"
    elif blocked:
        notes.append(blocked)
    unchanged = clamped.target == T
    group_targets = _current_targets(view) if unchanged else distribute(view.groups.values(), clamped.target)
    achieved = _live_sum(view, group_targets)
    if achieved != clamped.target:
        notes.append(f"the groups' own bounds allow {show(achieved)}")

    lock = ScaleLock()
    if achieved > T:
        allowed, breaker = breaker.try_raise(
            achieved, now, policy.scale_up_failure_threshold, policy.scale_up_failure_cooldown_seconds
        )
        if allowed:
            lock = ScaleLock.take(now, policy.scale_up_cool_down_period_seconds, achieved)
        else:
            notes.append(
                f"breaker open: {breaker.failures} scale-ups in a row did not bring their capacity: "
                f"hold target {show(T)}"
            )
            group_targets, achieved = _current_targets(view), T
            why = Reason.BREAKER
    elif achieved < T:
        breaker = breaker.withdraw()

    actions = choose(view, group_targets, policy, now, may_remove=not blocked)
    if actions.kept:
        first = actions.kept[0]
        more = f" (and {len(actions.kept) - 1} more)" if len(actions.kept) > 1 else ""
        notes.append(f"node {first}{more} {actions.reasons[first]}")
    waiting = achieved - W - actions.untainted_weight + actions.tainted_weight
    if achieved <= T and waiting > 0:
        notes.append(f"{show(waiting)} already requested, waiting to join")
    after = AutoscalerState(lock, breaker, _remember(snapshot, joined, state.memory, actions.terminate))
    # The arrow is the target's change, as the action, the target shown and the event: the rule
    # sized the ready capacity, so when that differs from the target both are named.
    head = f"{reason} → {signed(achieved - T)}" + (f" from target {show(T)} (ready {show(W)})" if W != T else "")
    return _decision(view, util, T, group_targets, actions, head, notes, after, why)


def _hold_reason(view: PoolView, lock: ScaleLock, live_ready: Fraction, now: float) -> str:
    if not view.live_groups:
        return "no resource group to scale (none, or all stale): hold"
    if lock.held(now, live_ready):
        return (
            f"scale lock held until {format_time(lock.until)} (scale_up_cool_down_period): "
            f"{show(live_ready)} of {lock.requested:g} requested units ready: hold"
        )
    return ""


def _joined_ids(view: PoolView) -> frozenset[str]:
    return frozenset(n.id for n in (*view.ready, *view.tainted, *view.cordoned))


def _capacity_loss(joined: frozenset[str], policy: ScalingPolicy, memory: NodeMemory) -> str:
    """Why scale-down is blocked this run ("" when it is not)."""
    if not policy.prevent_scale_down_after_capacity_loss or not memory.joined:
        return ""
    lost = memory.lost(joined)
    if lost <= policy.instance_loss_threshold:
        return ""
    limit = policy.instance_loss_threshold
    return f"no scale-down: {lost} nodes lost since the last run > instance_loss_threshold {limit}"


def _remember(
    snapshot: PoolSnapshot, joined: frozenset[str], memory: NodeMemory, terminated: tuple[str, ...]
) -> NodeMemory:
    if not joined:
        return NodeMemory()
    return memory.remember(joined, (n.id for n in snapshot.nodes), terminated)


def _why_terminated(actions: NodeActions) -> str:
    """Orphans (instances that never joined) leave for their own reason, not for the utilisation
    the line starts with: say it ("" when no orphan is terminated)."""
    whys = [actions.reasons.get(n, "").rpartition("terminate: ")[2] for n in actions.terminate]
    orphans = [w for w in whys if w.startswith("orphan")]
    if not orphans:
        return ""
    more = f"; {len(orphans) - 1} more orphan(s)" if len(orphans) > 1 else ""
    return f"{orphans[0]}{more}"


def _current_targets(view: PoolView) -> dict[str, Fraction]:
    """The live groups' targets as they are; stale groups drained to 0."""
    return {g.id: Fraction(0) if g.stale else exact(g.target_capacity) for g in view.groups.values()}


def _live_sum(view: PoolView, targets: dict[str, Fraction]) -> Fraction:
    return sum((targets[g.id] for g in view.live_groups), ZERO)


def _decision(
    view: PoolView,
    util: Utilisation,
    T: Fraction,
    group_targets: dict[str, Fraction],
    actions: NodeActions,
    head: str,
    notes: list[str],
    state: AutoscalerState,
    reason: Reason,
) -> Decision:
    target = _live_sum(view, group_targets)
    verbs = (("untaint", actions.untaint), ("taint", actions.taint), ("terminate", actions.terminate))
    counts = ", ".join(f"{verb} {len(ids)}" for verb, ids in verbs if ids)
    why = _why_terminated(actions)
    if why:
        counts += f" ({why})"
    explanation = "; ".join([head, *notes, *([counts] if counts else [])])
    return Decision(
        action=action_of(T, target, actions.untainted_weight, actions.tainted_weight),
        current_capacity=view.ready_total,
        current_target=T,
        target_capacity=target,
        group_targets=group_targets,
        explanation=explanation,
        reason=reason,
        utilisation=dict(util.ratios),
        most_constrained=util.most_constrained,
        demand=util.demand,
        load=util.load,
        capacity=util.capacity,
        untaint=actions.untaint,
        taint=actions.taint,
        terminate=actions.terminate,
        node_reasons=actions.reasons,
        state=state,
    )
