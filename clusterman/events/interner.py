"""A reference-counted string table: each distinct string stored once, forgotten when unused.

The event ring keeps ids, object names and messages as small integers into this table. Node
ids, app names and templated messages repeat across thousands of events; counting references
lets a string go when the last event naming it is overwritten, so the table never outgrows the
ring (a plain ``sys.intern`` table would grow for ever).
"""

from __future__ import annotations

from array import array
from typing import Final

EMPTY: Final = 0  # the handle of "" (never counted, never freed)


class Interner:
    """``handles`` (text -> handle) and ``refs`` (references per handle) are public for one
    reason: the ring's storage loop counts a reference to a string it already holds inline, as
    ``add`` would, without a method call per field. Everything else goes through the methods."""

    def __init__(self) -> None:
        self.handles: dict[str, int] = {}
        self._strings: list[str] = [""]
        self.refs = array("I", [0])
        self._free: list[int] = []

    def add(self, text: str) -> int:
        """The handle for ``text``, counting one more reference to it."""
        if not text:
            return EMPTY
        handle = self.handles.get(text)
        if handle is None:
            if self._free:
                handle = self._free.pop()
                self._strings[handle] = text
                self.refs[handle] = 1
            else:
                handle = len(self._strings)
                self._strings.append(text)
                self.refs.append(1)
            self.handles[text] = handle
        else:
            self.refs[handle] += 1
        return handle

    def release(self, handle: int) -> None:
        """Drop one reference; the string goes when none is left."""
        if handle == EMPTY:
            return
        left = self.refs[handle] - 1
        self.refs[handle] = left
        if left == 0:
            del self.handles[self._strings[handle]]
            self._strings[handle] = ""
            self._free.append(handle)

    def get(self, handle: int) -> str:
        return self._strings[handle]

    def __len__(self) -> int:
        """Distinct strings held (the empty string not counted)."""
        return len(self.handles)
