"""A Kubernetes API server stand-in for the benchmark, in a process of its own, on loopback.

``python -m bench._kube_server NODES PODS_PER_NODE`` prints its URL and serves the pool's nodes and
pods (``_kube_objects``: about 9 KB a pod, 13 KB a node) as the API server does for the connector:
paged lists (``limit``/``continue``, selectors ignored: every node is the pool's and every pod is
unfinished), and ``watch=true`` from a resourceVersion, with bookmarks each second and the stream
ended at ``timeoutSeconds``. Objects are kept as a few fields and rendered per request, so the
server holds 300,000 pods in little memory.

Bench-only calls: ``POST /bench/churn?pods=K&nodes=M`` changes K pods (half of them updated, half
replaced by a new pod on the same node) and M nodes (a status update, as kubelets write every
few minutes); ``GET /bench/stats`` is ``{"version": V, "bytes": B}``, B the bytes sent so far.
"""

from __future__ import annotations

import json
import random
import sys
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
        self.events: list[tuple[int, str, bytes]] = []  # (version, resource, a watch event line)
        self.sent = 0
        self.rng = random.Random(7)
        self.serial = 0
        self._order: dict[str, list[str]] = {}  # resource -> its keys in order, until the next change

    def _next(self) -> int:
        self.version += 1
        return self.version

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
            for n, key in enumerate(keys):
                state = self.pods[key]
                if n % 2 == 0:  # an update: a new status, a new version
                    state[0] = self._next()
                    self._event("pods", "MODIFIED", self.render_pod(key))
                else:  # replaced: the old pod deleted, a new one on the same node
                    del self.pods[key]
                    state[0] = self._next()
                    self._event("pods", "DELETED", self.render_pod(key, state))
                    self.serial += 1
                    fresh = f"{key.rsplit('-', 1)[0]}-r{self.serial:05d}"
                    self.pods[fresh] = [self._next(), state[1], state[2], f"r{self.serial:08d}"]
                    self._event("pods", "ADDED", self.render_pod(fresh))
            for name in self.rng.sample(sorted(self.nodes), nodes):
                self.nodes[name][0] = self._next()
                self._event("nodes", "MODIFIED", self.render_node(name))
            self._order.clear()
            self.lock.notify_all()

    def _event(self, resource: str, kind: str, obj: bytes) -> None:
        self.events.append((self.version, resource, b'{"type":"%s","object":%s}\n' % (kind.encode(), obj)))

    def page(self, resource: str, query: dict[str, str]) -> bytes:
        with self.lock:
            keys = self._order.get(resource)
            if keys is None:
                keys = self._order[resource] = sorted(self.nodes if resource == "nodes" else self.pods)
            offset = int(query.get("continue") or 0)
            limit = int(query.get("limit") or 0) or len(keys)
            chosen = keys[offset : offset + limit]
            items = [self.render_node(k) if resource == "nodes" else self.render_pod(k) for k in chosen]
            meta: dict[str, Any] = {"resourceVersion": str(self.version)}
            if offset + limit < len(keys):
                meta["continue"] = str(offset + limit)
        kind = "NodeList" if resource == "nodes" else "PodList"
        head = json.dumps({"kind": kind, "apiVersion": "v1", "metadata": meta})[:-1].encode()
        return head + b',"items":[' + b",".join(items) + b"]}"

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

        def _send(self, body: bytes, status: int = 200) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            with cluster.lock:
                cluster.sent += len(body)

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            if parts.path == "/bench/stats":
                self._send(json.dumps({"version": cluster.version, "bytes": cluster.sent}).encode())
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
