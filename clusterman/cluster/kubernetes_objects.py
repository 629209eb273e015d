"""The fields of Kubernetes nodes and pods that clusterman reads, as typed structs.

A pod is about 9 KB of JSON, of which clusterman reads some twenty fields. ``msgspec`` decodes a
list page or a watch event straight into these structs and skips every other field. That is 8-15x
faster than ``json.loads`` of the same page and leaves next to nothing for the garbage collector
(``bench/kubernetes_cache.py``). Attribute names are the API's, in snake case.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from typing import TypeVar

import msgspec
from msgspec import UNSET
from msgspec import UnsetType

Quantity = str | int | float


class Fields(msgspec.Struct, rename="camel", gc=False):
    """Base of the structs below. API names are camelCase, and unknown fields are skipped.
    The structs hold no cycles, so the garbage collector need not track them (``gc=False``)."""


class Frozen(msgspec.Struct, rename="camel", gc=False, frozen=True):
    """``Fields``, frozen so they can be hashed: a pod's containers key the cache of its request."""


class ResourceList(Frozen, frozen=True):
    """The resources clusterman counts; the others (``pods``, hugepages) are skipped."""

    cpu: Quantity | UnsetType = UNSET
    memory: Quantity | UnsetType = UNSET
    ephemeral_storage: Quantity | UnsetType = msgspec.field(default=UNSET, name="ephemeral-storage")
    nvidia_gpu: Quantity | UnsetType = msgspec.field(default=UNSET, name="nvidia.com/gpu")
    amd_gpu: Quantity | UnsetType = msgspec.field(default=UNSET, name="amd.com/gpu")

    def items(self) -> list[tuple[str, Quantity]]:
        """The resources given, by their API names, as a dict's ``items()``."""
        given = zip(self.__struct_encode_fields__, msgspec.structs.astuple(self), strict=True)
        return [(name, v) for name, v in given if not isinstance(v, UnsetType)]


class OwnerReference(Fields):
    kind: str = ""
    controller: bool | None = None  # this owner makes a new pod when the pod goes


class ObjectMeta(Fields):
    name: str = ""
    namespace: str = ""
    resource_version: str = ""
    creation_timestamp: Any = None
    labels: dict[str, Any] | None = None
    annotations: dict[str, Any] | None = None
    owner_references: list[OwnerReference] | None = None


class ResourceRequirements(Frozen, frozen=True):
    requests: ResourceList | None = None
    limits: ResourceList | None = None


class Container(Frozen, frozen=True):
    resources: ResourceRequirements | None = None
    restart_policy: str | None = None


class SelectorRequirement(Fields):
    key: str = ""
    operator: str = ""
    values: list[str] | None = None


class SelectorTerm(Fields):
    match_expressions: list[SelectorRequirement] | None = None


class NodeSelector(Fields):
    node_selector_terms: list[SelectorTerm] | None = None


class NodeAffinity(Fields):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None


class Affinity(Fields):
    node_affinity: NodeAffinity | None = None


class EmptyDir(Fields):
    medium: str | None = None


class Volume(Fields):
    """Only whether the pod keeps data on its node: an emptyDir not in memory, or a hostPath."""

    empty_dir: EmptyDir | None = None
    host_path: dict[str, Any] | None = None


class PodSpec(Fields):
    node_name: str | None = None
    volumes: list[Volume] | None = None
    containers: list[Container] | None = None
    init_containers: list[Container] | None = None
    overhead: ResourceList | None = None
    node_selector: dict[str, Any] | None = None
    affinity: Affinity | None = None


class Condition(Fields):
    type: str = ""
    status: str = ""
    reason: str | None = None


class PodStatus(Fields):
    phase: str | None = None
    conditions: list[Condition] | None = None


class Pod(Fields):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)


class Taint(Fields):
    key: str = ""
    value: Any = None
    time_added: Any = None


class NodeSpec(Fields):
    taints: list[Taint] | None = None
    unschedulable: bool | None = None
    provider_id: str | None = msgspec.field(default=None, name="providerID")


class NodeAddress(Fields):
    type: str = ""
    address: str = ""


class NodeSystemInfo(Fields):
    kernel_version: str = ""
    os_image: str = ""


class NodeStatus(Fields):
    allocatable: ResourceList | None = None
    conditions: list[Condition] | None = None
    addresses: list[NodeAddress] | None = None
    node_info: NodeSystemInfo | None = None


class Node(Fields):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


class ListMeta(Fields):
    resource_version: str = ""
    continue_: str | None = msgspec.field(default=None, name="continue")


class Status(Fields):
    """What the API server sends instead of an object when a request or a watch fails."""

    code: int = 0
    reason: str = ""
    message: str = ""


class WatchEvent(Fields):
    type: str = ""
    object: msgspec.Raw = msgspec.Raw(b"{}")


class CustomObject(Fields):
    """A custom resource (a NodeMigration): its metadata read as any object's, the rest as JSON."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: Any = None
    status: Any = None


class PodEvent(Fields):
    """A watch event decoded in one pass (an ERROR's Status reads as an empty pod: decoded again)."""

    type: str = ""
    object: Pod = msgspec.field(default_factory=Pod)


class NodeEvent(Fields):
    type: str = ""
    object: Node = msgspec.field(default_factory=Node)


class CustomObjectEvent(Fields):
    type: str = ""
    object: CustomObject = msgspec.field(default_factory=CustomObject)


T = TypeVar("T", Pod, Node)


class PodList(Fields):
    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[Pod] | None = None


class NodeList(Fields):
    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[Node] | None = None


class CustomObjectList(Fields):
    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[CustomObject] | None = None


KINDS = (Pod, Node, CustomObject, PodList, NodeList, CustomObjectList, Status)
DECODERS: dict[type, msgspec.json.Decoder[Any]] = {
    t: msgspec.json.Decoder(t) for t in (*KINDS, WatchEvent, PodEvent, NodeEvent, CustomObjectEvent)
}
LIST_OF: dict[type, type] = {Pod: PodList, Node: NodeList, CustomObject: CustomObjectList}
EVENT_OF: dict[type, type] = {Pod: PodEvent, Node: NodeEvent, CustomObject: CustomObjectEvent}

DecodeError = (msgspec.DecodeError, msgspec.ValidationError)


def decode(kind: type[Any], data: bytes | msgspec.Raw) -> Any:
    """``data`` as a ``kind``; raises msgspec.DecodeError (not JSON) or ValidationError (wrong shape)."""
    return DECODERS[kind].decode(data)


def convert(obj: Mapping[str, Any] | T, kind: type[T]) -> T:
    """An API object, a struct already or a dict, as its struct."""
    if isinstance(obj, kind):
        return obj
    return msgspec.convert(obj, kind, strict=False)
