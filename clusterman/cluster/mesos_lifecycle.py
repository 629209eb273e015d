"""Node lifecycle on Mesos: the maintenance-window drain, through the master's HTTP API (``requests``).

A Mesos machine is ``{"hostname", "ip"}``, as the agent registered (its ``hostname`` and the address
in its ``pid``); the master keeps one maintenance schedule, a list of windows of machines with an
unavailability (start and duration, in nanoseconds), and each machine at most once.

  taint            put the agent's machine in a window starting ``now``: the machine is DRAINING, its
                   offers carry the unavailability and frameworks get inverse offers to move off
  untaint          take it out of the schedule (``machine/up`` instead if it is already DOWN)
  drain            DONE once the agent runs no active task; Mesos moves nothing itself: frameworks
                   do, and the decision's hard grace period bounds the wait
  running          the agents' active tasks, one ``/master/frameworks`` read right before
                   termination: maintenance is cooperative, and a framework that ignores its
                   inverse offers may still launch tasks on a DRAINING agent after the snapshot
  before_terminate ``machine/down``: the master shuts the agent down and removes it
  after_terminate  ``machine/up``: the machine leaves the schedule, so a new instance that gets the
                   same hostname and address may register again

The schedule is read, edited and POSTed whole (the API has no partial update and no concurrency
guard): other windows, an operator's included, are posted back as read. A write for several machines
that the master refuses is tried again machine by machine, so one bad machine holds back no other.
The master forgets a downed agent, so the machine of every agent seen is remembered here.
"""

from __future__ import annotations

import copy
import logging
from collections import Counter
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

import requests

from clusterman.cluster.lifecycle import UNKNOWN_COUNT
from clusterman.cluster.lifecycle import DrainResult
from clusterman.cluster.lifecycle import DrainStatus
from clusterman.cluster.lifecycle import GoingOn
from clusterman.cluster.lifecycle import NodeLifecycle
from clusterman.cluster.lifecycle import Outcome
from clusterman.cluster.lifecycle import Results
from clusterman.cluster.lifecycle import unique
from clusterman.cluster.mesos import ACTIVE_TASK_STATES
from clusterman.cluster.mesos import NANOS
from clusterman.cluster.mesos import OUR_WINDOW_SIGNATURE_NANOS
from clusterman.cluster.mesos import Machine
from clusterman.cluster.mesos import agent_ip
from clusterman.cluster.mesos import machine_from
from clusterman.cluster.mesos import scheduled

log = logging.getLogger(__name__)

DEFAULT_WINDOW_SECONDS = 600.0  # the unavailability's duration: a hint to frameworks, never enforced

Schedule = dict[str, Any]  # the master's JSON: {"windows": [{"machine_ids": [...], "unavailability": {...}}]}


# --- the schedule (pure) ------------------------------------------------------------------------


def with_machines(schedule: Mapping[str, Any], machines: Iterable[Machine], now: float, seconds: float) -> Schedule:
    """The schedule plus one window for the machines it does not hold yet, from ``now`` for ``seconds``.

    A machine may appear in a schedule once: one already there keeps its window (and its start)."""
    present = scheduled(schedule)
    new = [m for m in unique_machines(machines) if m.key not in present]
    windows = copy.deepcopy(list(schedule.get("windows") or ()))
    if new:
        windows.append(
            {
                "machine_ids": [m.json() for m in new],
                "unavailability": {
                    "start": {"nanoseconds": int(now * NANOS)},
                    "duration": {"nanoseconds": int(seconds * NANOS) + OUR_WINDOW_SIGNATURE_NANOS},
                },
            }
        )
    return {"windows": windows}


def without_machines(schedule: Mapping[str, Any], machines: Iterable[Machine]) -> Schedule:
    """The schedule without the machines; a window left with no machine goes too (the master refuses it)."""
    gone = {m.key for m in machines}
    windows = []
    for window in schedule.get("windows") or ():
        kept = [obj for obj in window.get("machine_ids") or () if machine_from(obj).key not in gone]
        if kept:
            windows.append({**copy.deepcopy(window), "machine_ids": copy.deepcopy(kept)})
    return {"windows": windows}


def unique_machines(machines: Iterable[Machine]) -> list[Machine]:
    return list({m.key: m for m in machines}.values())


def active_tasks(frameworks: Mapping[str, Any]) -> Counter[str]:
    """Active tasks (STAGING, STARTING, RUNNING, KILLING) per agent id, in ``/master/frameworks``:
    what a drain waits for and termination reads again. An answer of another shape raises
    ``ValueError``: read as "no tasks", it would let a busy agent go."""
    listed = frameworks.get("frameworks")
    if not isinstance(listed, list):
        raise ValueError("/master/frameworks: the answer has no 'frameworks' list")
    counts: Counter[str] = Counter()
    for framework in listed:
        if not isinstance(framework, Mapping):
            raise ValueError("/master/frameworks: a framework that is not an object")
        tasks = framework.get("tasks")
        if not isinstance(tasks, list | None):
            raise ValueError("/master/frameworks: a framework whose 'tasks' is not a list")
        for task in tasks or ():
            if not isinstance(task, Mapping):
                raise ValueError("/master/frameworks: a task that is not an object")
            if task.get("state") in ACTIVE_TASK_STATES:
                counts[str(task.get("slave_id") or task.get("agent_id") or "")] += 1
    return counts


def down_machines(status: Mapping[str, Any]) -> set[tuple[str, str]]:
    """Keys of the DOWN machines in ``/master/maintenance/status``."""
    return {machine_from(obj).key for obj in status.get("down_machines") or ()}


# --- the adapter --------------------------------------------------------------------------------


class MasterFailure(Exception):
    """A call to the master failed; the message is one line."""


class MesosLifecycle(NodeLifecycle):
    def __init__(
        self,
        url: str,
        *,
        dry_run: bool = False,
        window_seconds: float = DEFAULT_WINDOW_SECONDS,
        timeout_seconds: float = 30.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.dry_run = dry_run
        self.window_seconds = window_seconds
        self.timeout_seconds = timeout_seconds
        self._session: requests.Session | None = None
        self._machines: dict[str, Machine] = {}  # agent id -> machine, for every agent seen

    def taint(self, node_ids: Iterable[str], now: float) -> Results:
        def step(machines: Mapping[str, Machine], results: Results) -> None:
            present = scheduled(self._schedule())
            for node_id, machine in machines.items():
                if machine.key in present:
                    results[node_id] = self.result(node_id, Outcome.UNCHANGED, "already in a maintenance window")
            todo = {n: m for n, m in machines.items() if n not in results}
            results.update(
                self._write(
                    todo,
                    lambda ms: self._post_schedule(
                        with_machines(self._schedule(), ms.values(), now, self.window_seconds)
                    ),
                    f"put it in a maintenance window from {int(now)} (draining)",
                )
            )

        return self._with_machines(node_ids, step)

    def untaint(self, node_ids: Iterable[str]) -> Results:
        return self._with_machines(node_ids, self._release)

    def drain(self, node_id: str, now: float, going_on: GoingOn = lambda: "") -> DrainResult:
        try:
            agents = self._agents()
            if node_id not in agents:
                return self._drained(node_id, DrainStatus.DONE, 0, "the agent is not registered: nothing runs there")
            machine = agents[node_id]
            start = scheduled(self._schedule()).get(machine.key)
            if start is None:
                return self._drained(node_id, DrainStatus.FAILED, detail="not in a maintenance window: never drained")
            tasks = self._active_tasks(node_id)
        except MasterFailure as e:
            return self._drained(node_id, DrainStatus.FAILED, detail=str(e))
        except Exception as e:  # a surprise in the master's answer: this node's failure, logged in full
            log.exception("drain %s failed", node_id)
            return self._drained(node_id, DrainStatus.FAILED, detail=f"{type(e).__name__}: {e}")
        if tasks == 0:
            return self._drained(node_id, DrainStatus.DONE, 0, "no active tasks left")
        return self._drained(
            node_id,
            DrainStatus.NOT_NOW,
            tasks,
            f"{tasks} active task(s) left; draining for {max(0, int(now - start))} s",
        )

    def running(self, node_ids: Iterable[str]) -> dict[str, int]:
        """Each agent's active tasks, from one read of the master for all of them (an agent that is
        not registered runs none); ``UNKNOWN_COUNT`` for all when the read fails (logged once)."""
        ids = unique(node_ids)
        if not ids:
            return {}
        try:
            counts = active_tasks(self._get("/master/frameworks"))
        except MasterFailure as e:
            problem = str(e)
        except Exception as e:  # a surprise in the answer: no count can be trusted
            problem = f"{type(e).__name__}: {e}"
        else:
            return {node_id: counts[node_id] for node_id in ids}
        log.warning("cannot read the tasks on %s before terminating: %s", ", ".join(ids), problem)
        return dict.fromkeys(ids, UNKNOWN_COUNT)

    def before_terminate(self, node_ids: Iterable[str], now: float) -> Results:
        def step(machines: Mapping[str, Machine], results: Results) -> None:
            down = down_machines(self._get("/master/maintenance/status"))
            for node_id, machine in machines.items():
                if machine.key in down:
                    results[node_id] = self.result(node_id, Outcome.UNCHANGED, "already down")

            def bring_down(ms: Mapping[str, Machine]) -> None:
                # only a scheduled (DRAINING) machine can go down: schedule the ones that are not
                schedule = self._schedule()
                if any(m.key not in scheduled(schedule) for m in ms.values()):
                    self._post_schedule(with_machines(schedule, ms.values(), now, self.window_seconds))
                self._post("/master/machine/down", [m.json() for m in ms.values()])

            todo = {n: m for n, m in machines.items() if n not in results}
            results.update(
                self._write(todo, bring_down, "brought it down (machine/down): the master shuts the agent down")
            )

        return self._with_machines(node_ids, step)

    def after_terminate(self, node_ids: Iterable[str]) -> Results:
        return self._with_machines(node_ids, self._release)

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    # steps -------------------------------------------------------------------------------------

    def _with_machines(
        self, node_ids: Iterable[str], step: Callable[[Mapping[str, Machine], Results], None]
    ) -> Results:
        """Resolve agents to machines, then ``step`` fills in results; in the order asked."""
        ids = unique(node_ids)
        results: Results = {}
        unreachable = ""
        try:
            self._agents()
        except MasterFailure as e:
            unreachable = str(e)
        known = self._machines  # a downed agent is gone from the master but remembered
        machines = {}
        for node_id in ids:
            if node_id in known:
                machines[node_id] = known[node_id]
            else:
                detail = unreachable or f"no agent {node_id} at {self.url}"
                results[node_id] = self.result(node_id, Outcome.FAILED, detail)
        try:
            if machines:
                step(machines, results)
        except Exception as e:  # the master's failure, or a surprise (logged in full): theirs alone
            if not isinstance(e, MasterFailure):
                log.exception("mesos maintenance call failed")
            detail = str(e) if isinstance(e, MasterFailure) else f"{type(e).__name__}: {e}"
            for node_id in machines:
                results.setdefault(node_id, self.result(node_id, Outcome.FAILED, detail))
        return {n: results[n] for n in ids}

    def _release(self, machines: Mapping[str, Machine], results: Results) -> None:
        """Out of maintenance: a DOWN machine through ``machine/up`` (the master refuses to drop it
        from the schedule otherwise), a DRAINING one by posting the schedule without it."""
        down = down_machines(self._get("/master/maintenance/status"))
        present = scheduled(self._schedule())
        for node_id, machine in machines.items():
            if machine.key not in present and machine.key not in down:
                results[node_id] = self.result(node_id, Outcome.UNCHANGED, "not in the maintenance schedule")
        todo = {n: m for n, m in machines.items() if n not in results}
        results.update(
            self._write(
                {n: m for n, m in todo.items() if m.key in down},
                lambda ms: self._post("/master/machine/up", [m.json() for m in ms.values()]),
                "brought it up (machine/up) and out of the maintenance schedule",
            )
        )
        results.update(
            self._write(
                {n: m for n, m in todo.items() if m.key not in down},
                lambda ms: self._post_schedule(without_machines(self._schedule(), ms.values())),
                "took it out of the maintenance schedule",
            )
        )

    def _write(
        self, machines: Mapping[str, Machine], write: Callable[[Mapping[str, Machine]], None], done: str
    ) -> Results:
        """One write for all the machines; if the master refuses it, one write per machine."""
        if not machines:
            return {}
        if self.dry_run:
            return {n: self.result(n, Outcome.CHANGED, self.would(done)) for n in machines}
        try:
            write(machines)
            return {n: self.result(n, Outcome.CHANGED, done) for n in machines}
        except MasterFailure as e:
            if len(machines) == 1:
                ((node_id, _),) = machines.items()
                return {node_id: self.result(node_id, Outcome.FAILED, str(e))}
            log.warning("%s; trying each machine alone", e)
        results: Results = {}
        for node_id, machine in machines.items():
            try:
                write({node_id: machine})
                results[node_id] = self.result(node_id, Outcome.CHANGED, done)
            except MasterFailure as e:
                results[node_id] = self.result(node_id, Outcome.FAILED, str(e))
        return results

    def _drained(
        self, node_id: str, status: DrainStatus, remaining: int = UNKNOWN_COUNT, detail: str = ""
    ) -> DrainResult:
        return DrainResult(node_id, status, remaining, 0, detail, self.dry_run)

    # the master --------------------------------------------------------------------------------

    def _agents(self) -> dict[str, Machine]:
        """Registered agents by id (and remembered, for after they are gone)."""
        body = self._get("/master/slaves")
        agents = {}
        for agent in body.get("slaves") or ():
            if agent.get("id"):
                machine = Machine(str(agent.get("hostname", "")), agent_ip(str(agent.get("pid", ""))))
                agents[str(agent["id"])] = self._machines[str(agent["id"])] = machine
        return agents

    def _active_tasks(self, agent_id: str) -> int:
        return active_tasks(self._get("/master/frameworks"))[agent_id]

    def _schedule(self) -> Schedule:
        return self._get("/master/maintenance/schedule")

    def _post_schedule(self, schedule: Schedule) -> None:
        self._post("/master/maintenance/schedule", schedule)

    def _get(self, path: str) -> dict[str, Any]:
        response = self._request("GET", path)
        try:
            body = response.json()
        except ValueError as e:
            raise MasterFailure(f"mesos master {self.url}{path}: the answer is not JSON: {e}") from e
        if not isinstance(body, dict):
            raise MasterFailure(f"mesos master {self.url}{path}: expected a JSON object")
        return body

    def _post(self, path: str, body: Any) -> None:
        self._request("POST", path, body)

    def _request(self, method: str, path: str, body: Any = None) -> requests.Response:
        if self._session is None:
            self._session = requests.Session()
        url = self.url + path
        try:
            response = self._session.request(method, url, json=body, timeout=self.timeout_seconds)
        except requests.RequestException as e:
            raise MasterFailure(f"mesos master {url}: cannot reach it: {e}") from e
        if response.status_code != 200:
            text = response.text.strip().replace("\n", " ")[:300]
            raise MasterFailure(f"mesos master {method} {url}: {response.status_code} {response.reason}: {text}")
        return response
