"""Unpack a signal tarball without letting it write anywhere but its own directory.

Every member is checked before anything is written, and the first bad one refuses the whole
archive with a message naming it: absolute paths, ``..`` components, anything outside the
expected top-level directories, device files and FIFOs, hard links to names the archive does not
hold, and symbolic links that are absolute or contain ``..`` (a relative link without ``..``
can only point below its own directory, however links chain). tarfile's ``data`` filter then
extracts, as a second guard that also drops set-uid bits and ownership.
"""

from __future__ import annotations

import gzip
import tarfile
import zlib
from collections.abc import Iterable
from pathlib import Path
from pathlib import PurePosixPath

DEFAULT_MAX_BYTES = 2 << 30  # a signal virtualenv is a few MB; gigabytes mean a broken or hostile file


class UnsafeArchive(ValueError):
    """The tarball holds an entry that could write outside its directory, or is not what we expect."""


def _parts(name: str) -> tuple[str, ...]:
    return tuple(p for p in PurePosixPath(name).parts if p != ".")


def check_members(
    members: Iterable[tarfile.TarInfo], top_level: frozenset[str], max_bytes: int = DEFAULT_MAX_BYTES
) -> None:
    """Raise ``UnsafeArchive`` for the first member that is not a plain, contained entry."""
    seen_files: set[tuple[str, ...]] = set()
    total = 0
    for m in members:
        name = m.name
        if name.startswith("/") or PurePosixPath(name).is_absolute():
            raise UnsafeArchive(f"entry {name!r} has an absolute path")
        parts = _parts(name)
        if ".." in parts:
            raise UnsafeArchive(f"entry {name!r} contains '..'")
        if not parts or parts[0] not in top_level:
            raise UnsafeArchive(f"entry {name!r} is outside {', '.join(sorted(top_level))}")
        if m.ischr() or m.isblk():
            raise UnsafeArchive(f"entry {name!r} is a device file")
        if m.isfifo():
            raise UnsafeArchive(f"entry {name!r} is a FIFO")
        if m.issym():
            target = m.linkname
            if target.startswith("/"):
                raise UnsafeArchive(f"symbolic link {name!r} points to the absolute path {target!r}")
            if ".." in _parts(target):
                raise UnsafeArchive(f"symbolic link {name!r} -> {target!r} leads out of its directory")
        elif m.islnk():
            if _parts(m.linkname) not in seen_files:
                raise UnsafeArchive(f"hard link {name!r} -> {m.linkname!r} names no earlier file of the archive")
        elif not (m.isfile() or m.isdir()):
            raise UnsafeArchive(f"entry {name!r} has an unsupported type")
        if m.isfile():
            seen_files.add(parts)
            total += m.size
            if total > max_bytes:
                raise UnsafeArchive(f"the archive unpacks to more than {max_bytes} bytes")


def extract(tarball: Path, destination: Path, top_level: frozenset[str], max_bytes: int = DEFAULT_MAX_BYTES) -> None:
    """Check every member of ``tarball``, then extract it into ``destination`` (which must exist)."""
    try:
        with tarfile.open(tarball, "r:gz") as archive:  # what ``pack`` writes; "r:*" would list every method tried
            members = archive.getmembers()
            check_members(members, top_level, max_bytes)
            archive.extractall(destination, members=members, filter="data")
    except tarfile.FilterError as e:
        raise UnsafeArchive(f"refused by tarfile's data filter: {e}") from e
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as e:
        cause = " ".join(str(e).split()) or type(e).__name__  # one line: the bootstrap repeats the last lines
        raise UnsafeArchive(f"not a readable tar.gz file: {cause}") from e
