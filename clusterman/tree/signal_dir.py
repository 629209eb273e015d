"""Keep the signals directory (``CMAN_SIGNALS_DIR``) to what the tree may still run.

Every fetch of a new checksum adds an install (``.{version}-{sha256 prefix}``, ``signals.artifacts``)
and none was ever removed: superseded versions, rejected ones, and the partial directories of
fetchers killed in the middle, until the pod's volume was full. The bootstrap prunes it when no
fetch runs, keeping the installs of the running configuration and of the last good one (and what
their versions' links point to), and reports how much the directory holds.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Collection
from pathlib import Path

log = logging.getLogger(__name__)

INSTALL = re.compile(r"\..+-[0-9a-f]{16}")  # signals.artifacts.install_dir_name
LEFT_BEHIND = re.compile(r"\..+\.(partial-.+|link-\d+)")  # a killed fetcher's unpacking or staged link


def prune(signals_dir: Path, versions: Collection[str], installs: Collection[str]) -> list[str]:
    """Remove every install but ``installs`` and those ``versions``' links point to, what fetchers
    left behind, and links that no longer lead to an install; return the names removed. Only
    while no fetcher runs."""
    keep = set(installs)
    for version in versions:
        try:
            keep.add(os.readlink(signals_dir / version))
        except OSError:
            pass
    removed = []
    for entry in sorted(signals_dir.iterdir()):
        name = entry.name
        if entry.is_symlink():
            target = os.readlink(entry)
            to_install = INSTALL.fullmatch(target) is not None
            if LEFT_BEHIND.fullmatch(name) or (to_install and (target not in keep or not entry.is_dir())):
                entry.unlink(missing_ok=True)
                removed.append(name)
        elif (INSTALL.fullmatch(name) and name not in keep) or LEFT_BEHIND.fullmatch(name):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(name)
    if removed:
        log.info("removed from %s what no configuration runs any longer: %s", signals_dir, " ".join(removed))
    return removed


def disk_bytes(path: Path) -> int:
    """Bytes of disk the files under ``path`` take (blocks, not lengths; links not followed)."""
    total = 0
    for root, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total
