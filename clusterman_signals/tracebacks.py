"""A failing signal's traceback, for its author: the file and line where it broke.

The runner answers a failure with one line (``{"Error": ...}``) and keeps serving. The traceback
goes to its log once per distinct error (its type and the lines it passed through) per
``every_seconds``: a broken signal fails the same way at every run. A client that asks in its init
message gets it too (``clusterman signal evaluate``). Standard library only.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Final

# The SDK's own frames (the call into value()) say nothing to the signal's author.
_SDK_FILES: Final = frozenset(str(Path(__file__).with_name(name)) for name in ("serving.py", "base_signal.py"))
MAX_CHARS: Final = 8000  # a deep recursion's traceback is cut: its first frames and the error are what matter


def _theirs(frame: traceback.FrameSummary) -> bool:
    """A frame of the signal's code, not the SDK's nor importlib's (an import's machinery)."""
    name = frame.filename
    return (
        name not in _SDK_FILES
        and not name.startswith("<frozen importlib")
        and not name.endswith("importlib/__init__.py")
    )


def signal_traceback(error: BaseException) -> str:
    """The traceback without the SDK's frames and importlib's, cut to ``MAX_CHARS``."""
    shown = traceback.TracebackException.from_exception(error)
    shown.stack = traceback.StackSummary.from_list([f for f in shown.stack if _theirs(f)])
    text = "".join(shown.format())
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 40] + "\n... (cut)\n" + text[-30:]


def _key(error: BaseException) -> tuple[str, tuple[tuple[str, int | None], ...]]:
    """Distinct errors differ in type or in where they passed; the message may carry changing values."""
    frames = traceback.extract_tb(error.__traceback__)
    return type(error).__qualname__, tuple((f.filename, f.lineno) for f in frames)


class TracebackLog:
    """Logs a signal's traceback the first time an error is seen, and again at most every
    ``every_seconds`` with how often it came meanwhile."""

    def __init__(
        self,
        log: logging.Logger,
        every_seconds: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
        max_kept: int = 256,
    ) -> None:
        self.log = log
        self.every_seconds = every_seconds
        self.clock = clock
        self.max_kept = max_kept
        # key -> (monotonic time last logged, times seen since), oldest first
        self._seen: OrderedDict[tuple[str, tuple[tuple[str, int | None], ...]], tuple[float, int]] = OrderedDict()

    def failed(self, label: str, error: BaseException) -> bool:
        """Log ``error``'s traceback unless it was logged less than ``every_seconds`` ago; True when logged."""
        key = _key(error)
        now = self.clock()
        last = self._seen.get(key)
        if last is not None and now - last[0] < self.every_seconds:
            self._seen[key] = (last[0], last[1] + 1)
            return False
        again = f" (seen {last[1]} more time(s) since it was last logged)" if last and last[1] else ""
        self._seen[key] = (now, 0)
        self._seen.move_to_end(key)
        while len(self._seen) > self.max_kept:
            self._seen.popitem(last=False)
        self.log.error(
            "%s: the signal's traceback%s; logged once every %g s per distinct error:\n%s",
            label, again, self.every_seconds, signal_traceback(error).rstrip(),
        )  # fmt: skip
        return True
