"""The ``clusterman plan`` document: one JSON object in, checked field by field (docs/scaling.md).

Every problem raises PlanInputError naming the file and the field (``nodes[3].allocatable.cpus``),
never a traceback. The document's ``config`` block takes the same keys as a pool file's
``scaling_limits`` and ``autoscaling`` blocks, checked by the same schema.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import replace
from fractions import Fraction
from typing import Any

from clusterman.core.config import AutoscalingDefaults
from clusterman.core.config import DrainingConfig
from clusterman.core.config import PoolAutoscaling
from clusterman.core.config import ScalingLimits
from clusterman.core.config import Scheduler
from clusterman.core.config_schema import Check
from clusterman.core.config_schema import TooLongNumber
from clusterman.core.config_schema import as_flag
from clusterman.core.config_schema import as_number
from clusterman.core.config_schema import checked
from clusterman.core.config_schema import describe
from clusterman.core.config_schema import non_negative
from clusterman.core.config_schema import parse
from clusterman.core.config_schema import positive
from clusterman.core.model import NO_TIME
from clusterman.core.model import Node
from clusterman.core.model import NodeState
from clusterman.core.model import Offer
from clusterman.core.model import PoolSnapshot
from clusterman.core.model import ResourceGroup
from clusterman.core.model import Task
from clusterman.core.resources import NO_OPINION
from clusterman.core.resources import RESOURCE_NAMES
from clusterman.core.resources import Amount
from clusterman.core.resources import ResourceRequest
from clusterman.core.resources import Resources
from clusterman.decision.autoscaler_state import AutoscalerState
from clusterman.decision.breaker import Breaker
from clusterman.decision.demand import INTERNAL_APP
from clusterman.decision.demand import demand_from_snapshot
from clusterman.decision.disruption import DisruptionState
from clusterman.decision.drains import DrainState
from clusterman.decision.exact import ZERO
from clusterman.decision.exact import exact
from clusterman.decision.holds import Hold
from clusterman.decision.holds import HoldReason
from clusterman.decision.loss_guard import NodeMemory
from clusterman.decision.policy import ScalingPolicy
from clusterman.decision.policy import pool_policy
from clusterman.decision.scale_lock import ScaleLock
from clusterman.errors import UserError


class PlanInputError(UserError, ValueError):
    def __init__(self, source: str, path: str, problem: str) -> None:
        super().__init__(f"{source}: {path}: {problem}" if path else f"{source}: {problem}")


@dataclass(frozen=True)
class PlanInput:
    snapshot: PoolSnapshot
    requests: dict[str, ResourceRequest]
    policy: ScalingPolicy
    state: AutoscalerState
    now: float
    holds: tuple[Hold, ...] = ()
    unseen: Fraction | None = ZERO


TOP_KEYS = ("now", "config", "groups", "nodes", "pods", "demand", "requests", "state", "holds", "unseen")
# the pool file's two blocks, and what ``clusterman plan --write-snapshot`` adds so the policy is
# the one the pool runs: the main file's ``autoscaling`` defaults, the pool's draining, its scheduler
CONFIG_KEYS = ("scaling_limits", "autoscaling", "defaults", "draining_enabled", "draining", "scheduler")
POOL_KEYS = CONFIG_KEYS[3:]
GROUP_KEYS = ("id", "target_capacity", "min_capacity", "max_capacity", "stale", "fulfilled_capacity",
              "node_resources", "kind", "offers")  # fmt: skip
OFFER_KEYS = ("instance_type", "weight", "resources")
NODE_KEYS = ("id", "group", "weight", "state", "allocatable", "reserved", "launched_at", "tainted_at",
             "instance_id", "instance_type", "market")  # fmt: skip
POD_KEYS = ("id", "requests", "node", "app", "daemon", "revocable", "from_reservation", "safe_to_evict", "batch",
            "do_not_disrupt", "controller", "local_storage")  # fmt: skip


def load_plan(text: str, source: str, default_now: float) -> PlanInput:
    """The plan document from its JSON text; every problem a PlanInputError naming the field."""
    try:
        doc = json.loads(text, parse_int=_json_int)
    except json.JSONDecodeError as e:
        raise PlanInputError(source, "", f"not valid JSON: {e}") from e
    return parse_plan(doc, source, default_now)


def _json_int(text: str) -> int | TooLongNumber:
    """An integer, or a marker the field's check names, where Python refuses to convert it."""
    try:
        return int(text)
    except ValueError:
        return TooLongNumber(sum(c.isdigit() for c in text))


def parse_plan(doc: Any, source: str, default_now: float) -> PlanInput:
    r = _Reader(source)
    top = r.mapping(doc, "", TOP_KEYS)
    now = r.number(top.get("now", default_now), "now")
    config = r.mapping(top.get("config", {}), "config", CONFIG_KEYS)
    limits = parse(ScalingLimits, config.get("scaling_limits"), source, "config.scaling_limits")
    autoscaling = parse(PoolAutoscaling, config.get("autoscaling"), source, "config.autoscaling")
    defaults = parse(
        AutoscalingDefaults, config.get("defaults"), source, "config.defaults", ignored=AutoscalingDefaults.IGNORED_KEYS
    )
    if any(key in config for key in POOL_KEYS):
        policy = pool_policy(
            limits, autoscaling, defaults,
            r.flag(config.get("draining_enabled", False), "config.draining_enabled"),
            parse(DrainingConfig, config.get("draining"), source, "config.draining"),
            _scheduler(r, config.get("scheduler", Scheduler.KUBERNETES.value), "config.scheduler"),
            source,
        )  # fmt: skip
    else:  # a document written by hand: the two blocks alone
        policy = ScalingPolicy.from_config(limits, autoscaling, defaults, source=source)

    if "groups" not in top:  # an empty list is a pool whose groups were not found: the decision says so
        raise PlanInputError(source, "groups", "required key is missing (a list of the pool's resource groups)")
    group_specs = r.items(top["groups"], "groups")
    node_specs = r.items(top.get("nodes", []), "nodes")
    nodes = [_node(r, spec, f"nodes[{i}]") for i, spec in enumerate(node_specs)]
    group_ids = [r.string(r.mapping(g, f"groups[{i}]", GROUP_KEYS).get("id"), f"groups[{i}].id")
                 for i, g in enumerate(group_specs)]  # fmt: skip
    _unique(r, group_ids, "groups", "group id")
    _unique(r, [n.id for n in nodes], "nodes", "node id")
    for i, n in enumerate(nodes):
        if n.group_id not in group_ids:
            raise PlanInputError(
                source, f"nodes[{i}].group", f"unknown group {n.group_id!r} (groups: {', '.join(group_ids)})"
            )
    groups = tuple(_group(r, spec, f"groups[{i}]", nodes) for i, spec in enumerate(group_specs))

    tasks: dict[str, list[Task]] = {n.id: [] for n in nodes}
    pending: list[Task] = []
    for i, spec in enumerate(r.items(top.get("pods", []), "pods")):
        task, node_id = _pod(r, spec, f"pods[{i}]")
        if node_id is None:
            pending.append(task)
        elif node_id in tasks:
            tasks[node_id].append(task)
        else:
            raise PlanInputError(source, f"pods[{i}].node", f"unknown node {node_id!r}")
    snapshot = PoolSnapshot(
        taken_at=now,
        nodes=tuple(replace(n, tasks=tuple(tasks[n.id])) for n in nodes),
        groups=groups,
        pending=tuple(pending),
    )
    if "demand" in top and "requests" in top:
        raise PlanInputError(source, "demand", "give either demand or requests (per app), not both")
    if "demand" in top:
        requests = {INTERNAL_APP: _request(r, top["demand"], "demand")}
    elif "requests" in top:
        per_app = r.mapping(top["requests"], "requests")
        requests = {str(app): _request(r, v, f"requests.{app}") for app, v in per_app.items()}
    else:
        requests = {INTERNAL_APP: demand_from_snapshot(snapshot)}
    state = _state(r, top.get("state", {}), "state")
    holds = tuple(_hold(r, h, f"holds[{i}]") for i, h in enumerate(r.items(top.get("holds", []), "holds")))
    unseen = top.get("unseen", 0)
    unseen_capacity = None if unseen is None else exact(r.number(unseen, "unseen", non_negative))
    return PlanInput(snapshot, requests, policy, state, now, holds, unseen_capacity)


def _scheduler(r: _Reader, value: Any, path: str) -> Scheduler:
    try:
        return Scheduler(value)
    except ValueError:
        raise r.fail(path, f"expected one of {', '.join(s.value for s in Scheduler)}, got {value!r}") from None


def _hold(r: _Reader, value: Any, path: str) -> Hold:
    m = r.mapping(value, path, ("reason", "text"))
    reasons = [h.value for h in HoldReason]
    if m.get("reason") not in reasons:
        raise r.fail(f"{path}.reason", f"expected one of {', '.join(reasons)}, got {m.get('reason')!r}")
    return Hold(HoldReason(m["reason"]), r.string(m.get("text"), f"{path}.text"))


def plan_document(
    config: Mapping[str, Any],
    snapshot: PoolSnapshot,
    requests: Mapping[str, ResourceRequest],
    state: AutoscalerState,
    now: float,
    holds: tuple[Hold, ...] = (),
    unseen: Fraction | None = ZERO,
) -> dict[str, Any]:
    """The document ``parse_plan`` reads back into these inputs (``clusterman plan --write-snapshot``):
    a live pool's run, to replay with ``clusterman plan --snapshot`` or attach to a bug report.
    Nodes outside the pool's groups are left out: the decision does not count them."""
    group_ids = {g.id for g in snapshot.groups}
    nodes = [n for n in snapshot.nodes if n.group_id in group_ids]
    pods = [_pod_json(t, n.id) for n in nodes for t in n.tasks] + [_pod_json(t, None) for t in snapshot.pending]
    return {
        "now": now,
        "config": dict(config),
        "groups": [_group_json(g) for g in snapshot.groups],
        "nodes": [_node_json(n) for n in nodes],
        "pods": pods,
        "requests": {app: _request_json(request) for app, request in requests.items()},
        "state": state.as_json(),
        "holds": [{"reason": h.reason.value, "text": h.text} for h in holds],
        "unseen": None if unseen is None else float(unseen),
    }


def _amounts(resources: Resources) -> dict[str, float]:
    return {name: value for name, value in resources.items() if value}


def _when(at: float) -> float | None:
    return None if at == NO_TIME else at


def _group_json(g: ResourceGroup) -> dict[str, Any]:
    return {
        "id": g.id, "target_capacity": g.target_capacity, "fulfilled_capacity": g.fulfilled_capacity,
        "min_capacity": g.min_capacity, "max_capacity": None if math.isinf(g.max_capacity) else g.max_capacity,
        "stale": g.stale, "kind": g.kind, "node_resources": _amounts(g.node_resources),
        "offers": [{"instance_type": o.instance_type, "weight": o.weight, "resources": _amounts(o.resources)}
                   for o in g.offers],
    }  # fmt: skip


def _node_json(n: Node) -> dict[str, Any]:
    return {
        "id": n.id, "group": n.group_id, "weight": n.weight, "state": n.state.value,
        "allocatable": _amounts(n.allocatable), "reserved": _amounts(n.reserved),
        "launched_at": _when(n.launched_at), "tainted_at": _when(n.tainted_at),
        "instance_id": n.instance_id, "instance_type": n.instance_type, "market": n.market,
    }  # fmt: skip


def _pod_json(t: Task, node: str | None) -> dict[str, Any]:
    return {
        "id": t.id, "requests": _amounts(t.requests), "node": node, "app": t.app, "daemon": t.daemon,
        "revocable": t.revocable, "from_reservation": t.from_reservation, "safe_to_evict": t.safe_to_evict,
        "batch": t.batch, "do_not_disrupt": t.do_not_disrupt, "controller": t.controller,
        "local_storage": t.local_storage,
    }  # fmt: skip


def _request_json(request: ResourceRequest) -> dict[str, float | None]:
    opinions = request.opinions()
    return {name: opinions.get(name) for name in RESOURCE_NAMES}


class _Reader:
    """The schema's value checks (core/config_schema.py), with the file and the field's path in every message."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, problem: str) -> PlanInputError:
        return PlanInputError(self.source, path, problem)

    def mapping(self, value: Any, path: str, known: tuple[str, ...] | None = None) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(path, f"expected an object, got {_describe(value)}")
        if known is not None:
            for key in value:
                if key not in known:
                    where = f"{path}.{key}" if path else str(key)
                    raise self.fail(where, f"unknown key (known: {', '.join(known)})")
        return value

    def items(self, value: Any, path: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list, got {_describe(value)}")
        return value

    def string(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(path, f"expected a non-empty string, got {_describe(value)}")
        return value

    def flag(self, value: Any, path: str) -> bool:
        try:
            return as_flag(value)
        except ValueError as e:
            raise self.fail(path, str(e)) from None

    def number(self, value: Any, path: str, check: Check | None = None) -> float:
        try:
            return checked(as_number(value), check)
        except ValueError as e:
            raise self.fail(path, str(e)) from None

    def resources(self, value: Any, path: str) -> Resources:
        amounts = self.mapping(value, path, RESOURCE_NAMES)
        return Resources(**{k: self.number(v, f"{path}.{k}", non_negative) for k, v in amounts.items()})


def _node(r: _Reader, spec: Any, path: str) -> Node:
    m = r.mapping(spec, path, NODE_KEYS)
    for key in ("id", "group", "allocatable"):
        if key not in m:
            raise r.fail(f"{path}.{key}", "required key is missing")
    allocatable = r.resources(m["allocatable"], f"{path}.allocatable")
    for name in ("cpus", "mem"):
        if name in m["allocatable"] and allocatable[name] <= 0:
            raise r.fail(f"{path}.allocatable.{name}", f"must be greater than 0, got {m['allocatable'][name]!r}")
    if not any(allocatable):
        raise r.fail(f"{path}.allocatable", "a node needs some allocatable resource")
    states = [s.value for s in NodeState]
    state = m.get("state", "ready")
    if state not in states:
        raise r.fail(f"{path}.state", f"expected one of {', '.join(states)}, got {state!r}")
    return Node(
        id=r.string(m["id"], f"{path}.id"),
        state=NodeState(state),
        allocatable=allocatable,
        group_id=r.string(m["group"], f"{path}.group"),
        instance_id=str(m.get("instance_id", "")),
        weight=r.number(m.get("weight", 1), f"{path}.weight", positive),
        launched_at=_time(r, m.get("launched_at"), f"{path}.launched_at"),
        tainted_at=_time(r, m.get("tainted_at"), f"{path}.tainted_at"),
        reserved=r.resources(m.get("reserved", {}), f"{path}.reserved"),
        instance_type=str(m.get("instance_type", "")),
        market=str(m.get("market", "")),
    )


def _group(r: _Reader, spec: Any, path: str, nodes: list[Node]) -> ResourceGroup:
    m = r.mapping(spec, path, GROUP_KEYS)
    if "target_capacity" not in m:
        raise r.fail(f"{path}.target_capacity", "required key is missing")
    gid = m["id"]
    lo = r.number(m.get("min_capacity", 0), f"{path}.min_capacity", non_negative)
    top = m.get("max_capacity")
    hi = math.inf if top is None else r.number(top, f"{path}.max_capacity", non_negative)
    if hi < lo:
        raise r.fail(f"{path}.max_capacity", f"is below min_capacity ({lo:g})")
    fulfilled = m.get("fulfilled_capacity")
    if fulfilled is None:
        counted = (NodeState.READY, NodeState.TAINTED, NodeState.CORDONED, NodeState.ORPHAN)
        fulfilled = sum(n.weight for n in nodes if n.group_id == gid and n.state in counted)
    return ResourceGroup(
        id=gid,
        target_capacity=r.number(m["target_capacity"], f"{path}.target_capacity", non_negative),
        fulfilled_capacity=r.number(fulfilled, f"{path}.fulfilled_capacity", non_negative),
        min_capacity=lo,
        max_capacity=hi,
        stale=r.flag(m.get("stale", False), f"{path}.stale"),
        kind=str(m.get("kind", "simulated")),
        node_resources=r.resources(m.get("node_resources", {}), f"{path}.node_resources"),
        offers=tuple(
            _offer(r, o, f"{path}.offers[{k}]") for k, o in enumerate(r.items(m.get("offers", []), f"{path}.offers"))
        ),
    )


def _offer(r: _Reader, spec: Any, path: str) -> Offer:
    m = r.mapping(spec, path, OFFER_KEYS)
    return Offer(
        instance_type=r.string(m.get("instance_type"), f"{path}.instance_type"),
        weight=r.number(m.get("weight", 1), f"{path}.weight", positive),
        resources=r.resources(m.get("resources", {}), f"{path}.resources"),
    )


def _pod(r: _Reader, spec: Any, path: str) -> tuple[Task, str | None]:
    m = r.mapping(spec, path, POD_KEYS)
    if "requests" not in m:
        raise r.fail(f"{path}.requests", "required key is missing")
    node = m.get("node")
    task = Task(
        id=str(m.get("id", path)),
        requests=r.resources(m["requests"], f"{path}.requests"),
        from_reservation=r.flag(m.get("from_reservation", False), f"{path}.from_reservation"),
        revocable=r.flag(m.get("revocable", False), f"{path}.revocable"),
        daemon=r.flag(m.get("daemon", False), f"{path}.daemon"),
        safe_to_evict=r.flag(m.get("safe_to_evict", True), f"{path}.safe_to_evict"),
        batch=r.flag(m.get("batch", False), f"{path}.batch"),
        app=str(m.get("app", "")),
        do_not_disrupt=r.flag(m.get("do_not_disrupt", False), f"{path}.do_not_disrupt"),
        controller=r.flag(m.get("controller", True), f"{path}.controller"),
        local_storage=r.flag(m.get("local_storage", False), f"{path}.local_storage"),
    )
    return task, (None if node is None else r.string(node, f"{path}.node"))


def _request(r: _Reader, value: Any, path: str) -> ResourceRequest:
    """A request: each resource a number, or null / absent for no opinion."""
    amounts = r.mapping(value, path, RESOURCE_NAMES)
    parsed: dict[str, Amount] = {
        k: NO_OPINION if v is None else r.number(v, f"{path}.{k}", non_negative) for k, v in amounts.items()
    }
    return ResourceRequest(**parsed)


def _state(r: _Reader, value: Any, path: str) -> AutoscalerState:
    """The ``state`` a previous plan printed, so decisions can be chained by hand."""
    m = r.mapping(value, path, ("scale_lock", "breaker", "memory", "disruption", "drains"))
    lock = r.mapping(m.get("scale_lock", {}), f"{path}.scale_lock", ("until", "requested"))
    br = r.mapping(m.get("breaker", {}), f"{path}.breaker", ("failures", "awaiting", "opened_at"))
    mem = r.mapping(m.get("memory", {}), f"{path}.memory", ("joined", "terminating"))

    def ids(key: str) -> frozenset[str]:
        where = f"{path}.memory.{key}"
        return frozenset(r.string(v, f"{where}[{i}]") for i, v in enumerate(r.items(mem.get(key, []), where)))

    try:
        disruption = DisruptionState.from_json(m.get("disruption"))
    except ValueError as e:
        raise r.fail(f"{path}.disruption", str(e).removeprefix("disruption").lstrip(".: ")) from None
    try:
        drains = DrainState.from_json(m.get("drains"))
    except ValueError as e:
        raise r.fail(f"{path}.drains", str(e).removeprefix("drains").lstrip(".: ")) from None
    failures = r.number(br.get("failures", 0), f"{path}.breaker.failures", non_negative)
    if not failures.is_integer():
        raise r.fail(f"{path}.breaker.failures", f"expected a whole number, got {br['failures']!r}")
    return AutoscalerState(
        scale_lock=ScaleLock(
            until=_time(r, lock.get("until"), f"{path}.scale_lock.until"),
            requested=r.number(lock.get("requested", 0), f"{path}.scale_lock.requested", non_negative),
        ),
        breaker=Breaker(
            failures=int(failures),
            awaiting=r.number(br.get("awaiting", 0), f"{path}.breaker.awaiting", non_negative),
            opened_at=_time(r, br.get("opened_at"), f"{path}.breaker.opened_at"),
        ),
        memory=NodeMemory(ids("joined"), ids("terminating")),
        disruption=disruption,
        drains=drains,
    )


def _time(r: _Reader, value: Any, path: str) -> float:
    return NO_TIME if value is None else r.number(value, path)


def _unique(r: _Reader, ids: list[str], path: str, what: str) -> None:
    seen: set[str] = set()
    for i, x in enumerate(ids):
        if x in seen:
            raise r.fail(f"{path}[{i}].id", f"{what} {x!r} appears twice")
        seen.add(x)


def _describe(value: Any) -> str:
    return describe(value, mapping="an object")
