"""The pool's lease as a Kubernetes Lease (``coordination.k8s.io/v1``), for clusters without DynamoDB.

``state: {lease: kubernetes}`` keeps the lease and its hand-over request (``state/lease.py``) in
Lease objects of ``state.lease_namespace``, and everything else in the state backend (SQLite on a
PersistentVolume, ``components/kubernetes-lease``). A claim is a read, then a create or a replace
carrying the ``resourceVersion`` read: the API server refuses a write made on a stale read (409),
so two claimants never both win, which is what DynamoDB's conditional write gives the other
backend. The Lease's ``holderIdentity`` and ``leaseDurationSeconds`` are filled in for people and
tools (``kubectl get lease``); the item itself, with its expiry, is in annotations.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any
from typing import TypeVar

from clusterman.errors import Unworkable
from clusterman.state.store import NO_EXPIRY
from clusterman.state.store import StateError
from clusterman.state.store import StateItem
from clusterman.state.store import StateStore
from clusterman.state.store import UnusableStore
from clusterman.state.store import _claimable
from clusterman.state.store import _item

PAYLOAD = "clusterman.com/payload"
TIMESTAMP = "clusterman.com/timestamp"
EXPIRATION = "clusterman.com/expiration-timestamp"
T = TypeVar("T")


def lease_name(state: str, entity: str) -> str:
    """A DNS-1123 name per item: ``autoscaler-lease.prod.batch.kubernetes``; a hash keeps apart
    names that differ only in characters Kubernetes does not allow."""
    raw = f"{state.replace('_', '-')}.{entity}".lower()
    name = re.sub(r"[^a-z0-9.-]+", "-", raw).strip(".-")
    if name != f"{state}.{entity}".replace("_", "-") or len(name) > 200:
        name = f"{name[:200]}-{hashlib.sha256(f'{state}.{entity}'.encode()).hexdigest()[:10]}"
    return name


class KubernetesLeaseStore(StateStore):
    """Items in Lease objects; ``connect`` makes the ``kubernetes`` ApiClient (on first use)."""

    def __init__(self, connect: Callable[[], Any], namespace: str, timeout_seconds: float = 10.0) -> None:
        self._connect = connect
        self._client: Any = None
        self.namespace = namespace
        self.timeout_seconds = timeout_seconds

    def __repr__(self) -> str:
        return f"Kubernetes Leases in namespace {self.namespace}"

    def set_up(self) -> list[str]:
        self._call("reading", lambda api: api.list_namespaced_lease(self.namespace, limit=1))
        return []  # Lease objects are created by the first claim

    def get(self, state: str, entity: str) -> StateItem | None:
        lease = self._read(state, entity)
        return None if lease is None else self._item(state, entity, lease)

    def put(self, item: StateItem) -> None:
        lease = self._read(item.state, item.entity)
        self._write(item, str(item.payload.get("holder", "")), lease)

    def delete(self, state: str, entity: str) -> None:
        self._delete(state, entity, None)

    def claim(self, item: StateItem, owner: str, now: float | None, stale: StateItem | None = None) -> StateItem | None:
        for _ in range(3):  # a refused write was raced: read what won and judge it again
            lease = self._read(item.state, item.entity)
            if lease is not None:
                existing = self._item(item.state, item.entity, lease)
                if not _claimable(existing, owner, now, stale):
                    return existing
            if self._write(item, owner, lease):
                return None
        raise StateError(f"{self!r}: the lease {lease_name(item.state, item.entity)} keeps changing under us")

    def release(self, state: str, entity: str, owner: str) -> None:
        lease = self._read(state, entity)
        if lease is not None and (lease.get("spec") or {}).get("holderIdentity") == owner:
            self._delete(state, entity, lease["metadata"]["resourceVersion"])

    # -- the API ----------------------------------------------------------------------------------

    def _read(self, state: str, entity: str) -> dict[str, Any] | None:
        name = lease_name(state, entity)
        found: dict[str, Any] | None = self._call(
            f"reading {name}", lambda api: api.read_namespaced_lease(name, self.namespace), missing=None
        )
        return found

    def _write(self, item: StateItem, owner: str, lease: dict[str, Any] | None) -> bool:
        """Create, or replace the version read; False when another writer came first (409)."""
        name = lease_name(item.state, item.entity)
        ttl = max(1, item.expiration_timestamp - item.timestamp) if item.expiration_timestamp != NO_EXPIRY else None
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/name": "clusterman"},
                "annotations": {
                    PAYLOAD: json.dumps(item.payload),
                    TIMESTAMP: str(item.timestamp),
                    EXPIRATION: str(item.expiration_timestamp),
                },
            },
            "spec": {"holderIdentity": owner, "leaseDurationSeconds": ttl},
        }
        if lease is None:
            call = lambda api: api.create_namespaced_lease(self.namespace, body)  # noqa: E731
        else:
            body["metadata"]["resourceVersion"] = lease["metadata"]["resourceVersion"]
            call = lambda api: api.replace_namespaced_lease(name, self.namespace, body)  # noqa: E731
        return bool(self._call(f"writing {name}", call, conflict=False, result=True, creating=lease is None))

    def _delete(self, state: str, entity: str, resource_version: str | None) -> None:
        name = lease_name(state, entity)
        options = {"preconditions": {"resourceVersion": resource_version}} if resource_version else {}
        self._call(f"deleting {name}", lambda api: api.delete_namespaced_lease(name, self.namespace, body=options),
                   missing=None, conflict=None)  # fmt: skip

    _UNSET: Any = object()

    def _call(
        self,
        what: str,
        call: Callable[[Any], Any],
        missing: Any = _UNSET,
        conflict: Any = _UNSET,
        result: Any = _UNSET,
        creating: bool = False,
    ) -> Any:
        """One API call, its JSON answer (or ``result``); ``missing``/``conflict``: the answer to a
        404/409 instead of a StateError. Every other failure is a StateError naming the Lease: an
        ``UnusableStore`` when no retry mends it (no usable kubeconfig, no access to Leases, a
        namespace that does not exist, which a create is told with a 404)."""
        import urllib3
        from kubernetes.client import CoordinationV1Api
        from kubernetes.client.exceptions import ApiException

        from clusterman.cluster.connector import ConnectorError
        from clusterman.cluster.kubernetes import api_error
        from clusterman.cluster.kubernetes import request_timeout

        try:
            if self._client is None:
                self._client = self._connect()
            api = CoordinationV1Api(self._client)
            response = call(_Raw(api, request_timeout(self.timeout_seconds)))
        except ApiException as e:
            if e.status == 404 and missing is not self._UNSET:
                return missing
            if e.status == 409 and conflict is not self._UNSET:
                return conflict
            if e.status in (401, 403) or (e.status == 404 and creating):
                raise UnusableStore(f"{self!r}: {what}: {api_error(e)} (check state.lease_namespace and RBAC)") from e
            raise StateError(f"{self!r}: {what}: {api_error(e)}") from e
        except (urllib3.exceptions.HTTPError, ConnectorError, OSError) as e:
            if isinstance(e, Unworkable):
                raise UnusableStore(f"{self!r}: {what}: {e}") from e
            raise StateError(f"{self!r}: {what}: {e}") from e
        if result is not self._UNSET:
            return result
        return json.loads(response.data)

    def _item(self, state: str, entity: str, lease: dict[str, Any]) -> StateItem:
        notes = (lease.get("metadata") or {}).get("annotations") or {}
        return _item(
            f"{self!r}: lease {lease_name(state, entity)}",
            state,
            entity,
            notes.get(TIMESTAMP),
            notes.get(EXPIRATION, str(NO_EXPIRY)),
            notes.get(PAYLOAD),
        )


class _Raw:
    """The API with raw answers (no model objects) and the call's timeout on every method."""

    def __init__(self, api: Any, timeout: tuple[float, float]) -> None:
        self.api = api
        self.timeout = timeout

    def __getattr__(self, method: str) -> Callable[..., Any]:
        bound = getattr(self.api, method)
        return lambda *args, **kwargs: bound(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs)
