"""A pool's nodes and pods, kept current by watching the API server. Each run reads this cache.

Two reflectors (``reflector.py``) fill it. One watches the pool's nodes, by the pool's node label.
The other, a ``PodReader``, watches every pod that is not finished (the API cannot select "pods on
these nodes"); one reader serves every pool of the process that reads the same cluster (the metrics
collector's), and hands each pod to the pools it matters to. A pool keeps the pods bound to its own
nodes and the unschedulable pods aimed at it, so its memory follows its size, not the cluster's; a
pod on another pool's node is dropped once its few fields are decoded, before its record is made.
Each kept object is decoded straight into a record of a few hundred bytes (a pod's
``Task``, a node's ``kubernetes.NodeRecord``), and its JSON dropped.

A node that joins the pool after the pods were listed (a new node, a label set later, or one whose
event comes after its pods', since the two watches are not ordered with each other) has its pods
read then, by node (``KubernetesSource.on_node``); a pod the watch gave since it joined is newer
than that read, which does not replace it. A list after ``410 Gone`` replaces records one by one
as its pages come, keeping the one held when equal, and drops what it did not give once whole: it
never holds two copies, and a run in the middle of it sees each pod as before or as listed.

A run reads the cache without calling the API. Each change is folded into its node as it arrives
(the node with its pods, built as the view gives it), so a run costs what the events cost, not the
nodes they touched, and a node that did not change is the same ``Node`` object as in the last run,
so the folds of ``core/fold.py`` reuse its sums. The view is what a fresh list of the same state
would give: nodes in name order, pods in namespace/name order.

Nothing here holds a reference cycle and nothing is frozen from the garbage collector: a closed
or dropped connector's cache is freed by reference counting at once.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import threading
import time
import weakref
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
from clusterman.cluster.kubernetes import pod_key
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

    def _request(self, doing: str, selectors: dict[str, str] | None = None, **query: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.call(_preload_content=False, **(self.selectors if selectors is None else selectors), **query)
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
        return self._list(response, "listing")

    def on_node(self, node: str, version: str) -> list[O]:
        """The objects bound to ``node`` (``spec.nodeName``; "": to none), at least as new as
        ``version`` ("": the latest). Given a version and no ``limit``, the API server answers from
        its watch cache, by its index of pods by node, rather than reading every pod from etcd."""
        selectors = dict(self.selectors)
        selectors["field_selector"] = ",".join(filter(None, (f"spec.nodeName={node}", selectors.get("field_selector"))))
        doing = f"listing (on node {node})"
        at = {"resource_version": version} if version else {}
        response = self._request(doing, selectors, _request_timeout=request_timeout(self.timeout_seconds), **at)
        return self._list(response, doing).items

    def _list(self, response: Any, doing: str) -> Page[O]:
        try:
            body = objects.decode(objects.LIST_OF[self.kind], response.data)
        except objects.msgspec.DecodeError as e:
            raise self._fail(doing, f"the answer is not JSON: {e}") from e
        except objects.msgspec.ValidationError as e:
            raise self._fail(doing, f"the answer is not a {self.kind.__name__}List: {e}") from e
        if body.items is None:
            raise self._fail(doing, "the answer has no items list")
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
            try:  # one pass over the object, as for most events
                event: Any = objects.decode(objects.EVENT_OF[self.kind], line)
            except objects.msgspec.ValidationError:  # an ERROR's Status is not an object's shape
                event = None
            if event is None or event.type == "ERROR":
                raw = objects.decode(objects.WatchEvent, line)
                if raw.type == "ERROR":
                    status = objects.decode(objects.Status, raw.object)
                    if status.code == 410:
                        raise Gone(status.message)
                    raise StreamEnded(f"the server ended the watch: {status.code} {status.reason}: {status.message}")
                event = objects.EVENT_OF[self.kind](raw.type, objects.decode(self.kind, raw.object))
        except objects.DecodeError as e:
            raise StreamEnded(f"a watch event that is not a {self.kind.__name__} event: {e}") from e
        if event.type not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
            raise StreamEnded(f"a watch event of unknown type {event.type!r}")
        obj: O = event.object
        return Event(event.type, None if event.type == "BOOKMARK" else obj, obj.metadata.resource_version)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._response is not None:
                self._response.shutdown()


class PodReader:
    """Every unfinished pod of the cluster, listed and watched once for the pools of this process
    that read it (``PoolCache``, registered with ``join``): each pod goes to the pools whose nodes
    it is on, or whose pending work it is, and the others drop it before making its record.

    It holds its pools weakly and stops when the last one leaves, so a pool dropped without being
    closed is freed all the same."""

    def __init__(
        self,
        source: KubernetesSource[objects.Pod],
        *,
        clock: Callable[[], float] = time.monotonic,
        on_stop: Callable[[], None] = lambda: None,
    ) -> None:
        self.source = source
        self._pools = _Pods()
        self.reflector = Reflector("pods", source, self._pools, clock=clock)
        self._on_stop = on_stop
        self._sync_lock = threading.Lock()
        self._stopped = False
        # called before the first list: the other pools of a shared reader join it (``PodReaders``)
        self.gather: Callable[[], None] = lambda: None

    @property
    def synced(self) -> bool:
        return self.reflector.freshness().synced

    @property
    def stopped(self) -> bool:
        return self._stopped

    def join(self, cache: PoolCache) -> None:
        self._pools.caches.add(cache)

    def leave(self, cache: PoolCache | None = None, timeout: float = 5.0) -> None:
        """``cache`` leaves (None: one that was dropped); the reader stops when none is left."""
        if cache is not None:
            self._pools.caches.discard(cache)
        if not any(True for _ in self._pools.caches) and not self._stopped:
            self._stopped = True
            self.reflector.stop(timeout)
            self._on_stop()

    def sync(self, cache: PoolCache, again: bool = False) -> None:
        """``cache`` has its nodes: give it their pods. The first pool (or ``again``) lists every pod,
        after the nodes of every pool registered (so one list serves them all); a pool that comes
        later reads the pods of each of its nodes."""
        with self._sync_lock:
            if again or not self.synced:
                self.gather()
                for other in list(self._pools.caches):
                    if other is not cache and not other.node_reflector.freshness().synced:
                        with contextlib.suppress(Exception):  # its own first snapshot says why
                            other.node_reflector.sync()
                self.reflector.sync()
        if not cache.pods_listed:
            cache.read_pods_of_every_node()

    def version(self) -> str:
        """The version the watch has reached; "" while it lists (then only the latest will do)."""
        return self.reflector.version or ""

    def start(self) -> None:
        self.reflector.start()


class _Pods:
    """The pod reflector's store: each pod to every pool reading it, by weak reference."""

    def __init__(self) -> None:
        self.caches: weakref.WeakSet[PoolCache] = weakref.WeakSet()

    def replace(self, pods: Iterable[objects.Pod]) -> None:
        caches = list(self.caches)
        for cache in caches:
            cache.listing_pods()
        done = False
        try:
            for pod in pods:
                key, node = pod_key(pod), pod.spec.node_name or ""
                for cache in caches:
                    cache.take(key, node, pod)
            done = True
        finally:
            for cache in caches:
                cache.listed_pods(done)

    def update(self, kind: str, pod: objects.Pod) -> None:
        key, node = pod_key(pod), pod.spec.node_name or ""
        for cache in list(self.caches):
            cache.take(key, node, None if kind == DELETED else pod)


class PoolCache:
    """The pool's node and pod records, and the view a run reads (see the module's docstring)."""

    def __init__(
        self,
        pool: KubernetesPool,
        nodes: KubernetesSource[objects.Node],
        reader: PodReader,
        *,
        stale_after_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pool = pool
        self.reader = reader
        self.stale_after_seconds = STALE_AFTER_SECONDS if stale_after_seconds is None else stale_after_seconds
        self.clock = clock
        self._lock = threading.RLock()
        self.nodes: dict[str, NodeRecord] = {}
        self.pods: dict[str, str] = {}  # every kept pod by namespace/name -> its node ("": pending)
        self._on: dict[str, dict[str, Task]] = {}  # node name -> its pods' tasks
        self._pending: dict[str, Task] = {}
        self._defaulted: set[str] = set()  # pods that took the default request
        self._errors: dict[str, str] = {}  # pods that cannot be read -> why
        self._broken: dict[str, str] = {}  # node name -> why its object cannot be read
        self._built: dict[str, Node] = {}  # each node with its pods, as the next view gives it
        self._live = False  # a view was given: each change rebuilds its node as it arrives
        self._order: list[str] | None = None  # node names in name order; None: to be sorted again
        self._pending_view: tuple[Task, ...] | None = None
        self.pods_listed = False  # this pool took part in a whole list of the pods
        self._unlisted: set[str] | None = None  # during a list of the pods: the kept ones it has not given
        self._joining: dict[str, set[str]] = {}  # node that joined -> pods the watch gave since
        self._unread: dict[str, str] = {}  # node whose pods could not be read -> why
        self.node_reflector = Reflector("nodes", nodes, _NodeStore(self), clock=clock)
        reader.join(self)
        # dropped without ``close``: the watch of its nodes stops, and the reader once alone
        self._finalizer = weakref.finalize(self, _dropped, self.node_reflector, reader)

    @property
    def pod_reflector(self) -> Reflector[objects.Pod]:
        return self.reader.reflector

    # --- nodes (the node reflector's thread, or the first snapshot's) -----------------------------

    def put_node(self, name: str, record: NodeRecord | None, broken: str = "") -> None:
        with self._lock:
            self._broken.pop(name, None)
            if broken:
                self._broken[name] = broken
            old = self.nodes.get(name)
            if record is None:
                if old is not None:
                    self._left(name)
                return
            if old == record:
                return
            self.nodes[name] = record
            joined = old is None and self.pods_listed
            if old is None:
                self._order = None
                if joined:
                    self._joining[name] = set()
            self._changed(name)
        if joined:
            self._read_pods_of([name])

    def _left(self, name: str) -> None:
        del self.nodes[name]
        self._order = None
        self._joining.pop(name, None)
        self._unread.pop(name, None)
        self._built.pop(name, None)
        for key in self._on.pop(name, {}):
            del self.pods[key]
            self._defaulted.discard(key)
            self._errors.pop(key, None)

    def listed_nodes(self, names: set[str]) -> None:
        """A whole list of the nodes has been put: the nodes it did not give are gone."""
        with self._lock:
            for name in [n for n in self.nodes if n not in names]:
                self._left(name)
            for name in [n for n in self._broken if n not in names]:
                del self._broken[name]

    # --- a node's pods, read when it joins ---------------------------------------------------------

    def read_pods_of_every_node(self) -> None:
        """This pool came after the reader's list: read the pods of each of its nodes, and those
        bound to none (``spec.nodeName=``: its pending pods may be among them)."""
        with self._lock:
            names = [*self.nodes, ""]
            for name in names:
                self._joining.setdefault(name, set())
            self.pods_listed = True
        self._read_pods_of(names)

    def catch_up(self) -> None:
        """Read again the pods of the nodes whose read failed, until one fails (a run calls this)."""
        for name in list(self._unread):
            if not self._read_pods_of([name]):
                return

    def _read_pods_of(self, names: list[str]) -> bool:
        """Read the pods of nodes that joined, in this thread. The watch goes on meanwhile: a pod it
        gave since the node joined is as new as it knows, so the read's copy of it is not taken (a
        read of the watch's version or later is: ``PodReader.version``). False if a read failed."""
        version = self.reader.version()  # after the nodes were marked as joining
        for i, name in enumerate(names):
            try:
                pods = self.reader.source.on_node(name, version)
            except ConnectorError as e:  # this one and the rest are read again at the next runs
                with self._lock:
                    for left in names[i:]:
                        if left in self._joining:
                            self._unread[left] = str(e)
                return False
            records = [(pod_key(pod), pod_record(pod, self.pool)) for pod in pods]
            with self._lock:
                taken = self._joining.pop(name, None)
                if taken is None:  # it left meanwhile
                    continue
                self._unread.pop(name, None)
                for key, record in records:
                    if key not in taken and (record is None or record.node == name):
                        if self._unlisted is not None:
                            self._unlisted.discard(key)
                        self._put(key, record)
        return True

    # --- pods (the pod reflector's thread) ----------------------------------------------------------

    def take(self, key: str, node: str, pod: objects.Pod | None) -> None:
        """One pod from the reader (None: deleted). A pod bound to another pool's node is dropped
        before its record is made: most of the cluster's pods are, for a small pool."""
        if node and node not in self.nodes:
            if key in self.pods:  # no longer this pool's (a pending pod bound elsewhere)
                with self._lock:
                    self._put(key, None)
            return
        record = None if pod is None else pod_record(pod, self.pool)
        with self._lock:
            if node and node not in self.nodes:  # it left meanwhile
                record = None
            elif node in self._joining:
                self._joining[node].add(key)
            if self._unlisted is not None:
                self._unlisted.discard(key)
            self._put(key, record)

    def listing_pods(self) -> None:
        with self._lock:
            self._unlisted = set(self.pods)  # the keys held: no copy of the strings

    def listed_pods(self, complete: bool) -> None:
        """The end of a list of the pods; once whole, the kept pods it did not give are gone. Until
        then a run reads each pod as it was before the list or as the list gave it: never a pool
        half listed."""
        with self._lock:
            unlisted, self._unlisted = self._unlisted, None
            if not complete or unlisted is None:
                return
            for key in unlisted:
                self._put(key, None)
            self.pods_listed = True

    def _put(self, key: str, record: PodRecord | None) -> None:
        """Keep a pod's record (None: drop it). Only its task is kept, on its node or pending; the
        record's other fields go to small indexes (the collector walks one object a pod, not two)."""
        node = self.pods.get(key)
        if node is not None:
            held = self._on[node][key] if node else self._pending[key]
            if (
                record is not None
                and record.node == node
                and record.task == held
                and record.defaulted == (key in self._defaulted)
                and record.error == self._errors.get(key, "")
            ):
                return  # most updates are status the pool does not read
            del self.pods[key]
            self._defaulted.discard(key)
            self._errors.pop(key, None)
            if node:
                pods = self._on[node]
                del pods[key]
                if not pods:
                    del self._on[node]
                self._changed(node)
            else:
                del self._pending[key]
                self._pending_view = None
        if record is None:
            return
        key = record.task.id  # the same string as the key: one a pod, not two
        self.pods[key] = record.node
        if record.defaulted:
            self._defaulted.add(key)
        if record.error:
            self._errors[key] = record.error
        if record.node:
            self._on.setdefault(record.node, {})[key] = record.task
            self._changed(record.node)
        else:
            self._pending[key] = record.task
            self._pending_view = None

    def _changed(self, name: str) -> None:
        """Fold a change into its node as it arrives, so that a run costs what changed in the
        events, not the nodes they touched; before the first view, the view builds them."""
        if not self._live or self._fold(name) is None:
            self._built.pop(name, None)

    def _fold(self, name: str, now: float | None = None) -> Node | None:
        """The node with its pods, kept for the next views; None when it cannot be kept: one of its
        pods cannot be read (the view raises), or its taint carries no time (``now`` given: built
        for this view only)."""
        record = self.nodes.get(name)
        if record is None:
            return None
        pods = self._on.get(name, {})
        keys = sorted(pods)
        if self._errors and any(k in self._errors for k in keys):
            return None
        tasks = tuple(pods[k] for k in keys)
        if record.untimed:
            return None if now is None else assemble(record.at(now), tasks)
        node = self._built[name] = assemble(record.node, tasks)
        return node

    def _raise_broken(self, keys: Iterable[str]) -> None:
        for key in keys:
            if key in self._errors:
                raise ConnectorError(self._errors[key])

    # --- the run's side ---------------------------------------------------------------------------

    def view(self, now: float) -> SchedulerView:
        """What a fresh list would give, built from the records.

        An object that cannot be read raises ConnectorError, as a fresh list would, until it is
        fixed or gone."""
        with self._lock:
            if self._broken:
                raise ConnectorError(next(iter(self._broken.values())))
            if self._unread:
                name, why = next(iter(self._unread.items()))
                where = f"on node {name}" if name else "bound to no node"
                raise ConnectorError(f"the pods {where} could not be read: {why}")
            if self._order is None:
                self._order = sorted(self.nodes)
            built: list[Node] = []
            for name in self._order:
                node = self._built.get(name) or self._fold(name, now)
                if node is None:
                    self._raise_broken(sorted(self._on.get(name, {})))
                assert node is not None
                built.append(node)
            self._live = True
            if self._pending_view is None:
                keys = sorted(self._pending)
                self._raise_broken(keys)
                self._pending_view = tuple(self._pending[k] for k in keys)
            defaulted = len(self._defaulted)
            first = heapq.nsmallest(6, self._defaulted) if defaulted else []
        warn_defaulted(defaulted, first, self.pool)
        return SchedulerView(tuple(built), self._pending_view, self.stale())

    def freshness(self) -> tuple[Freshness, Freshness]:
        return self.node_reflector.freshness(), self.reader.reflector.freshness()

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
        return self.node_reflector.freshness().synced and self.pods_listed

    def sync(self, again: bool = False) -> None:
        """List the nodes, then give them their pods, in the caller's thread (the API's errors are
        raised). ``again``: list both again, though they were."""
        if again or not self.node_reflector.freshness().synced:
            self.node_reflector.sync()
        self.reader.sync(self, again)

    def start(self) -> None:
        self.node_reflector.start()
        self.reader.start()

    def nudge(self) -> None:
        """A run reads the cache: a watch waiting to retry tries now (``Reflector.nudge``)."""
        self.node_reflector.nudge()
        self.reader.reflector.nudge()

    def close(self) -> None:
        """Stop watching, leave the reader (stopped if this pool was its last), drop the records."""
        self._finalizer.detach()
        self.node_reflector.stop()
        self.reader.leave(self)
        with self._lock:
            self.nodes, self.pods, self._on, self._pending, self._errors = {}, {}, {}, {}, {}
            self._defaulted = set()
            self._built, self._joining, self._unread, self._order, self._pending_view = {}, {}, {}, None, None


def _dropped(nodes: Reflector[objects.Node], reader: PodReader) -> None:
    """A pool's cache was dropped without ``close``: in whatever thread dropped it, so nothing waits."""
    nodes.stop(timeout=0)
    reader.leave(timeout=0)


class _NodeStore:
    """The node reflector's store: the pool's cache, by weak reference (the cache holds the
    reflector, and a dropped cache must be freed while the reflector's thread ends)."""

    def __init__(self, cache: PoolCache) -> None:
        self.cache = weakref.ref(cache)

    def replace(self, nodes: Iterable[objects.Node]) -> None:
        names: set[str] = set()
        for obj in nodes:
            cache = self.cache()
            if cache is None:
                return
            names.add(obj.metadata.name)
            self._put(cache, obj)
        cache = self.cache()
        if cache is not None:
            cache.listed_nodes(names)

    def update(self, kind: str, obj: objects.Node) -> None:
        cache = self.cache()
        if cache is None:
            return
        if kind == DELETED:
            cache.put_node(obj.metadata.name, None)
        else:
            self._put(cache, obj)

    @staticmethod
    def _put(cache: PoolCache, obj: objects.Node) -> None:
        try:
            record = node_record(obj)
        except ConnectorError as e:
            cache.put_node(obj.metadata.name, None, str(e))
            return
        cache.put_node(record.node.id, record)
