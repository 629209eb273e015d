"""A Kubernetes API server stand-in for the benchmarks, in a process of its own, on loopback.

``python -m bench._kube_server NODES PODS_PER_NODE [POOLS]`` prints its URL and serves the nodes
and pods (``_kube_objects``: about 9 KB a pod, 13.6 KB a node) as the API server does for the
connector: paged lists (``limit``/``continue``), a node's pods (``fieldSelector=spec.nodeName=N``),
and ``watch=true`` from a resourceVersion, with bookmarks each second and the stream ended at
``timeoutSeconds``; a watch from a version older than the history it keeps is answered 410 Gone.

The nodes are cut into POOLS pools of consecutive nodes (``clusterman.com/pool``: ``default`` for
one pool, else ``pool-0`` ...), and every node also carries ``bench.clusterman.com/cluster:
whole`` (``_kube_objects.CLUSTER_LABEL``): a node label selector on either picks its nodes. Pods ask
for their node's pool and for the whole cluster. Field selectors on a phase are ignored (no pod
here is finished).

A real API server runs on machines of its own, so this one must cost the measured client as little
as it can on the shared cores: every object of the fixture is encoded once into an unlinked file
(2.8 GB at 300,000 pods, in the page cache rather than in this process's heap), and a list page is
those bytes copied out and joined, not objects rendered. An object that changed since is rendered
from its few fields when it is sent (a few µs), and the watch history keeps those fields, not bytes.

Bench-only calls:

- ``POST /bench/churn?pods=K&nodes=M``: at once, K pods change (half updated, half replaced by a
  new pod on the same node) and M nodes send a status update;
- ``POST /bench/flow?creations=C&deletions=D&heartbeat_seconds=H``: from now on, churn as a busy
  cluster's, in steps of 0.1 s: C pods a second are created (ADDED with no node, bound to a random
  node 0.1 s later, a status update 2 s later), D pods a second are deleted (a status update as
  they terminate, DELETED 3 s later), and each node sends a status update every H seconds (0:
  none). ``creations=0&deletions=0&heartbeat_seconds=0`` stops it;
- ``POST /bench/expire``: the open watches end with 410 Gone and the history is dropped, as when
  etcd compacts past them;
- ``GET /bench/stats``: ``{"version", "bytes", "cpu", "events", "lists": {resource: n}}``: bytes
  sent so far, this process's CPU seconds, watch events made, full lists served (last pages).
"""

from __future__ import annotations

import bisect
import json
import mmap
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs
from urllib.parse import urlsplit

from bench._kube_objects import CLUSTER_LABEL
from bench._kube_objects import KINDS
from bench._kube_objects import POOL
from bench._kube_objects import POOL_LABEL
from bench._kube_objects import WHOLE
from bench._kube_objects import kind_of
from bench._kube_objects import node_template
from bench._kube_objects import pod_template

NAMESPACES = ("default", "payments", "search", "ads", "platform")
HISTORY = 200_000  # watch events kept (6 minutes at 550 a second); older versions are 410 Gone
TICK = 0.1  # seconds between steps of the flow of changes
BOUND_AFTER, RUNNING_AFTER, GONE_AFTER = 1, 20, 30  # steps from a creation (deletion) to its next event


class Encoded:
    """The fixture's objects, encoded once into a file in list order and comma-separated (so a run of
    unchanged neighbours is one slice of it)."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="kube-server-")  # noqa: SIM115 - open for the server's life
        self._view = memoryview(b"")
        self._at: dict[str, tuple[int, int]] = {}  # key -> (offset, end) in the file

    def write(self, key: str, body: bytes) -> None:
        """Before ``seal``, in list order: one object of the fixture."""
        start = self._file.tell()
        self._file.write(body + b",")
        self._at[key] = (start, start + len(body))

    def seal(self) -> None:
        self._file.flush()
        self._view = memoryview(mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ))

    def forget(self, key: str) -> None:
        """The object changed: it is rendered from now on."""
        self._at.pop(key, None)

    def items(self, keys: list[str], render: Callable[[str], bytes]) -> list[bytes | memoryview]:
        """The JSON array's inside for ``keys``, as buffers to send without copying: one slice of the
        file per run of unchanged neighbours, each changed object rendered."""
        out: list[bytes | memoryview] = []
        run: list[int] | None = None  # [start, end] in the file
        for key in keys:
            at = self._at.get(key)
            if at is not None and run is not None and at[0] == run[1] + 1:
                run[1] = at[1]
                continue
            if run is not None:
                out += (self._view[run[0] : run[1]], b",")
                run = None
            if at is not None:
                run = list(at)
            else:
                out += (render(key), b",")
        if run is not None:
            out.append(self._view[run[0] : run[1]])
        elif out:
            out.pop()  # the last comma
        return out


class Cluster:
    def __init__(self, nodes: int, pods_per_node: int, pools: int = 1) -> None:
        self.lock = threading.Condition()
        self.version = 1000
        self.pod_templates = {k: pod_template(k) for k in KINDS}
        self.node_template = node_template()
        self.nodes: dict[str, list[Any]] = {}  # name -> [rv, number, pool]
        self.pods: dict[str, list[Any]] = {}  # "ns/name" -> [rv, node, kind, uid, pool]
        self.on_node: dict[str, set[str]] = {}
        self.pool_names = [POOL] if pools == 1 else [f"pool-{k}" for k in range(pools)]
        for i in range(nodes):
            name = f"ip-10-{i >> 16 & 255}-{i >> 8 & 255}-{i & 255}.us-west-2.compute.internal"
            self.nodes[name] = [self._next(), i, self.pool_names[i * pools // nodes]]
            self.on_node[name] = set()
        names = sorted(self.nodes)
        for i, node in enumerate(names):
            pool = self.nodes[node][2]
            for slot in range(pods_per_node):
                kind = kind_of(i, slot, pods_per_node)
                key = f"{NAMESPACES[slot % len(NAMESPACES)]}/app-{i:05d}-{slot:02d}-x7k2p"
                bound = "" if kind == "pending" else node
                self.pods[key] = [self._next(), bound, kind, f"{i:08d}-{slot:04d}", pool]
                if bound:
                    self.on_node[node].add(key)
        self.encoded = {"nodes": Encoded(), "pods": Encoded()}
        self._order: dict[tuple[str, str], list[str]] = {}  # (resource, selector) -> keys, until a change
        self._lists: dict[int, tuple[int, list[str]]] = {}  # a paged list's number -> its version, keys
        self._list_serial = 0
        for resource, render in (("nodes", self.render_node), ("pods", self.render_pod)):
            for key in self._keys(resource, ""):
                self.encoded[resource].write(key, render(key))
            self.encoded[resource].seal()
        # the watch history: versions, and (resource, type, key, the object's fields then)
        self.versions: list[int] = []
        self.events: list[tuple[str, str, str, tuple[Any, ...]]] = []
        self.oldest = self.version  # a watch from before this version is answered 410 Gone
        self.expired = 0  # ``expire`` calls: open watches end with 410 when it moves
        self.made = 0  # events made
        self.sent = 0
        self.lists = {"nodes": 0, "pods": 0}
        self.rng = random.Random(7)
        self.serial = 0
        self.flow: tuple[float, float, float] = (0.0, 0.0, 0.0)  # creations/s, deletions/s, heartbeat s
        self._flowing = threading.Event()
        self._deletable = [k for k, p in self.pods.items() if p[1] and p[2] in ("web", "job", "besteffort")]
        self._at = {k: i for i, k in enumerate(self._deletable)}
        threading.Thread(target=self._flow, daemon=True).start()

    def _next(self) -> int:
        self.version += 1
        return self.version

    # --- what is served ---------------------------------------------------------------------------

    def _keys(self, resource: str, selector: str) -> list[str]:
        keys = self._order.get((resource, selector))
        if keys is None:
            every = sorted(self.nodes if resource == "nodes" else self.pods)
            keys = [k for k in every if self._selected(resource, k, selector)] if selector else every
            self._order[(resource, selector)] = keys
        return keys

    def _selected(self, resource: str, key: str, selector: str) -> bool:
        """``selector``: a node label selector ``label=value`` or a pod field selector ``spec.nodeName=N``."""
        if not selector:
            return True
        label, _, value = selector.partition("=")
        if resource == "pods":
            return label != "spec.nodeName" or self.pods[key][1] == value
        if label == CLUSTER_LABEL:
            return value == WHOLE
        return label == POOL_LABEL and self.nodes[key][2] == value

    def render_node(self, name: str, state: tuple[Any, ...] | list[Any] | None = None) -> bytes:
        rv, i, pool = state or self.nodes[name]
        return self.node_template.render(
            {
                "name": name.encode(), "rv": str(rv).encode(), "uid": f"node-{i:08d}".encode(),
                "instance": f"i-{i:017x}".encode(), "ip": f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}".encode(),
                "ready": b"True", "pool": pool.encode(),
            }
        )  # fmt: skip

    def render_pod(self, key: str, state: tuple[Any, ...] | list[Any] | None = None) -> bytes:
        rv, node, kind, uid, pool = state or self.pods[key]
        namespace, name = key.split("/")
        return self.pod_templates[kind].render(
            {
                "name": name.encode(), "namespace": namespace.encode(), "node": node.encode(),
                "rv": str(rv).encode(), "uid": uid.encode(), "pool": pool.encode(),
            }
        )  # fmt: skip

    def page(self, resource: str, query: dict[str, str]) -> list[bytes | memoryview]:
        selector = query.get("labelSelector", "") if resource == "nodes" else ""
        if resource == "pods" and "spec.nodeName=" in query.get("fieldSelector", ""):
            selector = next(s for s in query["fieldSelector"].split(",") if s.startswith("spec.nodeName="))
        render = self.render_node if resource == "nodes" else self.render_pod
        objs = self.nodes if resource == "nodes" else self.pods
        with self.lock:
            token = query.get("continue")
            if token:  # the list's keys as of its first page (objects as they are now)
                number, _, at = token.partition(":")
                version, keys = self._lists[int(number)]
                offset = int(at)
            else:
                offset, version = 0, self.version
                if selector.startswith("spec.nodeName="):  # a node's pods: from the index
                    node = selector.partition("=")[2]
                    keys = sorted(self.on_node.get(node, ()) if node else (k for k, p in self.pods.items() if not p[1]))
                else:
                    keys = self._keys(resource, selector)
            limit = int(query.get("limit") or 0) or len(keys)
            chosen = [k for k in keys[offset : offset + limit] if k in objs]
            items = self.encoded[resource].items(chosen, render)
            meta: dict[str, Any] = {"resourceVersion": str(version)}
            if offset + limit < len(keys):
                if not token:
                    self._list_serial += 1
                    self._lists[self._list_serial] = (version, keys)
                    token = str(self._list_serial)
                meta["continue"] = f"{token.partition(':')[0]}:{offset + limit}"
            else:
                if token:
                    self._lists.pop(int(token.partition(":")[0]), None)
                if not selector.startswith("spec.nodeName="):
                    self.lists[resource] += 1
        kind = "NodeList" if resource == "nodes" else "PodList"
        head = json.dumps({"kind": kind, "apiVersion": "v1", "metadata": meta})[:-1].encode()
        return [head + b',"items":[', *items, b"]}"]

    def watch(self, resource: str, since: int, seconds: float, selector: str) -> Iterator[bytes]:
        deadline = time.monotonic() + seconds
        next_bookmark = time.monotonic() + 1.0
        kind = "Node" if resource == "nodes" else "Pod"
        render = self.render_node if resource == "nodes" else self.render_pod
        with self.lock:
            expired = self.expired
        while time.monotonic() < deadline:
            with self.lock:
                if since < self.oldest or self.expired != expired:
                    status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}
                    yield json.dumps({"type": "ERROR", "object": status}).encode() + b"\n"
                    return
                start = bisect.bisect_right(self.versions, since)
                changes = [
                    (event_type, key, state)
                    for resource_, event_type, key, state in self.events[start:]
                    if resource_ == resource
                ]
                since = self.version
                if not changes:
                    self.lock.wait(0.2)
            lines = [
                b'{"type":"%s","object":%s}\n' % (event_type.encode(), render(key, state))
                for event_type, key, state in changes
                if self._state_selected(resource, state, selector)
            ]
            if lines:
                yield b"".join(lines)
            if time.monotonic() >= next_bookmark:
                next_bookmark = time.monotonic() + 1.0
                meta = {"resourceVersion": str(since)}
                yield json.dumps({"type": "BOOKMARK", "object": {"kind": kind, "metadata": meta}}).encode() + b"\n"

    @staticmethod
    def _state_selected(resource: str, state: tuple[Any, ...], selector: str) -> bool:
        if resource == "pods" or not selector:
            return True
        label, _, value = selector.partition("=")
        return value == WHOLE if label == CLUSTER_LABEL else state[2] == value

    # --- changes ----------------------------------------------------------------------------------

    def _event(self, resource: str, event_type: str, key: str, state: list[Any]) -> None:
        """Record one change (the lock held): its version is ``state``'s, just taken."""
        self.versions.append(state[0])
        self.events.append((resource, event_type, key, tuple(state)))
        self.made += 1
        self.encoded[resource].forget(key)
        if len(self.events) > HISTORY:
            cut = len(self.events) - HISTORY // 2
            self.oldest = self.versions[cut - 1]
            del self.versions[:cut], self.events[:cut]

    def _touch(self, resource: str, key: str) -> None:
        state = (self.nodes if resource == "nodes" else self.pods)[key]
        state[0] = self._next()
        self._event(resource, "MODIFIED", key, state)

    def _create(self, key: str, node: str, kind: str, uid: str, pool: str) -> None:
        state = [self._next(), node, kind, uid, pool]
        self.pods[key] = state
        if node:
            self.on_node[node].add(key)
        self._event("pods", "ADDED", key, state)
        self._order.clear()

    def _delete(self, key: str) -> None:
        state = self.pods.pop(key)
        if state[1]:
            self.on_node[state[1]].discard(key)
        state[0] = self._next()
        self._event("pods", "DELETED", key, state)
        self._order.clear()

    def _bind(self, key: str, node: str) -> None:
        state = self.pods.get(key)
        if state is not None:
            state[1] = node
            self.on_node[node].add(key)
            self._touch("pods", key)

    def _not_deletable(self, key: str) -> None:
        i = self._at.pop(key)
        last = self._deletable.pop()
        if last != key:
            self._deletable[i] = last
            self._at[last] = i

    def churn(self, pods: int, nodes: int) -> None:
        with self.lock:
            for n, key in enumerate(self.rng.sample(sorted(self.pods), pods)):
                if n % 2 == 0:  # an update: a new status, a new version
                    self._touch("pods", key)
                    continue
                _, node, kind, _, pool = self.pods[key]  # replaced: deleted, a new one on the same node
                if key in self._at:
                    self._not_deletable(key)
                self._delete(key)
                self.serial += 1
                self._create(f"{key.rsplit('-', 1)[0]}-r{self.serial:05d}", node, kind, f"r{self.serial:08d}", pool)
            for name in self.rng.sample(sorted(self.nodes), nodes):
                self._touch("nodes", name)
            self.lock.notify_all()

    def expire(self) -> None:
        with self.lock:
            self.expired += 1
            self.oldest = self.version
            self.versions.clear()
            self.events.clear()
            self.lock.notify_all()

    def _flow(self) -> None:
        """The flow of changes (``POST /bench/flow``), a step every ``TICK`` seconds."""
        due: dict[int, list[tuple[str, str, str]]] = {}  # step -> (what, pod, node) to do then
        step = 0
        owed = [0.0, 0.0, 0.0]  # creations, deletions, heartbeats not yet made (fractions carry)
        names = sorted(self.nodes)
        beat = 0
        next_at = time.monotonic()
        while True:
            if not any(self.flow):
                self._flowing.wait()
                next_at = time.monotonic()
            creations, deletions, heartbeat = self.flow
            owed[0] += creations * TICK
            owed[1] += deletions * TICK
            owed[2] += len(names) * TICK / heartbeat if heartbeat else 0.0
            with self.lock:
                for what, key, node in due.pop(step, ()):
                    if what == "bind":
                        self._bind(key, node)
                        due.setdefault(step + RUNNING_AFTER, []).append(("run", key, node))
                    elif what == "run" and key in self.pods:
                        self._touch("pods", key)
                        self._at[key] = len(self._deletable)
                        self._deletable.append(key)
                    elif what == "gone" and key in self.pods:
                        self._delete(key)
                while owed[0] >= 1:
                    owed[0] -= 1
                    self.serial += 1
                    node = self.rng.choice(names)
                    key = f"{NAMESPACES[self.serial % len(NAMESPACES)]}/new-{self.serial:08d}-x7k2p"
                    self._create(key, "", "web", f"n{self.serial:08d}", self.nodes[node][2])
                    due.setdefault(step + BOUND_AFTER, []).append(("bind", key, node))
                while owed[1] >= 1 and self._deletable:
                    owed[1] -= 1
                    key = self._deletable[self.rng.randrange(len(self._deletable))]
                    self._not_deletable(key)
                    self._touch("pods", key)  # terminating
                    due.setdefault(step + GONE_AFTER, []).append(("gone", key, ""))
                while owed[2] >= 1:
                    owed[2] -= 1
                    self._touch("nodes", names[beat % len(names)])
                    beat += 1
                self.lock.notify_all()
            step += 1
            next_at += TICK
            time.sleep(max(0.0, next_at - time.monotonic()))

    def set_flow(self, creations: float, deletions: float, heartbeat_seconds: float) -> None:
        self.flow = (creations, deletions, heartbeat_seconds)
        if any(self.flow):
            self._flowing.set()
        else:
            self._flowing.clear()


def serve(cluster: Cluster) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, body: bytes | list[bytes | memoryview], status: int = 200) -> None:
            buffers = [body] if isinstance(body, bytes) else body
            length = sum(map(len, buffers))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(length))
            self.end_headers()
            for buffer in buffers:  # straight from the file's pages: no copy here
                self.wfile.write(buffer)
            with cluster.lock:
                cluster.sent += length

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            if parts.path == "/bench/stats":
                with cluster.lock:
                    stats = {
                        "version": cluster.version, "bytes": cluster.sent, "cpu": round(time.process_time(), 3),
                        "events": cluster.made, "lists": dict(cluster.lists),
                    }  # fmt: skip
                self._send(json.dumps(stats).encode())
                return
            resource = parts.path.rsplit("/", 1)[-1]
            if resource not in ("nodes", "pods"):
                self._send(b'{"kind":"Status","code":404}', 404)
                return
            if query.get("watch") in ("true", "True", "1"):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                since = int(query.get("resourceVersion") or cluster.version)
                seconds = float(query.get("timeoutSeconds") or 60)
                try:
                    for chunk in cluster.watch(resource, since, seconds, query.get("labelSelector", "")):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                        with cluster.lock:
                            cluster.sent += len(chunk)
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    self.close_connection = True
                return
            self._send(cluster.page(resource, query))

        def do_POST(self) -> None:
            parts = urlsplit(self.path)
            query = {k: float(v[-1]) for k, v in parse_qs(parts.query).items()}
            if parts.path == "/bench/flow":
                cluster.set_flow(
                    query.get("creations", 0), query.get("deletions", 0), query.get("heartbeat_seconds", 0)
                )
            elif parts.path == "/bench/expire":
                cluster.expire()
            else:
                cluster.churn(int(query.get("pods", 0)), int(query.get("nodes", 0)))
            self._send(b"{}")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    return server


def main() -> None:
    cluster = Cluster(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    server = serve(cluster)
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever(poll_interval=0.1)


if __name__ == "__main__":
    main()
