"""A run overruns its budget mid-drain, then the inputs go stale: the drain is given up, safely.

Seen only in the autoscaler's lines before (commit c020d4b, on a loaded machine): a run tainted a
node and began draining it, its eviction hung and the run overran its budget, so it stopped before
terminating and before lowering the group's target; then the metrics disk filled ("no scale-down"),
and the next run, finding the target still at its old value and the tainted node with nothing to
remove, untainted it. The pods stayed, no instance went, the target was never lowered.

Here each step is made certain rather than left to the machine's load. The real autoscaler runs
over the stateful fake API server (``itests/stateful_api.py``), which leaves evictions unanswered,
and an Auto Scaling group in moto's server, reached through a recording proxy
(``itests/aws_proxy.py``) so every call that could lower the target or terminate is seen. The
server stops the process (``SIGSTOP``) the moment it holds the first eviction and the test
continues it ``HUNG`` seconds later: the run is stuck in that eviction for twice its budget, as a
starved process on a loaded machine would be, so it must overrun (an unanswered eviction alone
costs a third of the budget). While it is stopped the metrics directory's disk (a 4 MB tmpfs of
its own, as in ``test_drain_metrics_disk_full.py``) is filled, so every run after the overrun
cannot write the pool's metrics and holds. The client counts the API as silent for three of its
timeouts after one goes unanswered, so the first of those runs may not reach the node: the test
waits for the untaint, not for a given run.

Its neighbour: the untaint refused. Every PATCH of the node races another writer (409 Conflict
until the client gives up) while evictions are answered again, so a drain of the node would go
through: the runs that fail to untaint it must not drain it (they once did, evicting pods from a
node the decision keeps). Once the node stops changing, it is untainted.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
import urllib.request
from typing import Any

import pytest

from clusterman.cluster.kubernetes import SCALE_DOWN_TAINT_KEYS
from itests.aws_proxy import FaultyProxy
from itests.aws_world import World
from itests.faults import drains
from itests.faults.autoscaler_procs import acted
from itests.faults.test_run_disk_full import inside
from itests.pool_harness import POOL
from itests.pool_harness import harness
from itests.recorded_api import Request

HUNG = 2 * drains.BUDGET  # how long the run stays stuck in the held eviction: far past its budget
HOLD = "the pool's metrics could not be written (signals read older data): no scale-down"


def events(url: str) -> list[dict[str, Any]]:
    """The autoscaler's event history (NODE, DECISION and ERROR events), oldest first."""
    with urllib.request.urlopen(f"{url}/ws/v1/events/batch?type=NODE,DECISION,ERROR", timeout=10) as answer:
        return list(json.load(answer)["EventRecords"])


def removals(proxy: FaultyProxy, before: int) -> list[str]:
    """The calls that reached the cloud and could remove capacity: a target below ``before``, a
    termination, a detach."""
    lowered = [f"SetDesiredCapacity {c['DesiredCapacity']}" for c in proxy.calls("SetDesiredCapacity")]
    lowered = [call for call in lowered if int(call.split()[1]) < before]
    return lowered + [r.action for r in proxy.requests if "Terminate" in r.action or "Detach" in r.action]


def scale_down_tainted(node: dict[str, Any]) -> bool:
    return any(t["key"] in SCALE_DOWN_TAINT_KEYS for t in node["spec"].get("taints") or [])


@pytest.mark.parametrize("untaint_refused", [False, True], ids=["untaint", "untaint_refused"])
def test_a_drain_that_overran_then_held_on_stale_inputs_is_given_up_with_nothing_removed(
    tmp_path, moto_server, untaint_refused
):
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    world = World(moto_server.url)
    asg = world.asg(POOL, desired=4)
    members = world.asg_members(asg)
    with FaultyProxy(moto_server.url) as proxy, harness(tmp_path, world, "kubernetes", aws_url=proxy.url) as pool:
        assert pool.kube is not None
        config, nodes, pods = drains.to_remove(pool, members)
        node = nodes[2]
        drains.metrics_in(config, metrics)
        before = world.desired(asg)
        pool.kube.hang("evictions")
        stuck = threading.Event()
        private = drains.on_tmpfs(metrics)
        with drains.running(config, world.cluster, prefix=private, args=("--collect-metrics",)) as autoscaler:

            def stop_in_eviction(request: Request) -> None:
                """The first eviction held: the process is stopped while it waits for the answer."""
                if not stuck.is_set():
                    autoscaler.signal(signal.SIGSTOP)
                    stuck.set()

            pool.kube.on_held = stop_in_eviction
            assert stuck.wait(30), autoscaler.lines()
            stopped = time.monotonic()
            tainted, during = pool.tainted(), world.desired(asg)
            inside(autoscaler.proc.pid, "dd", "if=/dev/zero", f"of={metrics}/fill", "bs=64k")  # stale from now on
            if untaint_refused:
                pool.kube.races[node] = 10**6  # every write of the node meets another writer's first
            time.sleep(max(0.0, stopped + HUNG - time.monotonic()))
            continued = time.monotonic()
            autoscaler.signal(signal.SIGCONT)
            overran, _ = autoscaler.wait_for(lambda line: " overrun: " in line, timeout=20, after=continued)
            if untaint_refused:
                pool.kube.answer_again()  # from now a drain of the node would empty it
                refusals = autoscaler.stderr().count("409 Conflict")
                deadline = time.monotonic() + 30
                while autoscaler.stderr().count("409 Conflict") < refusals + 2:  # two runs refused
                    assert time.monotonic() < deadline, autoscaler.lines()
                    time.sleep(0.1)
                pool.kube.races[node] = 0
            # a run after it untaints the node (the first may find the API still "silent" to it: its
            # client gives a server that did not answer the rest of that timeout's three attempts)
            deadline = time.monotonic() + 30
            while scale_down_tainted(pool.kube.nodes[node]) or not drains.untainted(pool, node):
                assert not removals(proxy, before), (removals(proxy, before), autoscaler.lines())
                assert time.monotonic() < deadline, autoscaler.lines()
                time.sleep(0.1)
            untainted = time.monotonic()
            autoscaler.wait_for(lambda line: "| target" in line, timeout=20, after=untainted)  # a run after it
            url = re.search(r"events and /metrics on (http://\S+)", autoscaler.stderr())
            assert url, autoscaler.stderr()[-3000:]
            history = events(url[1])
            runs = [line for at, line in autoscaler.out if at > overran and "| target" in line]
            lines, stderr = autoscaler.lines(), autoscaler.stderr()
            print(f"stopped in the eviction {stopped - autoscaler.started:.1f} s after the start, {HUNG:g} s")
            print(f"continued: overran {overran - continued:.1f} s after, untainted {untainted - continued:.1f} s")
        bound = {p: ((pool.kube.pod("default", p) or {}).get("spec") or {}).get("nodeName") for p in pods}
        spec = pool.kube.nodes[node]["spec"]
    # the drain had begun: the node tainted, its first pod asked to leave (the server never answered)
    assert tainted == [node] and during == before, lines
    assert drains.evictions(pool) == [pods[0]], lines  # the second was never asked: the run had overrun
    # given up: the node schedulable again, its pods where they were
    if untaint_refused:  # the other writer's taints stay
        assert not scale_down_tainted({"spec": spec}) and not spec.get("unschedulable"), spec
    else:
        assert not spec.get("taints") and not spec.get("unschedulable"), spec
    assert bound == {p: node for p in pods}, bound
    # nothing removed: no call lowered the target, none terminated an instance
    assert not removals(proxy, before), removals(proxy, before)
    assert world.desired(asg) == before and all(world.ec2_state(m) == "running" for m in members)
    # why, in the lines: the run meant to lower the target, overran and stopped before it did ...
    decided = [line for at, line in autoscaler.out if at <= overran and "| target" in line]
    not_set = f"target {before} -> {before - 1} not set "
    assert not_set in decided[-1], decided
    # ... as did the run that tainted the node: the one stuck in the eviction, or, on a loaded
    # machine, one before it whose budget ran out between the taint and the first eviction ("stopped
    # before draining", or its drain asked nothing: 2 in 16 at 4 at once); the next found the node
    # tainted and drained it as any scale-down. None of them set the target.
    tainted_by = [i for i, line in enumerate(decided) if "taint 1" in line and acted(line)]
    assert tainted_by, decided
    assert all(not_set in line or not acted(line) for line in decided[tainted_by[-1] :]), decided
    assert "budget: the snapshot is" in stderr and "> budget 3 s: stopped before terminating" in stderr, stderr
    # ... and every run after it held on the full metrics disk, its target kept
    assert runs and all(HOLD in line and f"target {before} -> {before} " in line for line in runs), runs
    # why, in the events, in this order: the overrun, the hold, the untaint; no target set, no node gone
    details = [(e["eventChangeDetail"], e["objectID"]) for e in history]
    stop = next(i for i, e in enumerate(history) if "stopped before terminating" in e["message"])
    overrun = details.index(("DECISION_OVERRUN", "web.kubernetes"), stop)  # a loaded first run may overrun too
    held = next(i for i in range(overrun, len(history)) if HOLD in history[i]["message"])
    assert details[held][0] == "DECISION_HELD" and ("NODE_UNTAINT", node) in details[held:], details
    assert not [d for d, _ in details if d in ("GROUP_TARGET", "NODE_TERMINATE")], details
