"""Drift: a node whose instance was launched from another launch template version, or another
machine image, than its group launches now (docs/node_lifecycle.md, "Drift"): Karpenter's drift,
for Auto Scaling groups and Spot Fleets. A node migration with ``trigger.drift`` replaces them.

Both sides are read by the cloud adapters (``cloud/launches.py``); "" on either side is "not
known" and never drift, so a group whose launch cannot be read (or a node whose instance carries
no template tags) is left alone rather than replaced on a guess.
"""

from __future__ import annotations

from clusterman.core.model import NodeState
from clusterman.core.model import PoolSnapshot


def drifted(snapshot: PoolSnapshot) -> dict[str, str]:
    """Per joined node of the pool's groups that drifted, why: ``launched from lt-1:3, its group
    launches lt-1:4`` (the template first: a new version may keep the image)."""
    groups = {g.id: g for g in snapshot.groups if not g.stale and (g.template or g.image_id)}
    if not groups:
        return {}
    found: dict[str, str] = {}
    for node in snapshot.nodes:
        group = groups.get(node.group_id)
        if group is None or node.state not in (NodeState.READY, NodeState.TAINTED, NodeState.CORDONED):
            continue
        if group.template and node.template and node.template != group.template:
            found[node.id] = f"launched from {node.template}, its group launches {group.template}"
        elif group.image_id and node.image_id and node.image_id != group.image_id:
            found[node.id] = f"runs image {node.image_id}, its group launches {group.image_id}"
    return found
