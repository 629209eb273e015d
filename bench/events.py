"""Event history: memory per stored event, publishing cost, and serving one batch over HTTP.

Every figure comes with a baseline measured in the same run:
  memory   the ring (columns + interned strings) vs a plain list of small objects holding the
           same fields, both filled with the same generated events, measured with tracemalloc
  publish  ``EventPublisher.publish`` from the loop's thread (with the storage thread running)
           vs a bare ``deque.append`` of the same events
  batch    GET /ws/v1/events/batch?count=10000 over loopback vs ``json.dumps`` of the same records

The generated events follow one autoscaler's day-to-day mix (``MIXES``): mostly signal answers
(every app, every run), a decision per run, some node churn. ``node_churn`` is a harsher mix
(a third of all events about short-lived nodes, each a new id) to show how interning degrades.
"""

from __future__ import annotations

import collections
import enum
import gc
import http.client
import json
import random
import sys
import time
import tracemalloc
import types
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any
from typing import Final

from bench._timing import best_of
from clusterman.events.event import ChangeDetail as D
from clusterman.events.event import ChangeType
from clusterman.events.event import Event
from clusterman.events.event import EventRecord
from clusterman.events.event import EventType
from clusterman.events.event import Resource
from clusterman.events.event import resource
from clusterman.events.publisher import EventPublisher
from clusterman.events.ring import EventRing

GOAL_BYTES_PER_EVENT: Final = 48
BATCH: Final = 10_000
POOL: Final = "web.kubernetes"
INSTANCE_SIZES: Final = [
    resource(cpus=2, mem=8000, disk=50000, gpus=0),
    resource(cpus=4, mem=16000, disk=100000, gpus=0),
    resource(cpus=8, mem=32000, disk=200000, gpus=0),
    resource(cpus=16, mem=64000, disk=400000, gpus=1),
]
NODE_STEPS: Final = [
    (D.NODE_JOIN, ChangeType.ADD, "joined after launch"),
    (D.NODE_TAINT, ChangeType.SET, "oldest first: pool above target"),
    (D.NODE_DRAIN, ChangeType.SET, "tainted longer than the soft grace period"),
    (D.NODE_TERMINATE, ChangeType.REMOVE, "empty after drain"),
]
# Share of events by kind: (signal answers, decisions, group targets, node events, the rest)
MIXES: Final = {
    "autoscaler_day": (0.86, 0.05, 0.02, 0.06, 0.01),
    "node_churn": (0.50, 0.05, 0.05, 0.35, 0.05),
}


def workload(n: int, mix: tuple[float, ...], seed: int = 7) -> Iterator[Event]:
    """``n`` events built the way the Recorder builds them: fresh strings for every event."""
    rnd = random.Random(seed)
    apps = [f"app-{i:02d}" for i in range(20)]
    groups = ["asg-web-a", "asg-web-b", "sfr-web-spot"]
    nodes: list[list[Any]] = []  # [node id, next step, size]
    node_serial = 0
    kinds = rnd.choices(["signal", "decision", "group", "node", "other"], mix, k=n)
    for i, kind in enumerate(kinds):
        ts = 1_700_000_000_000_000_000 + i * 1_000_000_000
        if kind == "signal":
            app = apps[rnd.randrange(20)]
            requested = (("cpus", round(rnd.gauss(100, 15), 1)), ("mem", round(rnd.gauss(400_000, 50_000), -2)))
            ms = int(rnd.lognormvariate(3, 0.6))
            yield Event(
                EventType.SIGNAL,
                ChangeType.SET,
                D.SIGNAL_REQUEST,
                ts,
                f"{app}",
                f"clusterman_signals.{app}.Signal@v3",
                requested,
                f"answered in {ms} ms",
            )
        elif kind == "decision":
            util = rnd.gauss(0.7, 0.08)
            delta = round((util - 0.7) * 40)
            change = ChangeType.ADD if delta > 0 else ChangeType.REMOVE if delta < 0 else ChangeType.NONE
            amounts: Resource = resource(capacity=abs(delta)) if delta else ()
            target = 40 + rnd.randrange(-5, 6)
            why = "cpus above setpoint" if delta > 0 else "cpus below setpoint" if delta < 0 else "within margin"
            yield Event(
                EventType.DECISION,
                change,
                D.DECISION_UTILISATION,
                ts,
                POOL,
                "",
                amounts,
                f"utilisation cpus={util:.0%} mem={util * 0.6:.0%} (setpoint 70%), target {target}: {why}",
            )
        elif kind == "group":
            old, new = rnd.randrange(10, 30), rnd.randrange(10, 30)
            yield Event(
                EventType.GROUP,
                ChangeType.SET,
                D.GROUP_TARGET,
                ts,
                rnd.choice(groups),
                POOL,
                resource(capacity=new),
                f"target {old} -> {new}",
            )
        elif kind == "node":
            if not nodes or (len(nodes) < 400 and rnd.random() < 0.3):
                node_serial += 1
                nodes.append([f"i-{rnd.getrandbits(68):017x}", 0, rnd.choice(INSTANCE_SIZES), rnd.choice(groups)])
            node = rnd.choice(nodes)
            detail, change, reason = NODE_STEPS[node[1]]
            node[1] += 1
            if node[1] == len(NODE_STEPS):
                nodes.remove(node)
            yield Event(EventType.NODE, change, detail, ts, f"{node[0]}", f"{node[3]}", node[2], f"{reason}")
        else:
            yield rnd.choice(
                [
                    Event(EventType.LOCK, ChangeType.NONE, D.LOCK_TAKEN, ts, POOL, message="for 300 s: scaled up"),
                    Event(EventType.LOCK, ChangeType.NONE, D.LOCK_RELEASED, ts, POOL, message="cool-down over"),
                    Event(
                        EventType.ERROR,
                        ChangeType.NONE,
                        D.ERROR_CLOUD,
                        ts,
                        rnd.choice(groups),
                        message=(f"Throttling: Rate exceeded (request {rnd.getrandbits(64):016x})"),
                    ),
                ]
            )


class _PlainEvent:
    """The baseline: one small object per event with the same fields (what a list store keeps)."""

    __slots__ = ("change", "detail", "id", "message", "object_id", "reference_id", "resource", "timestamp_ns", "type")

    def __init__(self, event_id: int, e: Event) -> None:
        self.id = event_id
        self.type = e.type
        self.change = e.change
        self.detail = e.detail
        self.timestamp_ns = e.timestamp_ns
        self.object_id = e.object_id
        self.reference_id = e.reference_id
        self.resource = e.resource
        self.message = e.message


def deep_size(root: object) -> int:
    """Bytes of every object reachable from ``root``, each counted once (``sys.getsizeof``).

    Classes, modules, functions and enum members are program constants, not stored data.
    """
    seen: set[int] = set()
    total = 0
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _CONSTANTS):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


_CONSTANTS: Final = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, enum.Enum)


def filled_ring(n: int, mix: tuple[float, ...]) -> EventRing:
    ring = EventRing(n)
    for e in workload(n, mix):
        ring.append(e)
    return ring


def plain_list(n: int, mix: tuple[float, ...]) -> list[_PlainEvent]:
    return [_PlainEvent(i, e) for i, e in enumerate(workload(n, mix))]


def traced(fill: Callable[[], object]) -> int:
    """Bytes still allocated after ``fill()`` returns (what it keeps), by tracemalloc."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = fill()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    return after - before


def measure_memory(n: int, mix: tuple[float, ...], cross_check: int) -> dict[str, Any]:
    """Deep size at ``n`` events; tracemalloc at ``cross_check`` events (it slows Python 10x)."""
    ring = filled_ring(n, mix)
    ring_bytes, distinct = deep_size(ring), ring.distinct_strings
    del ring
    plain = plain_list(n, mix)
    list_bytes = deep_size(plain)
    del plain
    m = cross_check
    return {
        "events": n,
        "ring_bytes_per_event": round(ring_bytes / n, 1),
        "baseline_list_of_objects_bytes_per_event": round(list_bytes / n, 1),
        "ratio_to_baseline": round(ring_bytes / list_bytes, 3),
        "goal_bytes_per_event": GOAL_BYTES_PER_EVENT,
        "meets_goal": ring_bytes / n <= GOAL_BYTES_PER_EVENT,
        "distinct_strings_kept": distinct,
        "cross_check": {
            "events": m,
            "method": "tracemalloc vs deep getsizeof, same events",
            "ring_tracemalloc_bytes_per_event": round(traced(lambda: filled_ring(m, mix)) / m, 1),
            "ring_deep_size_bytes_per_event": round(deep_size(filled_ring(m, mix)) / m, 1),
            "baseline_tracemalloc_bytes_per_event": round(traced(lambda: plain_list(m, mix)) / m, 1),
            "baseline_deep_size_bytes_per_event": round(deep_size(plain_list(m, mix)) / m, 1),
        },
    }


def measure_publish(n: int) -> dict[str, Any]:
    """The loop's cost per event (the hand-off), and the storage thread's cost per event."""
    events = list(workload(n, MIXES["autoscaler_day"], seed=11))

    def hand_off(publisher: EventPublisher) -> float:
        publish = publisher.publish
        started = time.perf_counter()
        for e in events:
            publish(e)
        return time.perf_counter() - started

    # 1. no storage thread: the hand-off alone, then storing the same events in one go
    idle = EventPublisher(EventRing(n), queue_size=n + 1)
    idle_seconds = hand_off(idle)
    started = time.perf_counter()
    idle.drain()
    store_seconds = time.perf_counter() - started
    # 2. the storage thread running at the same time (they share the GIL)
    busy = EventPublisher(EventRing(n), queue_size=n + 1)
    busy.start()
    try:
        busy_seconds = hand_off(busy)
        busy.flush(300)
    finally:
        busy.stop()

    def deque_baseline() -> None:
        q: collections.deque[Event] = collections.deque()
        append = q.append
        for e in events:
            append(e)

    def list_baseline() -> None:
        kept: list[EventRecord] = []
        for i, e in enumerate(events):
            kept.append(EventRecord(i, e))

    baseline = best_of(deque_baseline, 3)
    list_seconds = best_of(list_baseline, 3)
    return {
        "events": n,
        "publish_ns_per_event": round(idle_seconds / n * 1e9),
        "baseline_deque_append_ns_per_event": round(baseline / n * 1e9),
        "publish_ratio_to_baseline": round(idle_seconds / baseline, 2),
        "publish_ns_per_event_while_storing": round(busy_seconds / n * 1e9),
        "publish_while_storing_ratio_to_baseline": round(busy_seconds / baseline, 2),
        "store_ns_per_event": round(store_seconds / n * 1e9),
        "baseline_list_append_ns_per_event": round(list_seconds / n * 1e9),
        "store_ratio_to_baseline": round(store_seconds / list_seconds, 2),
        "dropped": idle.dropped + busy.dropped,
    }


def measure_batch(kept: int) -> dict[str, Any]:
    from clusterman.events.http import EventServer

    ring = EventRing(kept)
    for e in workload(kept, MIXES["autoscaler_day"], seed=13):
        ring.append(e)
    publisher = EventPublisher(ring)
    start = ring.lowest_id + kept // 3  # starts in the older part of a full ring
    with EventServer(publisher, rest_response_size=BATCH) as server:
        sizes = []

        def serve() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
            conn.request("GET", f"/ws/v1/events/batch?start={start}&count={BATCH}")
            body = conn.getresponse().read()
            conn.close()
            sizes.append(len(body))

        serve_seconds = best_of(serve, 5)
    records = [r.to_json() for r in ring.read(start, BATCH).records]
    baseline = best_of(lambda: json.dumps(records, separators=(",", ":")), 5)
    return {
        "records": BATCH,
        "response_bytes": sizes[-1],
        "serve_seconds": round(serve_seconds, 4),
        "baseline_json_dumps_seconds": round(baseline, 4),
        "ratio_to_baseline": round(serve_seconds / baseline, 2),
    }


def run(quick: bool) -> dict[str, Any]:
    n = 100_000 if quick else 1_000_000
    check = 5_000 if quick else 50_000
    result: dict[str, Any] = {"memory": measure_memory(n, MIXES["autoscaler_day"], check)}
    result["memory_node_churn"] = measure_memory(n, MIXES["node_churn"], check)
    result["publish"] = measure_publish(n // 5)
    result["batch_http"] = measure_batch(n // 10 if not quick else BATCH * 2)
    result["mixes"] = {
        name: dict(zip(["signal", "decision", "group", "node", "other"], m, strict=True)) for name, m in MIXES.items()
    }
    return result
