"""The decision: a pure function of the pool's snapshot, the apps' requests, the policy, the state
carried from the previous decision, and the time (docs/scaling.md).

The stages, each its own module and testable alone:
  pool_view    which nodes count, exact totals
  utilisation  load (demand + slack) over ready capacity, the most constrained resource
  target       the target before limits (Clusterman's rules, Escalator's math)
  limits       Clusterman's clamping of the change
  distribute   the new total across resource groups
  consolidate  when nothing is in flight: drain a node whose pods fit elsewhere, to remove it or to
               keep it as whole places (placement.py predicts where its pods go)
  breaker      no raising while requested capacity does not arrive (judged on what the groups take)
  node_choice  untaint, taint, terminate
The autoscaler loop and the simulator call ``decide`` and apply the Decision; nothing here does I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from fractions import Fraction

from clusterman.core.model import NO_TIME
from clusterman.core.model import PoolSnapshot
from clusterman.core.notices import NO_NOTICES
from clusterman.core.notices import Notice
from clusterman.core.resources import ResourceRequest
from clusterman.core.timestamps import format_time
from clusterman.decision.autoscaler_state import AutoscalerState
from clusterman.decision.consolidate import KEEP_GIVE_UP_SECONDS
from clusterman.decision.consolidate import OFF
from clusterman.decision.consolidate import Choice
from clusterman.decision.consolidate import Consolidation
from clusterman.decision.consolidate import consolidate
from clusterman.decision.demand import demand_from_snapshot
from clusterman.decision.demand import total_request
from clusterman.decision.disruption import DisruptionState
from clusterman.decision.distribute import distribute
from clusterman.decision.drains import DrainActions
from clusterman.decision.drains import Leavers
from clusterman.decision.drains import described
from clusterman.decision.drains import drain_actions
from clusterman.decision.drains import leavers
from clusterman.decision.exact import ZERO
from clusterman.decision.exact import exact
from clusterman.decision.exact import show
from clusterman.decision.exact import signed
from clusterman.decision.holds import Hold
from clusterman.decision.holds import HoldReason
from clusterman.decision.holds import shown
from clusterman.decision.joining import hedged
from clusterman.decision.joining import held_while_joining
from clusterman.decision.limits import clamp
from clusterman.decision.loss_guard import NodeMemory
from clusterman.decision.node_choice import NodeActions
from clusterman.decision.node_choice import choose
from clusterman.decision.policy import ConsolidationPolicy
from clusterman.decision.policy import ScalingPolicy
from clusterman.decision.pool_view import PoolView
from clusterman.decision.pool_view import view_of
from clusterman.decision.result import Decision
from clusterman.decision.result import Reason
from clusterman.decision.result import action_of
from clusterman.decision.scale_lock import ScaleLock
from clusterman.decision.slots import Places
from clusterman.decision.slots import largest_in
from clusterman.decision.spare import spare_of
from clusterman.decision.target import Proposal
from clusterman.decision.target import propose
from clusterman.decision.utilisation import Utilisation
from clusterman.decision.utilisation import measure


def decide(
    snapshot: PoolSnapshot,
    requests: Mapping[str, ResourceRequest],
    policy: ScalingPolicy,
    state: AutoscalerState,
    now: float,
    holds: tuple[Hold, ...] = (),
    unseen: Fraction | None = ZERO,
    notices: tuple[Notice, ...] = NO_NOTICES,
    ahead: Fraction = ZERO,
) -> Decision:
    """What the pool should look like at ``now`` (Unix seconds), and why.

    ``requests`` holds one request per app (its signal's answer, the default signal's, or
    ``demand_from_snapshot`` for internal pools). ``holds`` are reasons the caller knows for not
    shrinking this run (e.g. a resource group it could not read). ``unseen``: the capacity of the
    groups that could not be read (their last targets known), which counts within the pool's
    min and max; None when not known: the pool does not grow. ``notices``: nodes that must go
    for a reason of their own (a Spot interruption, a migration): they leave the ready capacity
    now, and their replacement is asked for in this run (drains.py). ``ahead``: capacity asked
    beyond the decision's own sizing (a node migration's prescaling), within the pool's bounds;
    consolidation waits meanwhile. Raises SnapshotError for a snapshot it cannot trust; the caller
    then keeps the pool as it is.
    """
    full = view_of(snapshot)
    leave = leavers(full, notices, state.drains, now)
    view = leave.view  # the leaving nodes out of the ready capacity, targets net of replacements kept
    util = measure(view, total_request(requests), policy.excluded_resources)
    T, W = view.target, view.ready_total
    live_ready = sum((view.ready_weight[g.id] for g in view.live_groups), ZERO)
    notes = list(util.notes)
    if view.ignored:
        notes.append(f"{view.ignored} nodes outside the pool's groups ignored")
    joined = _joined_ids(view) if policy.prevent_scale_down_after_capacity_loss else frozenset()
    blocked = _capacity_loss(joined, policy, state.memory) or holds  # the loss is named alone
    breaker = state.breaker.observe(live_ready)

    held = _hold_reason(view, state.scale_lock, live_ready, now)
    if held:
        lock = state.scale_lock if view.live_groups else ScaleLock()
        # a hold changes nothing, but what leaves for a notice goes on (the cloud takes it anyway)
        drains = _drains(leave, view, NodeActions(), frozenset(), state, policy, now)
        actions = _with_drains(NodeActions(), drains, view)
        # what consolidation spent and keeps is remembered across a hold as across any run
        memory = _remember(snapshot, joined, state.memory, actions.terminate)
        after = AutoscalerState(lock, breaker, memory, state.disruption, drains.state)
        as_is = {g.id: exact(g.target_capacity) for g in view.groups.values()}
        as_is = _replaced(view, as_is, drains, notes)
        why = Reason.SCALE_LOCK if view.live_groups else Reason.NO_GROUPS
        return _decision(view, util, full.target, as_is, actions, held, notes, after, why, drains=drains)

    slot = largest_in(view, snapshot.pending) if policy.slot_reserve or policy.spare else None
    places = Places(view, slot) if slot is not None and W > 0 else None
    spare = spare_of(view, util, demand_from_snapshot(snapshot), slot) if policy.spare else None
    proposal = propose(view, util, policy, slot, places, spare=spare)
    pods_waiting = _pods_waiting(snapshot)
    proposal = hedged(proposal, view, policy.scale_up_hedge, pods_waiting)
    if pods_waiting and not blocked:  # a hold already keeps the target, and names itself
        proposal = held_while_joining(proposal, view, now, policy.max_capacity)
    keeping = _keeping(view, state.disruption, now, policy.consolidation)
    plan = OFF
    if policy.consolidation.off_because:  # configured on, but it cannot act here: say so every run
        plan = Consolidation(note=f"consolidation off: {policy.consolidation.off_because}")
        notes.append(plan.note)
    if policy.consolidation.enabled:
        busy = "a node migration runs" if ahead else ""
        busy = busy or _in_flight(view, snapshot, proposal, blocked, keeping, policy, state.disruption, now)
        resting = state.drains.resting(now, policy.draining)
        plan = consolidate(view, places, policy, proposal.asked, state.disruption, now, busy, resting)
        if plan.gained:  # a node drained to be kept: its places come, and the pool shrinks no further now
            again = propose(view, util, policy, slot, places, plan.gained, spare)
            proposal = again if again.target >= T else Proposal(T, f"{again.reason}; keep {show(T)}", again.asked)
        elif plan.removed:
            proposal = Proposal(T - plan.removed, proposal.reason, proposal.asked)
    if ahead:
        reason = f"{proposal.reason}; + {show(ahead)} asked ahead for a node migration"
        proposal = Proposal(proposal.target + ahead, reason, proposal.asked)
    clamped = clamp(T, proposal.target, policy, blocked, unseen)
    why = Reason.CONSOLIDATION if plan.removed else clamped.reason
    reason = proposal.reason
    if clamped.notes:
        reason += f"; limited by {', '.join(clamped.notes)} → {show(clamped.target)}"
    elif blocked:
        notes.append(shown(blocked))
    notes += plan.lines()
    unchanged = clamped.target == T
    if plan.removed:
        group_targets = _current_targets(view)
        for c in plan.chosen:
            if c.choice is Choice.REMOVE:
                group_targets[c.group] -= c.weight
    elif unchanged:
        group_targets = _current_targets(view)
    else:
        group_targets = distribute(view.groups.values(), clamped.target)
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

    chosen = {c.node: (c.choice is Choice.REMOVE, c.line(plan.slot)) for c in plan.chosen}
    actions = choose(
        view, group_targets, policy, now, not blocked, chosen, keeping,
        frozenset(leave.leaving), state.drains.resting(now, policy.draining),
    )  # fmt: skip
    drains = _drains(leave, view, actions, keeping, state, policy, now)
    chosen_untaint = frozenset(actions.untaint)
    actions = _with_drains(actions, drains, view)
    if actions.kept:
        first = actions.kept[0]
        more = f" (and {len(actions.kept) - 1} more)" if len(actions.kept) > 1 else ""
        notes.append(f"node {first}{more} {actions.reasons[first]}")
    waiting = achieved - W - actions.untainted_weight + actions.tainted_weight
    if achieved <= T and waiting > 0:
        notes.append(f"{show(waiting)} already requested, waiting to join")
    disruption = _disruption_after(view, state.disruption, plan, actions, policy.consolidation.enabled, now)
    if achieved > T and policy.consolidation.enabled:
        disruption = replace(disruption, grew_at=now)
    memory = _remember(snapshot, joined, state.memory, actions.terminate)
    after = AutoscalerState(lock, breaker, memory, disruption, drains.state)
    group_targets = _replaced(view, group_targets, drains, notes)
    # a scale-down's drain given up: its node was taken out of the target when it was tainted (a
    # notice's node never was: only its replacement goes)
    back = [n for n in drains.untaint if n not in chosen_untaint and n not in leave.leaving]
    group_targets = _given_back(view, group_targets, back)
    # The arrow is the target's change, as the action, the target shown and the event: the rule
    # sized the ready capacity, so when that differs from the target both are named.
    head = f"{reason} → {signed(achieved - T)}" + (f" from target {show(T)} (ready {show(W)})" if W != T else "")
    return _decision(view, util, full.target, group_targets, actions, head, notes, after, why, plan, drains)


def _drains(
    leave: Leavers,
    view: PoolView,
    actions: NodeActions,
    keeping: frozenset[str],
    state: AutoscalerState,
    policy: ScalingPolicy,
    now: float,
) -> DrainActions:
    return drain_actions(
        leave, view, actions.taint, frozenset(actions.terminate), frozenset(actions.untaint), keeping,
        state.drains, policy.draining, now, math.isfinite(policy.hard_delete_grace_period_seconds),
    )  # fmt: skip


def _with_drains(actions: NodeActions, drains: DrainActions, view: PoolView) -> NodeActions:
    """The scale-down's node actions with the drain machinery's: the nodes leaving for a notice
    tainted and terminated, the drains given up untainted (their weight ready again)."""
    if not (drains.taint or drains.terminate or drains.untaint):
        return actions
    weights = {n.id: n.weight for n in view.tainted}
    back = [n for n in drains.untaint if n not in actions.untaint]
    return replace(
        actions,
        untaint=(*actions.untaint, *back),
        taint=(*actions.taint, *(n for n in drains.taint if n not in actions.taint)),
        terminate=(*actions.terminate, *(n for n in drains.terminate if n not in actions.terminate)),
        reasons={**actions.reasons, **drains.reasons},
        untainted_weight=actions.untainted_weight + sum((exact(weights.get(n, 0.0)) for n in back), ZERO),
    )


def _replaced(
    view: PoolView, targets: dict[str, Fraction], drains: DrainActions, notes: list[str]
) -> dict[str, Fraction]:
    """The groups' targets with the capacity kept beside the nodes leaving for a notice (each
    group within its own maximum)."""
    if not drains.replacement:
        notes.extend(drains.notes)
        return targets
    targets = dict(targets)
    for group_id, weight in sorted(drains.replacement.items()):
        group = view.groups[group_id]
        if group.stale or group_id not in targets:
            continue
        wanted = targets[group_id] + weight
        targets[group_id] = min(wanted, exact(group.max_capacity)) if group.max_capacity != float("inf") else wanted
        if targets[group_id] < wanted:
            notes.append(f"group {group_id} at its max_capacity: {show(wanted - targets[group_id])} not replaced")
    notes.extend(drains.notes)
    notes.append(described(drains.replacement, {e.node_id: e for e in drains.state.leaving}))
    return targets


def _given_back(view: PoolView, targets: dict[str, Fraction], back: list[str]) -> dict[str, Fraction]:
    """The groups' targets with the nodes whose drain was given up counted again: the node stays,
    and a group's target below its instances would have the cloud end one of them (each group
    within its own maximum)."""
    if not back:
        return targets
    targets = dict(targets)
    for node in view.tainted:
        group = view.groups.get(node.group_id)
        if node.id not in back or group is None or group.stale or node.group_id not in targets:
            continue
        wanted = targets[node.group_id] + exact(node.weight)
        limit = exact(group.max_capacity) if group.max_capacity != float("inf") else wanted
        targets[node.group_id] = min(wanted, limit)
    return targets


def _keeping(view: PoolView, state: DisruptionState, now: float, policy: ConsolidationPolicy) -> frozenset[str]:
    """Nodes drained to be kept that are still tainted and not given up on. Given up, a node is
    untainted as any other, its pods left in place: when they would not leave for
    ``KEEP_GIVE_UP_SECONDS``, or when a reload turned consolidation off or lowered its eviction
    budget below what the last hour spent (the rest of the drain would be evictions the
    configuration no longer allows; the budget is never above it otherwise)."""
    if not state.keeping or not policy.enabled or state.evicted(now) > policy.evictions_per_hour:
        return frozenset()
    tainted = {n.id for n in view.tainted}
    return frozenset(n for n, at in state.keeping if n in tainted and now - at < KEEP_GIVE_UP_SECONDS)


def _in_flight(
    view: PoolView,
    snapshot: PoolSnapshot,
    proposal: Proposal,
    blocked: tuple[Hold, ...],
    keeping: frozenset[str],
    policy: ScalingPolicy,
    state: DisruptionState,
    now: float,
) -> str:
    """Why consolidation must not start anything this run ("" when the pool is settled)."""
    T = view.target
    limit = policy.orphan_instance_uptime_threshold_seconds
    joining = sum(1 for n in view.orphans if n.launched_at == NO_TIME or now - n.launched_at < limit)
    for n in view.tainted:
        if not n.usage.tasks:
            return f"node {n.id} leaves or comes back this run"
        if n.id in keeping:
            return f"node {n.id} is being drained to be kept"
    if blocked:
        return shown(blocked)
    if joining:
        return f"{joining} nodes joining"
    if _pods_waiting(snapshot):
        return "pods pending"
    grew = now - state.grew_at
    if state.grew_at != NO_TIME and grew < policy.consolidation.consolidate_after_seconds:
        return f"the pool grew {grew:g}s ago < consolidate_after {policy.consolidation.consolidate_after_seconds:g}s"
    if proposal.asked is None:
        return "no utilisation to keep"
    if proposal.asked > T:
        return "utilisation asks for more"
    if proposal.target < T:
        return "the pool scales down"
    return ""


def _pods_waiting(snapshot: PoolSnapshot) -> bool:
    return any(t.asks_for_capacity for t in snapshot.pending)


def _disruption_after(
    view: PoolView, before: DisruptionState, plan: Consolidation, actions: NodeActions, enabled: bool, now: float
) -> DisruptionState:
    """What consolidation remembers for the next run: nodes drained to be kept stay remembered
    while they are tainted and not untainted now; one untainted with its pods was given up on."""
    state = plan.state if enabled else before
    if not state.keeping:
        return state
    still = {n.id for n in view.tainted} - set(actions.untaint) - set(actions.terminate)
    released = [n for n, _ in state.keeping if n not in still and n not in {c.node for c in plan.chosen}]
    if not released:
        return state
    busy = {n.id for n in view.tainted if n.usage.tasks}
    given_up = [n for n in released if n in busy and n in actions.untaint]
    return state.after_release(released, given_up, now)


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


def _capacity_loss(joined: frozenset[str], policy: ScalingPolicy, memory: NodeMemory) -> tuple[Hold, ...]:
    """Why scale-down is blocked this run (nothing when it is not)."""
    if not policy.prevent_scale_down_after_capacity_loss or not memory.joined:
        return ()
    lost = memory.lost(joined)
    if lost <= policy.instance_loss_threshold:
        return ()
    limit = policy.instance_loss_threshold
    text = f"no scale-down: {lost} nodes lost since the last run > instance_loss_threshold {limit}"
    return (Hold(HoldReason.CAPACITY_LOSS, text),)


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
    consolidation: Consolidation = OFF,
    drains: DrainActions | None = None,
) -> Decision:
    """``T``: the groups' targets as they are (the replacements kept for leaving nodes included)."""
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
        terminate_with=actions.terminate_with,
        node_reasons=actions.reasons,
        state=state,
        consolidation=consolidation,
        drains=drains or DrainActions(),
        paced=drains is not None,
    )
