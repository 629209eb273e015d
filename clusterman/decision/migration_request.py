"""One ``NodeMigration`` resource as the pool reads it: Clusterman's spec, checked, or why it is refused.

The resource (``clusterman.yelp.com/v1``, cluster scope, ``deploy/kubernetes/shared/
nodemigration-crd.yaml``)::

    metadata: {name, creationTimestamp, labels: {clusterman.yelp.com/migration_status: pending}}
    spec: {cluster, pool, label_selectors: [...], condition: {trait, operator, target}}

Its progress is the status label, with Clusterman's values; the pool's autoscaler also writes the
details (nodes done and left, the step, the reason of an end) in the resource's ``status``.
Reading is pure: the adapter (``cluster/node_migrations.py``) hands the object over as JSON.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from typing import Any

from clusterman.core import label_selectors
from clusterman.core.label_selectors import LabelSelector
from clusterman.core.model import NO_TIME
from clusterman.core.timestamps import parse_time
from clusterman.decision.migration_condition import Condition

GROUP = "clusterman.yelp.com"
VERSION = "v1"
PLURAL = "nodemigrations"
KIND = "NodeMigration"
STATUS_LABEL = "clusterman.yelp.com/migration_status"
ATTEMPTS_LABEL = "clusterman.yelp.com/attempts"


class Status(enum.Enum):
    """The status label's values, Clusterman's."""

    PENDING = "pending"  # created, not started
    INPROGRESS = "inprogress"
    COMPLETED = "completed"
    FAILED = "failed"  # ended without finishing; the resource's status.reason says why
    SKIPPED = "skipped"  # not run (a pool that takes no events), or stopped
    STOP = "stop"  # asked to stop (``clusterman migrate-stop``): ends as skipped

    @property
    def open(self) -> bool:
        """Still to be run or running: what ``migrate-stop`` stops."""
        return self in (Status.PENDING, Status.INPROGRESS)


@dataclass(frozen=True)
class MigrationRequest:
    """A resource of this cluster, read. ``refused`` says why it cannot run ("" when it can); a
    refused resource still names its pool, when it does, so the pool can mark it failed."""

    name: str
    cluster: str
    pool: str
    status: Status | None  # None: a label value that is none of Clusterman's
    created: float  # Unix seconds; NO_TIME when the resource does not say
    condition: Condition | None = None
    selectors: tuple[LabelSelector, ...] = ()
    attempts: int = 0
    refused: str = ""
    reported: Mapping[str, Any] = field(default_factory=dict)  # its ``status`` as last written

    def shows(self, status: Status, fields: Mapping[str, Any]) -> bool:
        """Whether the resource already says this (its label, and these fields of its status)."""
        return self.status is status and all(self.reported.get(k) == v for k, v in fields.items())

    def spec_line(self) -> str:
        """``kernel ge 5.15`` (and its selectors), for lines and events."""
        selected = f" on nodes {', '.join(map(str, self.selectors))}" if self.selectors else ""
        return f"{self.condition}{selected}" if self.condition else "(refused)"


def read(obj: Mapping[str, Any]) -> MigrationRequest:
    """A resource read; never raises for what the resource holds (that is ``refused``)."""
    meta = _mapping(obj.get("metadata"))
    name = str(meta.get("name") or "")
    labels = _mapping(meta.get("labels"))
    raw_status = labels.get(STATUS_LABEL)
    try:
        status: Status | None = Status(raw_status) if raw_status is not None else Status.PENDING
    except ValueError:
        status = None
    attempts_text = str(labels.get(ATTEMPTS_LABEL, "0"))
    attempts = int(attempts_text) if re.fullmatch(r"\d{1,6}", attempts_text) else 0
    try:
        created = parse_time(meta["creationTimestamp"]) if meta.get("creationTimestamp") else NO_TIME
    except ValueError:
        created = NO_TIME
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return MigrationRequest(name, "", "", status, created, attempts=attempts, refused="spec: missing")
    cluster, pool = spec.get("cluster"), spec.get("pool")
    base = MigrationRequest(
        name,
        cluster if isinstance(cluster, str) else "",
        pool if isinstance(pool, str) else "",
        status,
        created,
        attempts=attempts,
        reported=_mapping(obj.get("status")),
    )
    try:
        condition, selectors = _spec(spec, cluster, pool)
    except ValueError as e:
        return replace(base, refused=str(e))
    request = replace(base, condition=condition, selectors=selectors)
    if status is None:
        known = ", ".join(s.value for s in Status)
        return replace(request, refused=f"label {STATUS_LABEL}: {raw_status!r} is none of {known}")
    return request


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _spec(spec: Mapping[str, Any], cluster: Any, pool: Any) -> tuple[Condition, tuple[LabelSelector, ...]]:
    for key, value in (("cluster", cluster), ("pool", pool)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"spec.{key}: expected a name, got {value!r}")
    condition = spec.get("condition")
    if not isinstance(condition, Mapping):
        raise ValueError(f"spec.condition: expected {{trait, operator, target}}, got {condition!r}")
    missing = [k for k in ("trait", "operator", "target") if k not in condition]
    if missing:
        raise ValueError(f"spec.condition: missing {', '.join(missing)}")
    try:
        parsed = Condition.parse(condition["trait"], condition["operator"], condition["target"])
    except ValueError as e:
        raise ValueError(f"spec.condition: {e}") from None
    raw = spec.get("label_selectors") or []
    if not isinstance(raw, list) or not all(isinstance(s, str) for s in raw):
        raise ValueError(f"spec.label_selectors: expected a list of selectors, got {raw!r}")
    try:
        selectors = tuple(label_selectors.parse(s) for s in raw if s.strip())
    except ValueError as e:
        raise ValueError(f"spec.label_selectors: {e}") from None
    return parsed, selectors


def resource_name(cluster: str, pool: str, now: float) -> str:
    """Clusterman's name for a new resource, ``<cluster>-<pool>-<unix seconds>`` (its ``_`` as ``--``),
    made a valid Kubernetes name (lower case; other characters as ``-``)."""
    raw = f"{cluster}-{pool}-{int(now)}".replace("_", "--").lower()
    return re.sub(r"[^a-z0-9.-]", "-", raw).strip("-.")[:253]


def body(
    name: str, cluster: str, pool: str, condition: Condition, selectors: tuple[str, ...], pool_label_key: str
) -> dict[str, Any]:
    """A new resource, pending, labelled as Clusterman labels it (status, attempts 0, the pool)."""
    labels = {STATUS_LABEL: Status.PENDING.value, ATTEMPTS_LABEL: "0", pool_label_key: pool}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "cluster": cluster,
            "pool": pool,
            "label_selectors": list(selectors),
            "condition": {
                "trait": condition.trait.value,
                "operator": condition.operator.value,
                "target": condition.target,
            },
        },
    }
