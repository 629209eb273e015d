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


# What a path's own placement answers, however long one waits: the configuration named it wrong.
UNUSABLE_ERRNOS = frozenset(
    {errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENAMETOOLONG, errno.ELOOP}
)


def unusable_path(path: str | os.PathLike[str], error: BaseException | None = None) -> str:
    """Why a file the configuration names (to open or create, its directories with it) can never be
    used where it is: "" when it may be. A full disk or a busy file is not this: it passes."""
    where = os.path.abspath(path)
    if os.path.isdir(where):
        return f"{where} is a directory"
    parent = os.path.dirname(where)
    while not os.path.lexists(parent):  # "/" is there
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"{parent} is not a directory"
    if isinstance(error, OSError) and error.errno in UNUSABLE_ERRNOS:
        return error.strerror or str(error)
    return ""
