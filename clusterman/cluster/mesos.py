"""The Mesos connector: a pool's agents and tasks, from the master's HTTP API (read only).

Two GETs per snapshot: ``/master/slaves`` (agents: ``resources``, ``reserved_resources`` per role,
``used_resources``, ``attributes``) and ``/master/frameworks`` (each framework's active ``tasks``).
Mesos writes a resource set as ``{"cpus": .., "mem": .., "disk": .., "gpus": .., "cpus_revocable":
..}``: revocable amounts carry the ``_revocable`` suffix, everything else is non-revocable.

The rules (docs/cluster.md has them with reasons):
  pool         the agent's ``pool`` attribute; an agent without one is in pool ``default``
  capacity     non-revocable ``resources``; reserved = the sum over roles of ``reserved_resources``
  tasks        STAGING/STARTING/RUNNING/KILLING; revocable when they use revocable resources;
               from a reservation when their role holds one on that agent
  executors    what ``used_resources`` shows beyond the tasks' own resources (executor overhead)
               is one more task, so allocated matches what Mesos (and Clusterman) report
  state        deactivated or draining: cordoned; inactive (the master lost it): unknown
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import replace
from typing import Any

import requests

from clusterman.cluster.connector import ClusterConnector
from clusterman.cluster.connector import ConnectorError
from clusterman.cluster.connector import SchedulerView
from clusterman.core.cloud_view import CloudViewSource
from clusterman.core.model import NO_TIME
from clusterman.core.model import Node
from clusterman.core.model import NodeState
from clusterman.core.model import Task
from clusterman.core.resources import RESOURCE_NAMES
from clusterman.core.resources import Resources

log = logging.getLogger(__name__)

ACTIVE_TASK_STATES = frozenset({"TASK_STAGING", "TASK_STARTING", "TASK_RUNNING", "TASK_KILLING"})
DEFAULT_PORT = 5050
OVERHEAD_EPSILON = 1e-6  # float dust in used − Σ tasks is not an executor


@dataclass(frozen=True)
class MesosPool:
    pool: str
    pool_attribute: str = "pool"
    default_pool: str = "default"  # Clusterman's rule for agents without the attribute
    # frameworks whose tasks are services, not batch work (Clusterman's key and default)
    non_batch_framework_prefixes: tuple[str, ...] = ("marathon",)


def master_url(fqdn: str) -> str:
    """Clusterman's ``mesos_master_fqdn`` is a bare host (port 5050); a URL or host:port also works."""
    if "://" in fqdn:
        return fqdn.rstrip("/")
    return f"http://{fqdn}" if ":" in fqdn else f"http://{fqdn}:{DEFAULT_PORT}"


def split_resources(amounts: Any, where: str) -> tuple[Resources, Resources]:
    """(non-revocable, revocable) from a Mesos resource object; ranges such as ``ports`` are skipped."""
    if amounts is None:
        return Resources(), Resources()
    if not isinstance(amounts, Mapping):
        raise ConnectorError(f"{where}: expected a resource object, got {type(amounts).__name__}")
    regular = dict.fromkeys(RESOURCE_NAMES, 0.0)
    revocable = dict.fromkeys(RESOURCE_NAMES, 0.0)
    for key, value in amounts.items():
        name, _, suffix = key.partition("_")
        if name not in regular or suffix not in ("", "revocable"):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != value:
            raise ConnectorError(f"{where}.{key}: expected a number >= 0, got {value!r}")
        (revocable if suffix else regular)[name] = float(value)
    return Resources(**regular), Resources(**revocable)


NANOS = 1_000_000_000
MAINTENANCE_SCHEDULE_PATH = "/master/maintenance/schedule"
# Our maintenance windows end their duration in these nanoseconds, so the read side can tell the
# machines the autoscaler is draining (tainted: it may terminate them) from an operator's
# maintenance (cordoned: neither capacity nor ours to remove). Mesos windows carry no other label.
OUR_WINDOW_SIGNATURE_NANOS = 1771


def is_our_window(window: Mapping[str, Any]) -> bool:
    duration = ((window.get("unavailability") or {}).get("duration") or {}).get("nanoseconds", 0)
    return int(duration) % 1_000_000 == OUR_WINDOW_SIGNATURE_NANOS


@dataclass(frozen=True)
class Machine:
    hostname: str
    ip: str

    @property
    def key(self) -> tuple[str, str]:
        """How the master tells machines apart: the hostname ignoring case, and the address."""
        return self.hostname.lower(), self.ip

    def json(self) -> dict[str, str]:
        return {k: v for k, v in (("hostname", self.hostname), ("ip", self.ip)) if v}

    def __str__(self) -> str:
        return f"{self.hostname or '?'} ({self.ip or '?'})"


def machine_from(obj: Mapping[str, Any]) -> Machine:
    return Machine(str(obj.get("hostname", "")), str(obj.get("ip", "")))


def scheduled(schedule: Mapping[str, Any]) -> dict[tuple[str, str], float]:
    """Machines in the schedule, by key, with the start of their window (Unix seconds)."""
    return {key: start for key, (start, _) in scheduled_windows(schedule).items()}


def scheduled_windows(schedule: Mapping[str, Any]) -> dict[tuple[str, str], tuple[float, bool]]:
    """Machines in the schedule, by key: (window start in Unix seconds, whether the window is ours)."""
    out: dict[tuple[str, str], tuple[float, bool]] = {}
    for window in schedule.get("windows") or ():
        start = ((window.get("unavailability") or {}).get("start") or {}).get("nanoseconds", 0)
        ours = is_our_window(window)
        for obj in window.get("machine_ids") or ():
            out[machine_from(obj).key] = (float(start) / NANOS, ours)
    return out


def agent_machine(agent: Mapping[str, Any]) -> Machine:
    return Machine(str(agent.get("hostname", "")), agent_ip(str(agent.get("pid", ""))))


def agent_ip(pid: str) -> str:
    """``slave(1)@10.0.0.1:5051`` -> ``10.0.0.1``."""
    return pid.partition("@")[2].rpartition(":")[0]


def agent_state(agent: Mapping[str, Any]) -> NodeState:
    """Deactivated or draining (an operator's doing): cordoned. Inactive (disconnected): unknown."""
    if agent.get("deactivated") or agent.get("drain_info"):
        return NodeState.CORDONED
    if agent.get("active") is False:
        return NodeState.UNKNOWN
    return NodeState.READY


def in_pool(agent: Mapping[str, Any], pool: MesosPool) -> bool:
    return str((agent.get("attributes") or {}).get(pool.pool_attribute, pool.default_pool)) == pool.pool


def tasks_of(
    framework: Mapping[str, Any], pool: MesosPool, reserved_roles: Mapping[str, frozenset[str]]
) -> Iterable[tuple[str, Task]]:
    """(agent id, task) for each active task of a framework, split into revocable/non-revocable."""
    name = str(framework.get("name", ""))
    batch = not any(name.startswith(prefix) for prefix in pool.non_batch_framework_prefixes)
    for raw in framework.get("tasks") or ():
        if raw.get("state") not in ACTIVE_TASK_STATES:
            continue
        agent_id = str(raw.get("slave_id") or raw.get("agent_id") or "")
        if agent_id not in reserved_roles:
            continue  # an agent of another pool
        task_id = str(raw.get("id", "?"))
        regular, revocable = split_resources(raw.get("resources"), f"task {task_id}: resources")
        role = str(raw.get("role") or framework.get("role") or "*")
        from_reservation = role != "*" and role in reserved_roles[agent_id]
        if any(regular) or not any(revocable):
            yield agent_id, Task(task_id, regular, from_reservation=from_reservation, batch=batch, app=name)
        if any(revocable):
            suffix = "/revocable" if any(regular) else ""
            task = Task(task_id + suffix, revocable, revocable=True, batch=batch, app=name, own_task=not suffix)
            yield agent_id, task


def build_view(
    agents: Iterable[Mapping[str, Any]],
    frameworks: Iterable[Mapping[str, Any]],
    pool: MesosPool,
    maintenance: Mapping[tuple[str, str], tuple[float, bool]] | None = None,
) -> SchedulerView:
    """The pool's agents with their tasks, from the raw ``slaves`` and ``frameworks`` lists.

    ``maintenance`` (from ``scheduled_windows``) marks the agents in our own maintenance windows
    as tainted since the window's start (Mesos' form of our taint), and agents in an operator's
    windows as cordoned.
    """
    ours = [a for a in agents if in_pool(a, pool)]
    reserved_roles: dict[str, frozenset[str]] = {}
    for agent in ours:
        if not agent.get("id"):
            raise ConnectorError("an agent in /master/slaves has no id")
        roles = agent.get("reserved_resources") or {}
        holding = (role for role, amounts in roles.items() if any(split_resources(amounts, f"agent {agent['id']}")[0]))
        reserved_roles[str(agent["id"])] = frozenset(holding)
    tasks: dict[str, list[Task]] = {agent_id: [] for agent_id in reserved_roles}
    for framework in frameworks:
        for agent_id, task in tasks_of(framework, pool, reserved_roles):
            tasks[agent_id].append(task)
    nodes = []
    for agent in ours:
        node = node_from(agent, tasks[str(agent["id"])])
        window = (maintenance or {}).get(agent_machine(agent).key)
        if window is not None and node.state is NodeState.READY:
            started, is_ours = window
            node = (
                replace(node, state=NodeState.TAINTED, tainted_at=started)
                if is_ours
                else replace(node, state=NodeState.CORDONED)
            )
        nodes.append(node)
    return SchedulerView(tuple(nodes), ())


def node_from(agent: Mapping[str, Any], tasks: list[Task]) -> Node:
    agent_id = str(agent["id"])
    where = f"agent {agent_id}"
    allocatable, _ = split_resources(agent.get("resources"), f"{where}: resources")
    reserved = Resources()
    for role, amounts in (agent.get("reserved_resources") or {}).items():
        reserved = reserved + split_resources(amounts, f"{where}: reserved_resources.{role}")[0]
    used, used_revocable = split_resources(agent.get("used_resources"), f"{where}: used_resources")
    for revocable, in_use in ((False, used), (True, used_revocable)):
        overhead = (in_use - Resources.total(t.requests for t in tasks if t.revocable == revocable)).clip_negative()
        if any(v > OVERHEAD_EPSILON for v in overhead):
            task_id = f"{agent_id}/executors" + ("/revocable" if revocable else "")
            tasks.append(Task(task_id, overhead, revocable=revocable, own_task=False))
    registered = agent.get("registered_time")
    return Node(
        id=agent_id,
        state=agent_state(agent),
        allocatable=allocatable,
        reserved=reserved,
        tasks=tuple(tasks),
        launched_at=float(registered) if isinstance(registered, (int, float)) else NO_TIME,
        ip=agent_ip(str(agent.get("pid", ""))),
    )


class MesosConnector(ClusterConnector):
    def __init__(
        self, pool: MesosPool, url: str, *, cloud: CloudViewSource | None = None, timeout_seconds: float = 30.0
    ) -> None:
        super().__init__(cloud)
        self.pool = pool
        self.url = url.rstrip("/")
        self.timeout_seconds = timeout_seconds
        self._session: requests.Session | None = None

    def scheduler_view(self, now: float) -> SchedulerView:
        agents = self._get("/master/slaves", "slaves")
        frameworks = self._get("/master/frameworks", "frameworks")
        return build_view(agents, frameworks, self.pool, scheduled_windows(self._schedule()))

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def _schedule(self) -> dict[str, Any]:
        """The maintenance schedule; a master without the endpoint (404) has none."""
        response = self._request(MAINTENANCE_SCHEDULE_PATH)
        if response.status_code == 404:
            return {}
        return self._json(response, MAINTENANCE_SCHEDULE_PATH, "windows", optional=True)

    def _get(self, path: str, key: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self._json(self._request(path), path, key)[key]
        return items

    def _request(self, path: str) -> requests.Response:
        if self._session is None:
            self._session = requests.Session()
        url = self.url + path
        try:
            response = self._session.get(url, timeout=self.timeout_seconds)
        except requests.RequestException as e:
            raise ConnectorError(f"mesos master {url}: cannot reach it: {e}") from e
        return response

    def _json(self, response: requests.Response, path: str, key: str, optional: bool = False) -> dict[str, Any]:
        url = self.url + path
        if response.status_code != 200:
            raise ConnectorError(f"mesos master {url}: {response.status_code} {response.reason}: {response.text[:200]}")
        try:
            body = response.json()
        except ValueError as e:
            raise ConnectorError(f"mesos master {url}: the answer is not JSON: {e}") from e
        if not isinstance(body, dict) or not (isinstance(body.get(key), list) or (optional and key not in body)):
            raise ConnectorError(f"mesos master {url}: the answer has no {key!r} list")
        return body
