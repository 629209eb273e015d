"""A pool's nodes and pods, kept current by watching the API server. Each run reads this cache.

Two reflectors (``reflector.py``) fill it. One watches the pool's nodes, by the pool's node label.
The other watches every pod that is not finished, because the API cannot select "pods on these
nodes": a node may join the pool after its pods were bound, and the two watches are not ordered
with each other. The cache keeps every pod bound to a node and the unschedulable pods aimed at the
pool; it drops any other pending pod as it arrives. Each object is decoded straight into a record
of a few hundred bytes (``kubernetes.PodRecord``, ``kubernetes.NodeRecord``), and its JSON dropped.

A run reads the cache without calling the API. A node whose record and pods did not change since
the last run is the same ``Node`` object as then, so the folds of ``core/fold.py`` reuse its sums
and a run costs what changed. The view is what a fresh list of the same state would give: nodes in
name order, pods in namespace/name order.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from typing import Any
from typing import Generic
from typing import TypeVar

import urllib3

from clusterman.cluster import kubernetes_objects as objects
from clusterman.cluster.connector import ConnectorError
from clusterman.cluster.connector import SchedulerView
from clusterman.cluster.kubernetes import KubernetesPool
from clusterman.cluster.kubernetes import NodeRecord
from clusterman.cluster.kubernetes import PodRecord
from clusterman.cluster.kubernetes import api_error
from clusterman.cluster.kubernetes import assemble
from clusterman.cluster.kubernetes import node_record
from clusterman.cluster.kubernetes import pod_name
from clusterman.cluster.kubernetes import pod_record
from clusterman.cluster.kubernetes import request_timeout
from clusterman.cluster.kubernetes import warn_defaulted
from clusterman.cluster.reflector import DELETED
from clusterman.cluster.reflector import Event
from clusterman.cluster.reflector import Freshness
from clusterman.cluster.reflector import Gone
from clusterman.cluster.reflector import Page
from clusterman.cluster.reflector import Reflector
from clusterman.cluster.reflector import StreamEnded
from clusterman.core.model import Node
from clusterman.core.model import Task

log = logging.getLogger(__name__)

O = TypeVar("O", objects.Pod, objects.Node, objects.CustomObject)  # noqa: E741

# How long a watch request lasts before the server ends it and it is made again (client-go: 5-10
# minutes). Shorter, so a cache that hears nothing (no event, no bookmark) learns within this
# whether the server is still there; a watch resumed from a recent version costs the server little.
WATCH_SECONDS = 60
# A cache that has heard nothing from the API server for this long holds scale-down.
STALE_AFTER_SECONDS = 150.0


class KubernetesSource(Generic[O]):
    """One resource's list and watch calls, through the kubernetes client, decoded into structs."""

    def __init__(
        self,
        call: Callable[..., Any],
        kind: type[O],
        what: str,
        host: str,
        *,
        page_size: int,
        timeout_seconds: float,
        watch_seconds: int | None = None,
        selectors: dict[str, str],
    ) -> None:
        self.call = call
        self.kind: type[O] = kind
        self.what = what
        self.host = host
        self.page_size = page_size
        self.timeout_seconds = timeout_seconds
        self.watch_seconds = WATCH_SECONDS if watch_seconds is None else watch_seconds
        self.selectors = selectors
        self._response: Any = None
        self._stopped = False
        self._lock = threading.Lock()

    def _fail(self, doing: str, problem: str) -> ConnectorError:
        return ConnectorError(f"kubernetes API {self.host}: {doing} {self.what}: {problem}")

    def _request(self, doing: str, **query: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.call(_preload_content=False, **self.selectors, **query)
        except ApiException as e:
            # On a watch, 410 means its version is too old: the reflector lists again. On a list,
            # it means the continue token expired: this list fails and the next starts afresh.
            if e.status == 410 and "watch" in query:
                raise Gone(api_error(e)) from e
            raise self._fail(doing, api_error(e)) from e
        except urllib3.exceptions.HTTPError as e:
            raise self._fail(doing, f"cannot reach it: {e}") from e

    def page(self, token: str | None) -> Page[O]:
        response = self._request(
            "listing", limit=self.page_size, _continue=token, _request_timeout=request_timeout(self.timeout_seconds)
        )
        try:
            body = objects.decode(objects.LIST_OF[self.kind], response.data)
        except objects.msgspec.DecodeError as e:
            raise self._fail("listing", f"the answer is not JSON: {e}") from e
        except objects.msgspec.ValidationError as e:
            raise self._fail("listing", f"the answer is not a {self.kind.__name__}List: {e}") from e
        if body.items is None:
            raise self._fail("listing", "the answer has no items list")
        return Page(body.items, body.metadata.resource_version, body.metadata.continue_ or None)

    def watch(self, version: str) -> Iterator[Event[O]]:
        response = self._request(
            "watching",
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=self.watch_seconds,
            # the server ends the stream after watch_seconds; silence well past that is a dead peer
            _request_timeout=(self.timeout_seconds, self.watch_seconds + self.timeout_seconds),
        )
        with self._lock:
            self._response = response
            if self._stopped:  # stopped while the request was on its way
                response.shutdown()
        try:
            yield from self._events(response)
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise StreamEnded(str(e) or type(e).__name__) from e
        finally:
            with self._lock:
                self._response = None
            response.release_conn()

    def _events(self, response: Any) -> Iterator[Event[O]]:
        rest = b""
        for chunk in response.stream(1 << 16):
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for line in lines:
                if line.strip():
                    yield self._event(line)
        if rest.strip():
            yield self._event(rest)

    def _event(self, line: bytes) -> Event[O]:
        try:
            event = objects.decode(objects.WatchEvent, line)
            if event.type == "ERROR":
                status = objects.decode(objects.Status, event.object)
                if status.code == 410:
                    raise Gone(status.message)
                raise StreamEnded(f"the server ended the watch: {status.code} {status.reason}: {status.message}")
            obj = objects.decode(self.kind, event.object)
        except objects.DecodeError as e:
            raise StreamEnded(f"a watch event that is not a {self.kind.__name__} event: {e}") from e
        if event.type not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
            raise StreamEnded(f"a watch event of unknown type {event.type!r}")
        return Event(event.type, None if event.type == "BOOKMARK" else obj, obj.metadata.resource_version)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._response is not None:
                self._response.shutdown()


class PoolCache:
    """The pool's node and pod records, and the view a run reads (see the module's docstring)."""

    def __init__(
        self,
        pool: KubernetesPool,
        nodes: KubernetesSource[objects.Node],
        pods: KubernetesSource[objects.Pod],
        *,
        stale_after_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pool = pool
        self.stale_after_seconds = STALE_AFTER_SECONDS if stale_after_seconds is None else stale_after_seconds
        self.clock = clock
        self._lock = threading.RLock()
        self.nodes: dict[str, NodeRecord] = {}
        self.pods: dict[str, PodRecord] = {}  # every kept pod by namespace/name
        self._on: dict[str, dict[str, PodRecord]] = {}  # node name -> its pods
        self._pending: dict[str, PodRecord] = {}
        self._defaulted: dict[str, PodRecord] = {}  # pods that took the default request
        self._broken: dict[str, str] = {}  # node name -> why its object cannot be read
        self._built: dict[str, Node] = {}  # nodes assembled by an earlier view, still current
        self._order: list[str] | None = None  # node names in name order; None: to be sorted again
        self._pending_view: tuple[Task, ...] | None = None
        self.node_reflector = Reflector("nodes", nodes, _NodeStore(self), clock=clock)
        self.pod_reflector = Reflector("pods", pods, _PodStore(self), clock=clock)

    # --- the reflectors' side ---------------------------------------------------------------------

    def replace_nodes(self, records: dict[str, NodeRecord], broken: dict[str, str]) -> None:
        with self._lock:
            self.nodes, self._broken = records, broken
            self._built.clear()
            self._order = None

    def put_node(self, name: str, record: NodeRecord | None, broken: str = "") -> None:
        with self._lock:
            self._broken.pop(name, None)
            if broken:
                self._broken[name] = broken
            old = self.nodes.get(name)
            if record is None:
                if self.nodes.pop(name, None) is not None:
                    self._order = None
            elif old != record:
                self.nodes[name] = record
                if old is None:
                    self._order = None
            else:
                return
            self._built.pop(name, None)

    def replace_pods(self, records: Iterable[tuple[str, PodRecord]]) -> None:
        pods: dict[str, PodRecord] = {}
        on: dict[str, dict[str, PodRecord]] = {}
        pending: dict[str, PodRecord] = {}
        defaulted: dict[str, PodRecord] = {}
        for key, record in records:
            pods[key] = record
            if record.node:
                on.setdefault(record.node, {})[key] = record
            else:
                pending[key] = record
            if record.defaulted:
                defaulted[key] = record
        with self._lock:
            self.pods, self._on, self._pending, self._defaulted = pods, on, pending, defaulted
            self._built.clear()
            self._pending_view = None

    def put_pod(self, key: str, record: PodRecord | None) -> None:
        with self._lock:
            if self.pods.get(key) == record:  # most updates are status the pool does not read
                return
            old = self.pods.pop(key, None)
            if old is not None:
                self._unindex(key, old)
            if record is not None:
                self.pods[key] = record
                if record.defaulted:
                    self._defaulted[key] = record
                if record.node:
                    self._on.setdefault(record.node, {})[key] = record
                    self._built.pop(record.node, None)
                else:
                    self._pending[key] = record
                    self._pending_view = None

    def _unindex(self, key: str, record: PodRecord) -> None:
        self._defaulted.pop(key, None)
        if not record.node:
            del self._pending[key]
            self._pending_view = None
            return
        pods = self._on[record.node]
        del pods[key]
        if not pods:
            del self._on[record.node]
        self._built.pop(record.node, None)

    # --- the run's side ---------------------------------------------------------------------------

    def view(self, now: float) -> SchedulerView:
        """What a fresh list would give, built from the records.

        An object that cannot be read raises ConnectorError, as a fresh list would, until it is
        fixed or gone."""
        with self._lock:
            if self._broken:
                raise ConnectorError(next(iter(self._broken.values())))
            if self._order is None:
                self._order = sorted(self.nodes)
            built: list[Node] = []
            for name in self._order:
                node = self._built.get(name)
                if node is None:
                    record = self.nodes[name]
                    pods = self._on.get(name)
                    mine = [pods[k] for k in sorted(pods)] if pods else []
                    _raise_broken(mine)
                    node = assemble(record.at(now), mine)
                    if not record.untimed:  # an untimed taint counts from each run's now
                        self._built[name] = node
                built.append(node)
            if self._pending_view is None:
                mine = [self._pending[k] for k in sorted(self._pending)]
                _raise_broken(mine)
                self._pending_view = tuple(r.task for r in mine)
            defaulted = [key for key, r in self._defaulted.items() if not r.node or r.node in self.nodes]
        warn_defaulted(len(defaulted), heapq.nsmallest(6, defaulted), self.pool)
        return SchedulerView(tuple(built), self._pending_view, self.stale())

    def freshness(self) -> tuple[Freshness, Freshness]:
        return self.node_reflector.freshness(), self.pod_reflector.freshness()

    def stale(self) -> str:
        """Why the cache is too old to shrink the pool on, or "" (it heard from the server lately)."""
        now = self.clock()
        for fresh in self.freshness():
            silent = fresh.silent_for(now)
            if silent > self.stale_after_seconds:
                why = f"; {fresh.error}" if fresh.error else ""
                return (
                    f"the watch of the pool's {fresh.resource} has not heard from the API server for "
                    f"{silent:.0f} s (> {self.stale_after_seconds:g} s; {fresh.state}{why}): the view may be old"
                )
        return ""

    # --- lifecycle ----------------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self.node_reflector.freshness().synced and self.pod_reflector.freshness().synced

    def sync(self) -> None:
        """List both resources in the caller's thread (the API's errors are raised)."""
        self.node_reflector.sync()
        self.pod_reflector.sync()

    def start(self) -> None:
        self.node_reflector.start()
        self.pod_reflector.start()

    def nudge(self) -> None:
        """A run reads the cache: a watch waiting to retry tries now (``Reflector.nudge``)."""
        self.node_reflector.nudge()
        self.pod_reflector.nudge()

    def stop(self) -> None:
        self.node_reflector.stop()
        self.pod_reflector.stop()


def _raise_broken(records: Iterable[PodRecord]) -> None:
    for record in records:
        if record.error:
            raise ConnectorError(record.error)


class _NodeStore:
    def __init__(self, cache: PoolCache) -> None:
        self.cache = cache

    def replace(self, nodes: Iterable[objects.Node]) -> None:
        records: dict[str, NodeRecord] = {}
        broken: dict[str, str] = {}
        for obj in nodes:
            try:
                record = node_record(obj)
                records[record.node.id] = record
            except ConnectorError as e:
                broken[obj.metadata.name] = str(e)
        self.cache.replace_nodes(records, broken)

    def update(self, kind: str, obj: objects.Node) -> None:
        name = obj.metadata.name
        if kind == DELETED:
            self.cache.put_node(name, None)
            return
        try:
            self.cache.put_node(name, node_record(obj))
        except ConnectorError as e:
            self.cache.put_node(name, None, str(e))


class _PodStore:
    def __init__(self, cache: PoolCache) -> None:
        self.cache = cache

    def _records(self, pods: Iterable[objects.Pod]) -> Iterator[tuple[str, PodRecord]]:
        pool = self.cache.pool
        for obj in pods:
            record = pod_record(obj, pool)
            if record is not None:
                yield record.task.id, record

    def replace(self, pods: Iterable[objects.Pod]) -> None:
        self.cache.replace_pods(self._records(pods))

    def update(self, kind: str, obj: objects.Pod) -> None:
        self.cache.put_pod(pod_name(obj), None if kind == DELETED else pod_record(obj, self.cache.pool))
