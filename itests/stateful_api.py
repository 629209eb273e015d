"""Stateful fakes of the Kubernetes API server and the Mesos master, on loopback, for the real clients.

``recorded_api`` answers reads with recorded JSON; acting on nodes needs a server that changes. These
keep the recorded objects as state and apply, for the few calls the node lifecycle makes, the rules
the real servers apply (read from their documentation and source), so a wrong request fails here as
it would there:

Kubernetes
  GET    /api/v1/nodes, /api/v1/pods       lists, with selectors and paging, in key order (namespace/name),
                                           each paged list one consistent state (the continue token
                                           pins the version of its first page, as etcd's does)
  GET    ...?watch=true&resourceVersion=V  a watch: every change after V, as the API server sends it:
                                           ADDED / MODIFIED / DELETED by the selectors (an object that
                                           stops matching is DELETED, one that starts is ADDED),
                                           BOOKMARKs every ``bookmark_seconds`` when asked, the stream
                                           ended after ``timeoutSeconds``; V older than the history
                                           (``compact``) is an ERROR event with a 410 Status, and
                                           ``expire_watches`` sends one to the open watches;
                                           ``drop_watches`` drops their connections mid-stream
                                           ``node_read_errors[node]`` answers a list of the pods
                                           on a node (``fieldSelector=spec.nodeName=...``)
  GET    /api/v1/nodes/{name}              one node, or 404
  PATCH  /api/v1/nodes/{name}              a strategic-merge or merge patch; ``metadata.resourceVersion``
                                           in the patch is a precondition (409 Conflict when stale);
                                           lists are replaced whole (``spec.taints`` has no merge key);
                                           ``patch_errors[name]`` answers its next PATCHes (one each)
  POST   /api/v1/namespaces/{ns}/pods/{name}/eviction
                                           a ``policy/v1`` Eviction: 404 for a missing pod, 429 for a
                                           pod whose disruption budget refuses, else the pod is gone
  /apis/clusterman.yelp.com/v1/nodemigrations
                                           the NodeMigration custom resource (cluster scope), with the
                                           rules of a CRD with a status subresource: GET lists and
                                           watches as above; POST creates one, checked against the
                                           schema of deploy/kubernetes/shared/nodemigration-crd.yaml
                                           (422 Invalid naming the field), 409 when the name exists;
                                           GET/PATCH .../{name} reads it and merge-patches it, its
                                           ``status`` left as it was; PATCH .../{name}/status changes
                                           only its ``status``; ``delete`` removes one
  a silent server                          ``hang("evictions")`` leaves eviction requests unanswered
                                           (the rest answered); ``hang("all")`` every request, and
                                           open watches send nothing; ``evicted_then_hang`` carries
                                           out the next eviction, then falls silent for everything;
                                           ``answer_again`` ends it (the requests held meanwhile get
                                           a 503, their clients long gone); ``on_held`` is called
                                           with each request ``hang`` holds, its client waiting;
                                           ``after_answer`` with each request answered and its
                                           answer, before the client reads it; ``hang("ended")``
                                           answers every watch and ends it at once, with no
                                           event or bookmark (lists are answered)
  a watch history that keeps expiring      ``gone_storm = True``: every watch is answered 410 Gone
  a stopped server                         ``go_down`` closes the port (connections refused, open ones
                                           reset); ``evicted_then_down`` carries out the next eviction,
                                           then goes down without answering it; ``come_back`` listens
                                           on the same port again, its watch history and continue
                                           tokens lost (a restarted API server: what etcd holds stays)
Mesos master
  GET    /master/slaves, /master/frameworks
  GET    /master/maintenance/schedule      ``{}`` when empty, as the master's protobuf JSON
  POST   /master/maintenance/schedule      validated as the master does: windows have machines and an
                                           unavailability; a machine has a hostname or an ip, appears
                                           once; every DOWN machine stays; new machines are DRAINING
  POST   /master/machine/down, /up         only DRAINING machines go down (agents removed, tasks lost);
                                           only DOWN machines come up (and leave the schedule)
  GET    /master/maintenance/status        draining and down machines
  a master in trouble                      ``refusing[path] = 503`` refuses a path's GETs ("No leader
                                           elected"); ``hang(path)`` leaves them unanswered until
                                           ``answer_again``; ``after_answer`` as for Kubernetes;
                                           ``add_task`` is a framework launching a task on an agent

Every request is kept (``requests``; ``writes`` are the ones that are not GETs) so a test can show
that a dry run wrote nothing. Kubernetes requests must carry the kubeconfig's bearer token.
"""

from __future__ import annotations

import abc
import copy
import json
import re
import ssl
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from typing import TypeVar

import yaml

from itests.recorded_api import Body
from itests.recorded_api import DropConnection
from itests.recorded_api import Port
from itests.recorded_api import Request
from itests.recorded_api import flag
from itests.recorded_api import label
from itests.recorded_api import lookup
from itests.recorded_api import matches
from itests.recorded_api import serving_port

Answer = tuple[int, Body]


class FakeServer(abc.ABC):
    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.url = ""
        self.port: Port | None = None  # set by ``serving``
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)

    @property
    def writes(self) -> list[Request]:
        return [r for r in self.requests if r.method != "GET"]

    def answer(self, request: Request) -> Answer:
        with self._lock:
            self.requests.append(request)
            return self.handle(request)

    @property
    def changed(self) -> threading.Condition:
        """Notified (under the state's lock) whenever the state changes."""
        return self._changed

    @abc.abstractmethod
    def handle(self, request: Request) -> Answer:
        """Answer one request (called under the lock: one request at a time changes the state)."""


# --- Kubernetes ---------------------------------------------------------------------------------


def status(code: int, reason: str, message: str) -> Answer:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason}
    return code, json.dumps({**body, "message": message}).encode()


def merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386: objects merge, ``null`` deletes, anything else (lists too) replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def selected(obj: dict[str, Any], query: dict[str, str]) -> bool:
    """The equality label and field selectors of a list or watch request."""
    return matches(query.get("labelSelector", ""), lambda k: label(obj, k)) and matches(
        query.get("fieldSelector", ""), lambda k: lookup(obj, k)
    )


def watch_line(before: bytes | None, after: bytes | None, query: dict[str, str]) -> bytes:
    """The event a watch with these selectors gets for one change, or b"" (it sees none)."""
    was = before is not None and selected(json.loads(before), query)
    now = after is not None and selected(json.loads(after), query)
    if now:
        kind, obj = ("MODIFIED" if was else "ADDED"), after
    elif was:  # deleted, or no longer selected: the object as it is now, or as it was last
        kind, obj = "DELETED", after or before
    else:
        return b""
    assert obj is not None
    return b'{"type": "%s", "object": %s}\n' % (kind.encode(), obj)


def gone_event(version: int, oldest: int) -> bytes:
    status_ = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": 410}
    status_["message"] = f"too old resource version: {version} ({oldest})"
    return json.dumps({"type": "ERROR", "object": status_}).encode() + b"\n"


CRD_FILE = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes" / "shared" / "nodemigration-crd.yaml"
MIGRATIONS = "/apis/clusterman.yelp.com/v1/nodemigrations"
KINDS = {"nodes": ("Node", "v1"), "pods": ("Pod", "v1"), "nodemigrations": ("NodeMigration", "clusterman.yelp.com/v1")}


def schema_problems(value: Any, schema: dict[str, Any], where: str) -> list[str]:
    """What an API server's structural schema check says of ``value`` (types, required, enums)."""
    kind = schema.get("type")
    types = {"object": dict, "array": list, "string": str, "integer": int, "boolean": bool}
    if kind in types and (not isinstance(value, types[kind]) or (kind == "integer" and isinstance(value, bool))):
        return [f'{where}: Invalid value: "{type(value).__name__}": {where} in body must be of type {kind}']
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(f'"{v}"' for v in schema["enum"])
        return [f'{where}: Unsupported value: "{value}": supported values: {allowed}']
    problems = []
    if kind == "object":
        for name in schema.get("required", ()):
            if name not in value:
                problems.append(f"{where}.{name}: Required value")
        for name, sub in schema.get("properties", {}).items():
            if name in value:
                problems += schema_problems(value[name], sub, f"{where}.{name}")
    if kind == "array" and "items" in schema:
        for i, item in enumerate(value):
            problems += schema_problems(item, schema["items"], f"{where}[{i}]")
    return problems


class FakeKubernetes(FakeServer):
    PATCH_TYPES = ("application/strategic-merge-patch+json", "application/merge-patch+json")
    NODE = re.compile(r"^/api/v1/nodes/([^/]+)$")
    EVICTION = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction$")
    MIGRATION = re.compile(rf"^{MIGRATIONS}/([^/]+)(/status)?$")

    def __init__(self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]], token: str = "recorded-token") -> None:
        super().__init__()
        self.nodes = {n["metadata"]["name"]: copy.deepcopy(n) for n in nodes}
        self.pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): copy.deepcopy(p) for p in pods}
        self.migrations: dict[str, dict[str, Any]] = {}
        self.objects: dict[str, dict[Any, dict[str, Any]]] = {
            "nodes": self.nodes, "pods": self.pods, "nodemigrations": self.migrations,  # type: ignore[dict-item]
        }  # fmt: skip
        self.crd_schema = yaml.safe_load(CRD_FILE.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        self.crd_installed = True  # False: the NodeMigration CRD was never applied (404 for its paths)
        self.token = token
        self.version = 50_000_000
        # the history watches read: (version, resource, the object before, the object after), as JSON
        self.history: list[tuple[int, str, bytes | None, bytes | None]] = []
        self.compacted = self.version  # a watch from an older version is answered 410 Gone
        self.bookmark_seconds = 0.2
        self._expired = 0  # expire_watches() calls: open watches end with a 410 when it moves
        self._dropped = 0  # drop_watches() calls: open watches' connections are dropped
        self._snapshots: dict[str, tuple[int, list[bytes]]] = {}  # continue token -> a list's state
        self.budget_refuses: set[str] = set()  # "ns/name": evictions answered 429 (a disruption budget)
        self.eviction_errors: dict[str, Answer] = {}  # "ns/name": any other answer to its eviction
        self.node_read_errors: dict[str, Answer] = {}  # node name: the answer to a list of its pods
        # node name (or "nodemigrations/<name>/status") -> the answers to its next PATCHes, one
        # each, before the patch is looked at (an admission webhook that fails, an etcd timeout)
        self.patch_errors: dict[str, list[Answer]] = {}
        # node name -> how many of its next PATCHes race another writer, which adds a taint first
        self.races: dict[str, int] = {}
        # "evictions" or "all": those requests go unanswered; "streams": watches are answered, and
        # then send nothing and never end; "ended": watches are answered and end at once, empty
        self.hanging = ""
        self.gone_storm = False  # every watch is answered 410 Gone, however recent its version
        self.evicted_then_hang = False  # the next eviction is carried out, then the server falls silent
        self.evicted_then_down = False  # the next eviction is carried out, then the server stops
        self.down = threading.Event()  # set once ``evicted_then_down`` took the server down
        self.unanswered: list[Request] = []
        # called with each request ``hang`` holds, before it is held (in the server's thread, while
        # the client waits for the answer): a test may stop the client right there
        self.on_held: Callable[[Request], None] = lambda request: None
        # called with each request answered and its answer, before the client reads it (in the
        # server's thread): a test may change the state right after a given call
        self.after_answer: Callable[[Request, Answer], None] = lambda request, answer: None
        self._answering = threading.Event()
        self._answering.set()

    def hang(self, what: str) -> None:
        """From now on leave ``what`` ("evictions", "all" or "streams") unanswered, or end every watch
        at once with nothing in it ("ended"), until ``answer_again``."""
        with self._lock:
            self.hanging = what
            self._answering.clear()

    def answer_again(self) -> None:
        with self._lock:
            self.hanging, self.evicted_then_hang = "", False
            self._answering.set()

    def answer(self, request: Request) -> Answer:
        """As any fake, except that a silent server holds the request (outside the state's lock,
        so the requests it still answers go on) until it answers again."""
        with self._lock:
            silent = self.hanging == "all" or (self.hanging == "evictions" and self._is_eviction(request))
            if silent:
                self.requests.append(request)
                self.unanswered.append(request)
        if silent:
            self.on_held(request)
        else:
            answer = super().answer(request)
            self.after_answer(request, answer)
            with self._lock:
                carried_out = self._is_eviction(request) and answer[0] == 201
                if self.evicted_then_down and carried_out:
                    self.evicted_then_down = False
                    self.go_down()
                    self.down.set()
                    return answer  # its connection is reset: the answer is never read
                if not (self.evicted_then_hang and carried_out):
                    return answer
                self.unanswered.append(request)
                self.evicted_then_hang = False
                self.hang("all")
        while not self._answering.wait(0.05) and not request.stopping.is_set():
            pass
        return status(503, "ServiceUnavailable", "the server was silent; the client has given up")

    def go_down(self) -> None:
        """The server stops: its port refuses connections, the open ones (watches too) are reset."""
        assert self.port is not None
        self.port.go_down()

    def come_back(self) -> None:
        """The server starts again on the same port, having lost what it kept in memory: a watch
        from before is answered 410 Gone, a continue token 410 Expired (the objects, in etcd, stay)."""
        with self._lock:
            self.compact()
            self._snapshots.clear()
        assert self.port is not None
        self.port.come_up()

    def _is_eviction(self, request: Request) -> bool:
        return request.method == "POST" and self.EVICTION.match(request.path) is not None

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pods.get((namespace, name))

    def handle(self, request: Request) -> Answer:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or token != self.token:  # the scheme is case-blind, as the API server's
            return status(401, "Unauthorized", "no bearer token")
        node = self.NODE.match(request.path)
        eviction = self.EVICTION.match(request.path)
        if request.path.startswith(MIGRATIONS) and not self.crd_installed:
            return status(404, "NotFound", "the server could not find the requested resource")
        if request.method == "GET" and request.path in ("/api/v1/nodes", "/api/v1/pods", MIGRATIONS):
            resource = request.path.rsplit("/", 1)[1]
            if flag(request.query, "watch"):
                return 200, self._watch(resource, request)
            return self._list(resource, request)
        if request.method == "POST" and request.path == MIGRATIONS:
            return self._create_migration(request)
        migration = self.MIGRATION.match(request.path)
        if migration and request.method == "GET" and not migration[2]:
            found = self.migrations.get(migration[1])
            if found is None:
                return status(404, "NotFound", f'nodemigrations.clusterman.yelp.com "{migration[1]}" not found')
            return 200, json.dumps(found).encode()
        if migration and request.method == "PATCH":
            return self._patch_migration(migration[1], bool(migration[2]), request)
        if request.method == "GET" and node:
            found = self.nodes.get(node[1])
            if found is None:
                return status(404, "NotFound", f'nodes "{node[1]}" not found')
            return 200, json.dumps(found).encode()
        if request.method == "PATCH" and node:
            return self._patch(node[1], request)
        if request.method == "POST" and eviction:
            return self._evict(eviction[1], eviction[2], request)
        return status(404, "NotFound", f"{request.method} {request.path}: not served by this fake")

    def _list(self, resource: str, request: Request) -> Answer:
        """One page of a list; the first page takes the state, the continue token keeps it."""
        query = request.query
        on_node = dict(s.split("=", 1) for s in query.get("fieldSelector", "").split(",") if "=" in s and "!=" not in s)
        if resource == "pods" and on_node.get("spec.nodeName") in self.node_read_errors:
            return self.node_read_errors[on_node["spec.nodeName"]]
        token = query.get("continue")
        if token:
            if token not in self._snapshots:
                return status(410, "Expired", "The provided continue parameter is too old")
            version, items = self._snapshots[token]
            offset = int(token.rsplit(":", 1)[1])
        else:
            objs = self.objects[resource]
            chosen = [o for _, o in sorted(objs.items()) if selected(o, query)]
            version, items, offset = self.version, [json.dumps(o).encode() for o in chosen], 0
        limit = int(query.get("limit") or 0) or len(items) or 1
        page = items[offset : offset + limit]
        metadata = {"resourceVersion": str(version)}
        if offset + limit < len(items):
            following = f"{len(self._snapshots)}:{offset + limit}"
            self._snapshots[following] = (version, items)
            metadata["continue"] = following
            metadata["remainingItemCount"] = len(items) - offset - limit  # type: ignore[assignment]
        kind, api_version = KINDS[resource]
        head = json.dumps({"kind": f"{kind}List", "apiVersion": api_version, "metadata": metadata})[:-1].encode()
        return 200, head + b', "items": [' + b",".join(page) + b"]}"

    # --- changes, and the watches that see them ---------------------------------------------------

    def _bump(self, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)

    def _record(self, resource: str, before: bytes | None, after: dict[str, Any] | None) -> None:
        """Keep one change in the history (after ``_bump``) and wake the watches."""
        self.history.append((self.version, resource, before, None if after is None else json.dumps(after).encode()))
        self._changed.notify_all()

    def put(self, resource: str, obj: dict[str, Any]) -> None:
        """Create or replace a node, a pod or a NodeMigration (a controller, the kubelet or kubectl writing it)."""
        with self._lock:
            obj = copy.deepcopy(obj)
            objs = self.objects[resource]
            key = self._key(resource, obj)
            before = objs.get(key)
            self._bump(obj)
            objs[key] = obj
            self._record(resource, None if before is None else json.dumps(before).encode(), obj)

    def delete(self, resource: str, name: str, namespace: str = "") -> None:
        with self._lock:
            gone = self.objects[resource].pop((namespace, name) if resource == "pods" else name, None)
            if gone is not None:
                self._bump(gone)  # a deletion has a version of its own
                self._record(resource, json.dumps(gone).encode(), None)

    @staticmethod
    def _key(resource: str, obj: dict[str, Any]) -> Any:
        meta = obj["metadata"]
        return (meta["namespace"], meta["name"]) if resource == "pods" else meta["name"]

    def compact(self) -> None:
        """Forget the history up to now: a watch from an older version gets 410 Gone."""
        with self._lock:
            self.compacted = self.version
            self.history.clear()

    def expire_watches(self) -> None:
        """The open watches fall out of the server's history: each ends with a 410 ERROR event."""
        with self._lock:
            self.compact()
            self._expired += 1
            self._changed.notify_all()

    def drop_watches(self) -> None:
        """The open watches' connections are dropped mid-stream (a restarting server or proxy)."""
        with self._lock:
            self._dropped += 1
            self._changed.notify_all()

    def _watch(self, resource: str, request: Request) -> Iterator[bytes]:
        query = request.query
        since = int(query.get("resourceVersion") or self.version)
        seconds = float(query.get("timeoutSeconds") or 1800)
        bookmarks = flag(query, "allowWatchBookmarks")
        kind, _ = KINDS[resource]
        return self._stream(resource, kind, since, seconds, bookmarks, query, request)

    def _stream(
        self, resource: str, kind: str, since: int, seconds: float, bookmarks: bool, query: dict[str, str],
        request: Request,
    ) -> Iterator[bytes]:  # fmt: skip
        deadline = time.monotonic() + seconds
        with self._lock:
            expired, dropped = self._expired, self._dropped
            gone = since < self.compacted or self.gone_storm
            ended = self.hanging == "ended"
        if gone:
            yield gone_event(since, self.compacted)
            return
        if ended:
            return
        seen = since
        next_bookmark = time.monotonic() + self.bookmark_seconds
        while (time.monotonic() < deadline or self.hanging == "streams") and not request.stopping.is_set():
            if self.hanging in ("all", "streams"):  # a silent server's open watches send nothing, bookmarks neither
                self._answering.wait(0.05)
                yield b""
                continue
            lines: list[bytes] = []
            with self._lock:
                if self._dropped != dropped:
                    raise DropConnection
                if self._expired != expired:
                    lines.append(gone_event(seen, self.compacted))
                else:
                    for version, changed, before, after in self.history:
                        if version > seen and changed == resource:
                            line = watch_line(before, after, query)
                            if line:
                                lines.append(line)
                    seen = self.version
                    if not lines:
                        wait = min(deadline, next_bookmark) - time.monotonic()
                        self._changed.wait(max(0.0, min(wait, 0.1)))
            if lines:
                yield b"".join(lines)
                if lines[-1].startswith(b'{"type": "ERROR"'):
                    return
            if bookmarks and time.monotonic() >= next_bookmark:
                next_bookmark = time.monotonic() + self.bookmark_seconds
                meta = {"resourceVersion": str(seen)}
                yield (
                    json.dumps(
                        {"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": "v1", "metadata": meta}}
                    ).encode()
                    + b"\n"
                )
            else:
                yield b""  # lets the server notice a client that went away

    def _patch(self, name: str, request: Request) -> Answer:
        node = self.nodes.get(name)
        if node is None:
            return status(404, "NotFound", f'nodes "{name}" not found')
        if self.patch_errors.get(name):
            return self.patch_errors[name].pop(0)
        if request.headers.get("content-type") not in self.PATCH_TYPES:
            return status(415, "UnsupportedMediaType", f"unsupported patch type {request.headers.get('content-type')}")
        if self.races.get(name, 0) > 0:  # someone else changes the node between our read and our write
            self.races[name] -= 1
            before = json.dumps(node).encode()
            taints = node["spec"].setdefault("taints", [])
            taints.append({"key": f"example.com/other-writer-{self.races[name]}", "effect": "PreferNoSchedule"})
            self._bump(node)
            self._record("nodes", before, node)
        patch = request.json()
        wanted = (patch.get("metadata") or {}).pop("resourceVersion", None)
        if wanted is not None and wanted != node["metadata"]["resourceVersion"]:
            message = (
                f'Operation cannot be fulfilled on nodes "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again"
            )
            return status(409, "Conflict", message)
        before = json.dumps(node).encode()
        merge(node, patch)
        self._bump(node)
        self._record("nodes", before, node)
        return 200, json.dumps(node).encode()

    def _create_migration(self, request: Request) -> Answer:
        body = request.json()
        if not isinstance(body, dict) or (body.get("apiVersion"), body.get("kind")) != KINDS["nodemigrations"][::-1]:
            return status(400, "BadRequest", f"not a clusterman.yelp.com/v1 NodeMigration: {body}")
        name = (body.get("metadata") or {}).get("name", "")
        problems = schema_problems({k: v for k, v in body.items() if k != "status"}, self.crd_schema, "")
        if problems:
            detail = ", ".join(p.lstrip(".") for p in problems)
            return status(422, "Invalid", f'NodeMigration.clusterman.yelp.com "{name}" is invalid: {detail}')
        if name in self.migrations:
            return status(409, "AlreadyExists", f'nodemigrations.clusterman.yelp.com "{name}" already exists')
        body.pop("status", None)  # a status subresource: a create sets no status
        meta = body["metadata"]
        meta["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        meta["uid"] = f"uid-{len(self.history)}-{name}"
        self._bump(body)
        self.migrations[name] = body
        self._record("nodemigrations", None, body)
        return 201, json.dumps(body).encode()

    def _patch_migration(self, name: str, to_status: bool, request: Request) -> Answer:
        found = self.migrations.get(name)
        if found is None:
            return status(404, "NotFound", f'nodemigrations.clusterman.yelp.com "{name}" not found')
        failing = self.patch_errors.get(f"nodemigrations/{name}/status") if to_status else None
        if failing:
            return failing.pop(0)
        if request.headers.get("content-type") != "application/merge-patch+json":
            # custom resources take no strategic merge patch
            return status(415, "UnsupportedMediaType", f"unsupported patch type {request.headers.get('content-type')}")
        patch = request.json()
        if not isinstance(patch, dict):
            return status(400, "BadRequest", "a merge patch is an object")
        # with a status subresource, the resource ignores changes to status and /status all but them
        patch = {"status": patch.get("status")} if to_status else {k: v for k, v in patch.items() if k != "status"}
        before = json.dumps(found).encode()
        changed = copy.deepcopy(found)
        merge(changed, patch)
        problems = schema_problems(changed, self.crd_schema, "")
        if problems:
            detail = ", ".join(p.lstrip(".") for p in problems)
            return status(422, "Invalid", f'NodeMigration.clusterman.yelp.com "{name}" is invalid: {detail}')
        self.migrations[name] = changed
        self._bump(changed)
        self._record("nodemigrations", before, changed)
        return 200, json.dumps(changed).encode()

    def _evict(self, namespace: str, name: str, request: Request) -> Answer:
        body = request.json() or {}
        meta = body.get("metadata") or {}
        if (body.get("apiVersion"), body.get("kind")) != ("policy/v1", "Eviction") or meta.get("name") != name:
            return status(400, "BadRequest", f"not a policy/v1 Eviction of {namespace}/{name}: {body}")
        key = f"{namespace}/{name}"
        if (namespace, name) not in self.pods:
            return status(404, "NotFound", f'pods "{name}" not found')
        if key in self.budget_refuses:
            return status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
        if key in self.eviction_errors:
            return self.eviction_errors[key]
        self.delete("pods", name, namespace)
        return 201, json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}).encode()


# --- Mesos --------------------------------------------------------------------------------------


def machine_key(obj: dict[str, Any]) -> tuple[str, str]:
    return str(obj.get("hostname", "")).lower(), str(obj.get("ip", ""))


def agent_key(agent: dict[str, Any]) -> tuple[str, str]:
    return str(agent.get("hostname", "")).lower(), str(agent.get("pid", "")).partition("@")[2].rpartition(":")[0]


class FakeMesosMaster(FakeServer):
    def __init__(self, slaves: dict[str, Any], frameworks: dict[str, Any]) -> None:
        super().__init__()
        self.agents: list[dict[str, Any]] = copy.deepcopy(slaves["slaves"])
        self.frameworks: list[dict[str, Any]] = copy.deepcopy(frameworks["frameworks"])
        self.windows: list[dict[str, Any]] = []
        self.modes: dict[tuple[str, str], str] = {}  # machines in maintenance: DRAINING or DOWN
        # path -> status: its GETs are refused (503: a master that lost its leadership, or has none)
        self.refusing: dict[str, int] = {}
        self.hanging: set[str] = set()  # paths whose GETs go unanswered until ``answer_again``
        self.unanswered: list[Request] = []
        # called with each request answered and its answer, before the client reads it (in the
        # server's thread): a test may change the state right after a given call
        self.after_answer: Callable[[Request, Answer], None] = lambda request, answer: None
        self._answering = threading.Event()
        self._answering.set()

    def hang(self, path: str) -> None:
        """From now on leave the GETs of ``path`` unanswered (a master stuck behind a live port)."""
        with self._lock:
            self.hanging.add(path)
            self._answering.clear()

    def answer_again(self) -> None:
        with self._lock:
            self.hanging.clear()
            self._answering.set()

    def add_task(
        self, agent_id: str, task_id: str, cpus: float, framework: str = "marathon", revocable_cpus: float = 0.0
    ) -> None:
        """A framework launches a task on the agent (maintenance is cooperative: a DRAINING agent
        still takes work from a framework that ignores its inverse offers); ``revocable_cpus``: a
        share of revocable CPUs beside its regular ones."""
        task = {
            "id": task_id,
            "name": task_id.split(".")[0],
            "framework_id": framework,
            "slave_id": agent_id,
            "state": "TASK_RUNNING",
            "resources": {"cpus": cpus, "mem": 100.0, "disk": 0.0, "gpus": 0.0},
        }
        if revocable_cpus:
            task["resources"]["cpus_revocable"] = revocable_cpus
        with self._lock:
            for fw in self.frameworks:
                if fw.get("name") == framework:
                    fw.setdefault("tasks", []).append(task)
                    return
            self.frameworks.append({"id": framework, "name": framework, "active": True, "tasks": [task]})

    def tasks_on(self, agent_id: str) -> list[str]:
        with self._lock:
            return [t["id"] for fw in self.frameworks for t in fw.get("tasks") or () if t.get("slave_id") == agent_id]

    def answer(self, request: Request) -> Answer:
        """As any fake, except that a GET of a hanging path is held (outside the state's lock) until
        the master answers again, or the server stops."""
        with self._lock:
            held = request.method == "GET" and request.path in self.hanging
            if held:
                self.requests.append(request)
                self.unanswered.append(request)
        if not held:
            answer = super().answer(request)
            self.after_answer(request, answer)
            return answer
        while not self._answering.wait(0.05) and not request.stopping.is_set():
            pass
        return 503, b"the master was silent; the client has given up"

    def finish_tasks(self, agent_id: str) -> None:
        """The frameworks moved their work off the agent."""
        with self._lock:
            for framework in self.frameworks:
                framework["tasks"] = [t for t in framework.get("tasks") or () if t.get("slave_id") != agent_id]

    def handle(self, request: Request) -> Answer:
        route = (request.method, request.path)
        if request.method == "GET" and request.path in self.refusing:
            return self.refusing[request.path], b"No leader elected"
        if route == ("GET", "/master/slaves"):
            return self._ok({"slaves": self.agents, "recovered_slaves": []})
        if route == ("GET", "/master/frameworks"):
            return self._ok({"frameworks": self.frameworks})
        if route == ("GET", "/master/maintenance/schedule"):
            return self._ok({"windows": self.windows} if self.windows else {})
        if route == ("GET", "/master/maintenance/status"):
            draining = [{"id": self._machine(k)} for k, mode in self.modes.items() if mode == "DRAINING"]
            down = [self._machine(k) for k, mode in self.modes.items() if mode == "DOWN"]
            return self._ok(
                {**({"draining_machines": draining} if draining else {}), **({"down_machines": down} if down else {})}
            )
        try:
            body = request.json()
        except ValueError as e:
            return 400, str(e).encode()
        if route == ("POST", "/master/maintenance/schedule"):
            return self._post_schedule(body)
        if route == ("POST", "/master/machine/down"):
            return self._transition(body, "DRAINING", "DOWN", "brought down")
        if route == ("POST", "/master/machine/up"):
            return self._transition(body, "DOWN", "UP", "brought up")
        return 404, b""

    def _ok(self, body: Any) -> Answer:
        return 200, json.dumps(body).encode()

    def _machine(self, key: tuple[str, str]) -> dict[str, str]:
        for window in self.windows:
            for obj in window["machine_ids"]:
                if machine_key(obj) == key:
                    return dict(obj)
        return {"hostname": key[0], "ip": key[1]}

    def _post_schedule(self, body: Any) -> Answer:
        if not isinstance(body, dict):
            return 400, b"Expecting a JSON object"
        windows = body.get("windows") or []
        seen: set[tuple[str, str]] = set()
        for window in windows:
            machines = window.get("machine_ids") or []
            if not machines:
                return 400, b"List of machines in the maintenance window is empty"
            start = (window.get("unavailability") or {}).get("start") or {}
            if not isinstance(start.get("nanoseconds"), int):
                return 400, b"Maintenance window does not specify an unavailability start"
            for obj in machines:
                if not obj.get("hostname") and not obj.get("ip"):
                    return 400, b"Both 'hostname' and 'ip' for a machine are empty"
                if machine_key(obj) in seen:
                    return 400, f"Machine '{json.dumps(obj)}' appears more than once in the schedule".encode()
                seen.add(machine_key(obj))
        for key, mode in self.modes.items():
            if mode == "DOWN" and key not in seen:
                return (
                    400,
                    f"Machine '{json.dumps(self._machine(key))}' is deactivated and must be in the schedule".encode(),
                )
        self.modes = {key: self.modes.get(key, "DRAINING") for key in seen}
        self.windows = copy.deepcopy(windows)
        return 200, b""

    def _transition(self, body: Any, source: str, target: str, verb: str) -> Answer:
        if not isinstance(body, list) or not body:
            return 400, b"List of machines is empty"
        keys = [machine_key(obj) for obj in body]
        if len(set(keys)) != len(keys):
            return 400, b"Machine appears more than once"
        for obj, key in zip(body, keys, strict=True):
            if key not in self.modes:
                return 400, f"Machine '{json.dumps(obj)}' is not part of a maintenance schedule".encode()
            if self.modes[key] != source:
                return 400, f"Machine '{json.dumps(obj)}' is not in {source} mode and cannot be {verb}".encode()
        for key in keys:
            if target == "DOWN":
                self.modes[key] = "DOWN"
                for agent in [a for a in self.agents if agent_key(a) == key]:
                    self.agents.remove(agent)  # shut down and removed: its tasks are lost
                    self.finish_tasks(agent["id"])
            else:
                del self.modes[key]
                for window in self.windows:
                    window["machine_ids"] = [m for m in window["machine_ids"] if machine_key(m) != key]
                self.windows = [w for w in self.windows if w["machine_ids"]]
        return 200, b""


F = TypeVar("F", bound=FakeServer)


@contextmanager
def serving(fake: F, tls: ssl.SSLContext | None = None) -> Iterator[F]:
    with serving_port(fake.answer, tls) as port:
        fake.url, fake.port = port.url, port
        yield fake
