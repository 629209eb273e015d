"""A Kubernetes API server stand-in for the benchmark, in a process of its own, on loopback.

``python -m bench._kube_server NODES PODS_PER_NODE`` prints its URL and serves the pool's nodes and
pods (``_kube_objects``: about 9 KB a pod, 13 KB a node) as the API server does for the connector:
paged lists (``limit``/``continue``, selectors ignored: every node is the pool's and every pod is
unfinished), and ``watch=true`` from a resourceVersion, with bookmarks each second and the stream
ended at ``timeoutSeconds``.

A real API server runs on machines of its own, so this one must cost the measured client as little
as it can on the shared cores: every object is encoded once, when the fixture is built, into an
unlinked file (2.8 GB at 300,000 pods, in the page cache rather than in this process's heap), and
a list page is those bytes copied out and joined, not objects rendered. A changed object is encoded
once when it changes (its watch event carries the same bytes).

Bench-only calls: ``POST /bench/churn?pods=K&nodes=M`` changes K pods (half of them updated, half
replaced by a new pod on the same node) and M nodes (a status update, as kubelets write every
few minutes); ``GET /bench/stats`` is ``{"version": V, "bytes": B, "cpu": C}``, B the bytes sent so
far and C this process's CPU seconds so far.
"""

from __future__ import annotations

import json
import mmap
import random
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs
from urllib.parse import urlsplit

from bench._kube_objects import KINDS
from bench._kube_objects import kind_of
from bench._kube_objects import node_template
from bench._kube_objects import pod_template

NAMESPACES = ("default", "payments", "search", "ads", "platform")


class Encoded:
    """Each object's JSON, encoded once: the fixture's in a file, in list order and comma-separated
    (so a run of unchanged objects is one slice of it), each later change in memory."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="kube-server-")  # noqa: SIM115 - open for the server's life
        self._view = memoryview(b"")
        self._at: dict[str, tuple[int, int]] = {}  # key -> (offset, end) in the file
        self._changed: dict[str, bytes] = {}

    def write(self, key: str, body: bytes) -> None:
        """Before ``seal``, in list order: one object of the fixture."""
        start = self._file.tell()
        self._file.write(body + b",")
        self._at[key] = (start, start + len(body))

    def seal(self) -> None:
        self._file.flush()
        self._view = memoryview(mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ))

    def __setitem__(self, key: str, body: bytes) -> None:
        self._changed[key] = body

    def __getitem__(self, key: str) -> bytes:
        return self._changed.get(key) or bytes(self._view[slice(*self._at[key])])

    def __delitem__(self, key: str) -> None:
        self._changed.pop(key, None)
        self._at.pop(key, None)

    def items(self, keys: list[str]) -> list[bytes | memoryview]:
        """The JSON array's inside for ``keys``, as buffers to send without copying: one slice of
        the file per run of unchanged neighbours, each changed object on its own."""
        out: list[bytes | memoryview] = []
        run: list[int] | None = None  # [start, end] in the file
        for key in keys:
            body = self._changed.get(key)
            if body is None:
                start, end = self._at[key]
                if run is not None and start == run[1] + 1:
                    run[1] = end
                    continue
            if run is not None:
                out += (self._view[run[0] : run[1]], b",")
                run = None
            if body is None:
                run = [start, end]
            else:
                out += (body, b",")
        if run is not None:
            out.append(self._view[run[0] : run[1]])
        elif out:
            out.pop()  # the last comma
        return out


class Cluster:
    def __init__(self, nodes: int, pods_per_node: int) -> None:
        self.lock = threading.Condition()
        self.version = 1000
        self.pod_templates = {k: pod_template(k) for k in KINDS}
        self.node_template = node_template()
        self.nodes: dict[str, list[Any]] = {}  # name -> [rv, number]
        self.pods: dict[str, list[Any]] = {}  # "ns/name" -> [rv, node, kind, uid]
        for i in range(nodes):
            self.nodes[f"ip-10-{i >> 16 & 255}-{i >> 8 & 255}-{i & 255}.us-west-2.compute.internal"] = [self._next(), i]
        names = sorted(self.nodes)
        for i, node in enumerate(names):
            for slot in range(pods_per_node):
                kind = kind_of(i, slot, pods_per_node)
                key = f"{NAMESPACES[slot % len(NAMESPACES)]}/app-{i:05d}-{slot:02d}-x7k2p"
                self.pods[key] = [self._next(), "" if kind == "pending" else node, kind, f"{i:08d}-{slot:04d}"]
        self.encoded = {"nodes": Encoded(), "pods": Encoded()}
        self._order: dict[str, list[str]] = {}  # resource -> its keys in order, until the next change
        for resource, render in (("nodes", self.render_node), ("pods", self.render_pod)):
            for key in self._keys(resource):
                self.encoded[resource].write(key, render(key))
            self.encoded[resource].seal()
        self.events: list[tuple[int, str, bytes]] = []  # (version, resource, a watch event line)
        self.sent = 0
        self.rng = random.Random(7)
        self.serial = 0

    def _next(self) -> int:
        self.version += 1
        return self.version

    def _keys(self, resource: str) -> list[str]:
        keys = self._order.get(resource)
        if keys is None:
            keys = self._order[resource] = sorted(self.nodes if resource == "nodes" else self.pods)
        return keys

    def render_node(self, name: str) -> bytes:
        rv, i = self.nodes[name]
        return self.node_template.render(
            {
                "name": name.encode(), "rv": str(rv).encode(), "uid": f"node-{i:08d}".encode(),
                "instance": f"i-{i:017x}".encode(), "ip": f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}".encode(),
                "ready": b"True",
            }
        )  # fmt: skip

    def render_pod(self, key: str, state: list[Any] | None = None) -> bytes:
        rv, node, kind, uid = state or self.pods[key]
        namespace, name = key.split("/")
        return self.pod_templates[kind].render(
            {
                "name": name.encode(), "namespace": namespace.encode(), "node": node.encode(),
                "rv": str(rv).encode(), "uid": uid.encode(),
            }
        )  # fmt: skip

    def churn(self, pods: int, nodes: int) -> None:
        with self.lock:
            keys = self.rng.sample(sorted(self.pods), pods)
            encoded = self.encoded["pods"]
            for n, key in enumerate(keys):
                state = self.pods[key]
                if n % 2 == 0:  # an update: a new status, a new version
                    state[0] = self._next()
                    encoded[key] = self.render_pod(key)
                    self._event("pods", "MODIFIED", encoded[key])
                else:  # replaced: the old pod deleted, a new one on the same node
                    del self.pods[key]
                    del encoded[key]
                    state[0] = self._next()
                    self._event("pods", "DELETED", self.render_pod(key, state))
                    self.serial += 1
                    fresh = f"{key.rsplit('-', 1)[0]}-r{self.serial:05d}"
                    self.pods[fresh] = [self._next(), state[1], state[2], f"r{self.serial:08d}"]
                    encoded[fresh] = self.render_pod(fresh)
                    self._event("pods", "ADDED", encoded[fresh])
            for name in self.rng.sample(sorted(self.nodes), nodes):
                self.nodes[name][0] = self._next()
                self.encoded["nodes"][name] = self.render_node(name)
                self._event("nodes", "MODIFIED", self.encoded["nodes"][name])
            self._order.clear()
            self.lock.notify_all()

    def _event(self, resource: str, kind: str, obj: bytes) -> None:
        self.events.append((self.version, resource, b'{"type":"%s","object":%s}\n' % (kind.encode(), obj)))

    def page(self, resource: str, query: dict[str, str]) -> list[bytes | memoryview]:
        with self.lock:
            keys = self._keys(resource)
            offset = int(query.get("continue") or 0)
            limit = int(query.get("limit") or 0) or len(keys)
            items = self.encoded[resource].items(keys[offset : offset + limit])
            meta: dict[str, Any] = {"resourceVersion": str(self.version)}
            if offset + limit < len(keys):
                meta["continue"] = str(offset + limit)
        kind = "NodeList" if resource == "nodes" else "PodList"
        head = json.dumps({"kind": kind, "apiVersion": "v1", "metadata": meta})[:-1].encode()
        return [head + b',"items":[', *items, b"]}"]

    def watch(self, resource: str, since: int, seconds: float) -> Iterator[bytes]:
        deadline = time.monotonic() + seconds
        next_bookmark = time.monotonic() + 1.0
        kind = "Node" if resource == "nodes" else "Pod"
        while time.monotonic() < deadline:
            with self.lock:
                lines = [line for version, r, line in self.events if version > since and r == resource]
                since = self.version
                if not lines:
                    self.lock.wait(0.2)
            if lines:
                yield b"".join(lines)
            if time.monotonic() >= next_bookmark:
                next_bookmark = time.monotonic() + 1.0
                meta = {"resourceVersion": str(since)}
                yield json.dumps({"type": "BOOKMARK", "object": {"kind": kind, "metadata": meta}}).encode() + b"\n"


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
                stats = {"version": cluster.version, "bytes": cluster.sent, "cpu": round(time.process_time(), 3)}
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
                try:
                    for chunk in cluster.watch(resource, since, float(query.get("timeoutSeconds") or 60)):
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
            query = {k: v[-1] for k, v in parse_qs(urlsplit(self.path).query).items()}
            cluster.churn(int(query.get("pods", 0)), int(query.get("nodes", 0)))
            self._send(b"{}")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    return server


def main() -> None:
    cluster = Cluster(int(sys.argv[1]), int(sys.argv[2]))
    server = serve(cluster)
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever(poll_interval=0.1)


if __name__ == "__main__":
    main()
