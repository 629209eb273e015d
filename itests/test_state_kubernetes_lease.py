"""The pool's lease in Kubernetes Leases (``state: {lease: kubernetes}``), through the real
``kubernetes`` client against a fake of the Lease API on loopback that applies the API server's
rules for a write: a create of a name that exists and a replace or delete carrying a stale
``resourceVersion`` are refused with 409. Everything but the lease stays in SQLite."""

from __future__ import annotations

import copy
import json
import re
import sqlite3
from pathlib import Path

import pytest

from clusterman.core.config import LeaseBackend
from clusterman.core.config import MainConfig
from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.core.config import StateConfig
from clusterman.state.kubernetes_lease import lease_name
from clusterman.state.lease import ON_NOW
from clusterman.state.lease import Holder
from clusterman.state.lease import PoolLease
from clusterman.state.lease import take_on_request
from clusterman.state.pause import pause
from clusterman.state.pause import pause_status
from clusterman.state.store import StateError
from clusterman.wiring.state_store import open_state_store
from itests.recorded_api import Request
from itests.recorded_api import kubeconfig
from itests.stateful_api import Answer
from itests.stateful_api import FakeServer
from itests.stateful_api import serving
from itests.stateful_api import status

POOL = PoolIdentity("prod", "batch", Scheduler.KUBERNETES)
LEASES = re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases(?:/([^/]+))?$")


class FakeLeases(FakeServer):
    def __init__(self) -> None:
        super().__init__()
        self.leases: dict[tuple[str, str], dict] = {}
        self.version = 100
        self.cut_in: dict | None = None  # written by "another claimant" right before our next replace

    def handle(self, request: Request) -> Answer:
        if request.headers.get("authorization", "").lower() != "bearer recorded-token":
            return status(401, "Unauthorized", "no bearer token")
        found = LEASES.match(request.path)
        if found is None:
            return status(404, "NotFound", f"{request.path}: not served by this fake")
        namespace, name = found[1], found[2]
        key = (namespace, name or "")
        body = json.loads(request.body) if request.body else {}
        if request.method == "GET" and name is None:
            items = [v for (ns, _), v in self.leases.items() if ns == namespace]
            return 200, json.dumps({"kind": "LeaseList", "items": items}).encode()
        if request.method == "POST" and name is None:
            key = (namespace, body["metadata"]["name"])
            if key in self.leases:
                return status(409, "AlreadyExists", f'leases.coordination.k8s.io "{key[1]}" already exists')
            return 201, self._store(key, body)
        if key not in self.leases:
            return status(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
        if request.method == "GET":
            return 200, json.dumps(self.leases[key]).encode()
        if request.method == "PUT":
            if self.cut_in is not None:
                self._store(key, self.cut_in)
                self.cut_in = None
            if body["metadata"].get("resourceVersion") != self.leases[key]["metadata"]["resourceVersion"]:
                return status(
                    409, "Conflict", "the object has been modified; please apply your changes to the latest version"
                )
            return 200, self._store(key, body)
        if request.method == "DELETE":
            wanted = (body.get("preconditions") or {}).get("resourceVersion")
            if wanted and wanted != self.leases[key]["metadata"]["resourceVersion"]:
                return status(409, "Conflict", "Precondition failed: ResourceVersion")
            del self.leases[key]
            return 200, b'{"kind": "Status", "status": "Success"}'
        return status(405, "MethodNotAllowed", request.method)

    def _store(self, key: tuple[str, str], body: dict) -> bytes:
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.leases[key] = stored
        return json.dumps(stored).encode()


@pytest.fixture
def api():
    with serving(FakeLeases()) as server:
        yield server


@pytest.fixture
def store(api, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path / "kubeconfig", api.url))
    main = MainConfig(state_directory=str(tmp_path), state=StateConfig(lease=LeaseBackend.KUBERNETES))
    return open_state_store(main, timeout_seconds=6.0)


def test_one_claimant_wins_expiry_hands_over_and_a_release_removes_only_one_s_own(api, store, tmp_path):
    a = PoolLease(store, POOL, Holder("host-a", 1, 1000.0), ttl_seconds=30, monotonic=ON_NOW)
    b = PoolLease(store, POOL, Holder("host-b", 2, 1000.0), ttl_seconds=30, monotonic=ON_NOW)
    assert a.claim(1000).held
    blocked = b.claim(1001)  # b takes it once it has seen it unchanged for its TTL, on b's clock
    assert not blocked.held and blocked.holder == a.holder.id and blocked.expires_at == 1031
    assert a.claim(1010).held  # renewed: a replace of the version read
    assert not b.claim(1035).held  # the renewal, seen now
    b.release()  # not b's: nothing removed
    assert not b.claim(1064).held
    assert b.claim(1065).held  # a's renewal unchanged for 30 s
    lease = api.leases[("clusterman", lease_name("autoscaler_lease", "prod.batch.kubernetes"))]
    assert lease["spec"]["holderIdentity"] == b.holder.id and lease["spec"]["leaseDurationSeconds"] == 30
    b.release()
    assert api.leases == {}
    # Only the lease went to Kubernetes: a pause is in the SQLite file beside it.
    pause(store, POOL, 1000, reason="upgrade")
    assert pause_status(store, POOL, 1001).reason == "upgrade"
    rows = sqlite3.connect(tmp_path / "state.sqlite").execute("SELECT state FROM state").fetchall()
    assert rows == [("autoscaler_paused",)]


def test_a_claim_raced_by_another_writer_does_not_win_too(api, store):
    a = PoolLease(store, POOL, Holder("host-a", 1, 1000.0), ttl_seconds=30)
    assert a.claim(1000).held
    b = PoolLease(store, POOL, Holder("host-b", 2, 1000.0), ttl_seconds=30, monotonic=ON_NOW)
    assert not b.claim(1001).held  # seen, and unchanged when b claims it next: stale
    # b reads a's stale lease; host-c takes it between b's read and b's write.
    name = lease_name("autoscaler_lease", "prod.batch.kubernetes")
    taken = copy.deepcopy(api.leases[("clusterman", name)])
    payload = {"holder": "host-c:3:1000.000", "expires_at": 1080.0, "since": 1050.0}
    taken["metadata"]["annotations"]["clusterman.com/payload"] = json.dumps(payload)
    taken["spec"]["holderIdentity"] = payload["holder"]
    api.cut_in = taken
    answer = b.claim(1050)
    assert not answer.held and answer.holder == "host-c:3:1000.000" and answer.expires_at == 1080.0
    conflicts = [r for r in api.requests if r.method == "PUT"]
    assert len(conflicts) == 1  # refused (409); the claim read again and found host-c's live lease


def test_a_manual_command_gets_the_lease_handed_over_through_kubernetes(api, store):
    autoscaler = PoolLease(store, POOL, Holder("pod", 1, 1000.0), ttl_seconds=30, monotonic=ON_NOW)
    assert autoscaler.claim(1000).held
    manage = PoolLease(
        store, POOL, Holder("laptop", 2, 1000.0), ttl_seconds=30, purpose="clusterman manage by ann", monotonic=ON_NOW
    )
    clock = iter(range(1001, 1100))
    now = [1001.0]

    def tick():
        now[0] = float(next(clock))
        return now[0]

    def sleep(_):
        autoscaler.claim(now[0], hand_over=True)  # the autoscaler between runs sees the request

    status_ = take_on_request(manage, wait_seconds=10, clock=tick, sleep=sleep)
    assert status_.held
    assert not autoscaler.claim(now[0], hand_over=True).held


def test_an_unreachable_api_is_a_state_error_naming_the_lease(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9"))
    main = MainConfig(state_directory=str(tmp_path), state=StateConfig(lease=LeaseBackend.KUBERNETES))
    store = open_state_store(main, timeout_seconds=1.5)
    with pytest.raises(StateError, match=r"Kubernetes Leases in namespace clusterman: reading autoscaler-lease\."):
        PoolLease(store, POOL, Holder("host-a", 1, 1000.0), ttl_seconds=30).claim(1000)


def test_an_unreadable_kubeconfig_or_refused_credentials_make_the_store_unusable_a_stopped_api_not(
    api, tmp_path, monkeypatch
):
    """What no retry mends is the configuration's fault (the bootstrap rolls such a configuration
    back): a kubeconfig that cannot be read, credentials the API server refuses; an API server
    that is down (restarting) is an outage."""
    from clusterman.state.store import UnusableStore

    main = MainConfig(state_directory=str(tmp_path), state=StateConfig(lease=LeaseBackend.KUBERNETES))

    def claim(config: str) -> None:
        monkeypatch.setenv("KUBECONFIG", config)
        PoolLease(open_state_store(main, 1.5), POOL, Holder("host-a", 1, 1000.0), ttl_seconds=30).claim(1000)

    (tmp_path / "a-directory").mkdir()
    with pytest.raises(UnusableStore, match=r"kubeconfig .*a-directory"):
        claim(str(tmp_path / "a-directory"))
    wrong = kubeconfig(tmp_path / "wrong-token", api.url)
    Path(wrong).write_text(Path(wrong).read_text().replace("recorded-token", "another-token"))
    with pytest.raises(UnusableStore, match="401"):
        claim(wrong)
    with pytest.raises(StateError) as raised:
        claim(kubeconfig(tmp_path / "stopped", "http://127.0.0.1:9"))
    assert not isinstance(raised.value, UnusableStore), raised.value
