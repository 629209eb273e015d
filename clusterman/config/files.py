"""Read a small file that someone else manages (srv-configs, a mounted secret) without trusting its type.

A FIFO put in a file's place would hold the reader until a writer came, and a device such as
``/dev/zero`` would never end: either would stop the bootstrap's watch of its tree for good.
"""

from __future__ import annotations

import errno
import os
import stat


def read_regular_file(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of ``path`` when it is a regular file of at most ``limit`` bytes; OSError otherwise
    (``strerror`` says why: ``Is a directory``, ``not a regular file``, ``larger than N bytes``)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", str(path))
    return data
