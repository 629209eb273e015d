"""The cluster's ``NodeMigration`` resources, through the kubernetes client: read, created, marked.

The autoscaler keeps them current by watching (a reflector, as the pool cache watches nodes:
``reflector.py``) and reads the cache each run; a command lists them once. Resources are
cluster-scoped and few, so every one is kept and each pool picks its own by ``spec.cluster`` and
``spec.pool`` (a label selector would hide a resource whose labels were written by hand).

Writes: the status label (a merge patch of ``metadata.labels``, as Clusterman writes it) and the
``status`` subresource (progress, the reason of an end). Every API failure is a ``ConnectorError``
naming the resource and the server's answer. Constructors do no I/O.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from clusterman.cluster import kubernetes_objects as objects
from clusterman.cluster.connector import ConnectorError
from clusterman.cluster.kubernetes import api_client
from clusterman.cluster.kubernetes import api_error
from clusterman.cluster.kubernetes import request_timeout
from clusterman.cluster.reflector import DELETED
from clusterman.cluster.reflector import Reflector
from clusterman.decision import migration_request
from clusterman.decision.migration_request import GROUP
from clusterman.decision.migration_request import PLURAL
from clusterman.decision.migration_request import VERSION
from clusterman.decision.migration_request import MigrationRequest
from clusterman.decision.migration_request import Status


def as_json(obj: objects.CustomObject) -> dict[str, Any]:
    """The parts of a resource ``migration_request.read`` looks at, as JSON."""
    meta = obj.metadata
    return {
        "metadata": {"name": meta.name, "labels": meta.labels or {}, "creationTimestamp": meta.creation_timestamp},
        "spec": obj.spec,
        "status": obj.status,
    }


class NameTaken(ConnectorError):
    """A resource of that name exists already."""


class _Store:
    """The reflector's store: every resource by name."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: dict[str, objects.CustomObject] = {}

    def replace(self, items: Any) -> None:
        fresh = {o.metadata.name: o for o in items}
        with self.lock:
            self.items = fresh

    def update(self, kind: str, obj: objects.CustomObject) -> None:
        with self.lock:
            if kind == DELETED:
                self.items.pop(obj.metadata.name, None)
            else:
                self.items[obj.metadata.name] = obj


class NodeMigrations:
    """One cluster's NodeMigration resources. ``watch``: kept current on a thread (the autoscaler);
    False lists them afresh at each ``requests`` (a command)."""

    def __init__(
        self,
        kubeconfig_path: str | None,
        *,
        timeout_seconds: float = 30.0,
        watch: bool = True,
        watch_seconds: int | None = None,
    ) -> None:
        self.kubeconfig_path = kubeconfig_path
        self.timeout_seconds = timeout_seconds
        self.watch = watch
        self.watch_seconds = watch_seconds
        self._client: Any = None
        self._api: Any = None
        self._store = _Store()
        self._reflector: Reflector[objects.CustomObject] | None = None

    def _custom(self) -> Any:
        if self._api is None:
            import kubernetes.client

            self._client = api_client(self.kubeconfig_path)
            self._api = kubernetes.client.CustomObjectsApi(self._client)
        return self._api

    def _fail(self, doing: str, e: Exception) -> ConnectorError:
        from kubernetes.client.exceptions import ApiException

        host = self._client.configuration.host if self._client is not None else "?"
        problem = api_error(e) if isinstance(e, ApiException) else f"cannot reach it: {e}"
        return ConnectorError(f"kubernetes API {host}: {doing}: {problem}")

    # --- reading ------------------------------------------------------------------------------------

    def requests(self) -> tuple[MigrationRequest, ...]:
        """Every resource of the cluster, read (a refused one says why), in name order.
        ConnectorError when they cannot be listed."""
        reflector = self._reflect()
        if not reflector.freshness().synced or not self.watch:
            try:
                reflector.sync()
            except ConnectorError as e:  # naming the server and its answer
                if " 404 " not in f" {e} ":
                    raise
                raise ConnectorError(f"{e} (is the NodeMigration CRD installed? deploy/kubernetes/shared)") from e
            if self.watch:
                reflector.start()
        with self._store.lock:
            items = sorted(self._store.items.items())
        return tuple(migration_request.read(as_json(obj)) for _, obj in items)

    def _reflect(self) -> Reflector[objects.CustomObject]:
        if self._reflector is None:
            from clusterman.cluster.kubernetes_cache import KubernetesSource

            api = self._custom()
            call = functools.partial(api.list_cluster_custom_object, GROUP, VERSION, PLURAL)
            source = KubernetesSource(
                call,
                objects.CustomObject,
                PLURAL,
                self._client.configuration.host,
                page_size=100,
                timeout_seconds=self.timeout_seconds,
                watch_seconds=self.watch_seconds,
                selectors={},
            )
            self._reflector = Reflector(PLURAL, source, self._store)
        return self._reflector

    def nodes_selected(self, pool_selector: str, selectors: tuple[str, ...]) -> frozenset[str]:
        """The names of the pool's nodes that every one of ``selectors`` selects, as the API server
        selects them (a NodeMigration's ``label_selectors``). ConnectorError when it cannot say."""
        import kubernetes.client

        self._custom()
        api = kubernetes.client.CoreV1Api(self._client)
        names: set[str] = set()
        token: str | None = None
        query = ",".join((pool_selector, *selectors))
        try:
            while True:
                page = api.list_node(
                    label_selector=query,
                    limit=500,
                    _continue=token,
                    _request_timeout=request_timeout(self.timeout_seconds),
                )
                names.update(n.metadata.name for n in page.items or ())
                token = page.metadata._continue
                if not token:
                    return frozenset(names)
        except Exception as e:
            raise self._fail(f"listing the nodes {query}", e) from e

    # --- writing ------------------------------------------------------------------------------------

    def create(self, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        api = self._custom()  # ConnectorError: no usable kubeconfig
        try:
            api.create_cluster_custom_object(
                GROUP, VERSION, PLURAL, body, _request_timeout=request_timeout(self.timeout_seconds)
            )
        except Exception as e:
            failure = self._fail(f"creating {PLURAL}/{name}", e)
            if getattr(e, "status", None) == 409:
                raise NameTaken(str(failure)) from e
            raise failure from e

    def mark(self, name: str, status: Status, attempts: int | None = None) -> None:
        """Set the status label (and the attempts label), as Clusterman does."""
        labels = {migration_request.STATUS_LABEL: status.value}
        if attempts is not None:
            labels[migration_request.ATTEMPTS_LABEL] = str(attempts)
        self._patch(name, {"metadata": {"labels": labels}}, status=False)

    def report(self, name: str, fields: dict[str, Any]) -> None:
        """Merge ``fields`` into the resource's ``status``."""
        self._patch(name, {"status": fields}, status=True)

    def _patch(self, name: str, body: dict[str, Any], *, status: bool) -> None:
        api = self._custom()
        call = api.patch_cluster_custom_object_status if status else api.patch_cluster_custom_object
        try:
            call(GROUP, VERSION, PLURAL, name, body, _request_timeout=request_timeout(self.timeout_seconds))
        except Exception as e:
            raise self._fail(f"patching {PLURAL}/{name}{'/status' if status else ''}", e) from e

    def close(self) -> None:
        if self._reflector is not None:
            self._reflector.stop()
            self._reflector = None
        if self._client is not None:
            self._client.close()
        self._client = self._api = None
