"""Unpack a signal tarball without letting it write anywhere but its own directory.

Every member is checked before anything is written. The first bad one refuses the whole
archive, with a message naming it. Refused:
- absolute paths, ``..`` components, anything outside the expected top-level directories;
- device files and FIFOs;
- hard links to names the archive does not hold;
- symbolic links that are absolute or contain ``..``. A relative link without ``..`` can only
  point below its own directory, however links chain.

The members are read one at a time and counted as they come. More than ``max_members`` entries,
or files adding up to more than ``max_bytes``, refuse the archive before the rest is read: a
tarball must not exhaust the fetcher's memory or the volume.

tarfile's ``data`` filter then extracts, as a second guard that also drops set-uid bits and
ownership. Last, the gzip stream is read to its end, so its CRC-32 and length are checked:
tarfile stops at the archive's end marker and would not notice a corrupt tail.
"""

from __future__ import annotations

import gzip
import tarfile
import zlib
from collections.abc import Iterable
from pathlib import Path
from pathlib import PurePosixPath

# A signal virtualenv is a few MB (numpy and pandas: about 150 MB in 7,000 files). The limits keep
# the two installs the signals directory holds (the running version and the last good one) and a
# third being fetched, its tarball included, well under the pod's 2 GiB work volume.
DEFAULT_MAX_BYTES = 256 << 20
DEFAULT_MAX_MEMBERS = 20_000
MAX_TRAILING_BYTES = 1 << 20  # after the archive's end marker: tar pads to 10 KiB records


class UnsafeArchive(ValueError):
    """The tarball holds an entry that could write outside its directory, or is not what we expect."""


def _parts(name: str) -> tuple[str, ...]:
    return tuple(p for p in PurePosixPath(name).parts if p != ".")


def check_members(
    members: Iterable[tarfile.TarInfo],
    top_level: frozenset[str],
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_members: int = DEFAULT_MAX_MEMBERS,
) -> list[tarfile.TarInfo]:
    """The members, read one at a time; ``UnsafeArchive`` for the first that is not a plain,
    contained entry, or once they are too many or too large."""
    seen_files: set[tuple[str, ...]] = set()
    total = 0
    checked = []
    for m in members:
        checked.append(m)
        if len(checked) > max_members:
            raise UnsafeArchive(f"the archive holds more than {max_members} entries")
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
    return checked


def extract(
    tarball: Path,
    destination: Path,
    top_level: frozenset[str],
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_members: int = DEFAULT_MAX_MEMBERS,
) -> None:
    """Check every member of ``tarball``, then extract it into ``destination`` (which must exist),
    then check the gzip stream's end. On an error the caller removes what was written."""
    try:
        with tarfile.open(tarball, "r:gz") as archive:  # what ``pack`` writes; "r:*" would list every method tried
            members = check_members(archive, top_level, max_bytes, max_members)
            archive.extractall(destination, members=members, filter="data")
            trailing = archive.fileobj.read(MAX_TRAILING_BYTES + 1)  # to the end: the CRC is checked there
            if len(trailing) > MAX_TRAILING_BYTES:
                raise UnsafeArchive(f"more than {MAX_TRAILING_BYTES} bytes after the archive's end")
    except tarfile.FilterError as e:
        raise UnsafeArchive(f"refused by tarfile's data filter: {e}") from e
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as e:
        cause = " ".join(str(e).split()) or type(e).__name__  # one line: the bootstrap repeats the last lines
        raise UnsafeArchive(f"not a readable tar.gz file: {cause}") from e
