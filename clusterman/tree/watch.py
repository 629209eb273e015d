"""Notice when srv-configs or the AWS key file change: content fingerprints, compared by the caller.

Content, not mtimes: Kubernetes ConfigMaps and secrets change by swapping symbolic links, and a
file rewritten with the same bytes should not restart anything.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from clusterman.config.files import read_regular_file

MAX_WATCHED_BYTES = 16 << 20  # srv-configs and a key file are kilobytes

Fingerprint = tuple[tuple[str, str], ...]


def fingerprint(paths: Sequence[Path]) -> Fingerprint:
    prints = []
    for path in paths:
        try:
            prints.append((str(path), hashlib.sha256(read_regular_file(path, MAX_WATCHED_BYTES)).hexdigest()))
        except FileNotFoundError:
            prints.append((str(path), "missing"))
        except OSError as e:
            prints.append((str(path), f"unreadable: {e.strerror}"))
    return tuple(prints)


def changed(old: Fingerprint, new: Fingerprint) -> list[str]:
    """The paths whose content differs (a path watched in only one of the two counts as changed)."""
    before, after = dict(old), dict(new)
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
