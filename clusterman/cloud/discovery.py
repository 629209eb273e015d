"""Find a pool's resource groups from its ``resource_groups`` config entries.

Each entry is searched on its own: an entry whose search fails is an error (the pool may have
groups that were not seen, so the autoscaler holds scale-down), and never hides the groups the
other entries find. A group whose tag value is not valid JSON names no pool: it is reported as
*mistagged* and holds nothing, since in an account shared by many pools one hand-tagged group
must not stop every pool from scaling down. A group found by two entries is kept once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from clusterman.cloud.kinds import Clouds
from clusterman.cloud.kinds import Search
from clusterman.cloud.kinds import kind_row
from clusterman.cloud.resource_group import CloudGroup
from clusterman.cloud.resource_group import ResourceGroupError
from clusterman.core.config import ResourceGroupConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Discovery:
    groups: tuple[CloudGroup, ...]
    errors: tuple[ResourceGroupError, ...]  # searches that failed: some of the pool's groups may be missing
    mistagged: tuple[ResourceGroupError, ...] = ()  # groups with the tag key whose value names no pool


def discover_groups(
    cluster: str, pool: str, entries: Iterable[ResourceGroupConfig], clouds: Clouds, *, launches: bool = False
) -> Discovery:
    """Each entry searched by its kind's row (``cloud/kinds.py``), in the cloud that row names.
    ``launches``: the groups read what they launch now, for drift (cloud/launches.py)."""
    groups: dict[tuple[str, str], CloudGroup] = {}
    errors: list[ResourceGroupError] = []
    mistagged: list[ResourceGroupError] = []
    search = Search.start(cluster, pool, clouds, launches)
    for i, entry in enumerate(entries):
        label = f"resource_groups[{i}] ({entry.kind})"
        row = kind_row(entry.kind)
        cloud = getattr(clouds, row.cloud)
        try:
            if cloud is None:
                raise ResourceGroupError(label, f"{entry.kind} groups need {row.needs}")
            found = row.find(cloud, entry, search, label)
        except ResourceGroupError as e:
            errors.append(e if e.group == label else ResourceGroupError(label, str(e), e.ambiguous))
            continue
        errors += (ResourceGroupError(label, p) for p in found.problems)
        mistagged += (ResourceGroupError(label, p) for p in found.mistagged)
        for g in found.groups:
            groups.setdefault((g.kind, g.id), g)
    for error in (*errors, *mistagged):
        log.warning("%s", error)
    log.info("%s/%s: resource groups %s", cluster, pool, ", ".join(g.label for g in groups.values()) or "none")
    return Discovery(tuple(groups.values()), tuple(errors), tuple(mistagged))
