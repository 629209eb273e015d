"""Whether a path the configuration names can ever be used where it is: the state and metrics
stores ask before they report a failure, so a directory that is a regular file is told apart from a
full disk (a configuration rolled back, or an outage waited out)."""

from __future__ import annotations

import errno
import os

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
