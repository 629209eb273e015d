"""Keep one resource's objects current: list once, then watch from the list's resourceVersion.

This is client-go's reflector, for one Kubernetes resource with its selectors:

- the list is read page by page (``limit``/``continue``); each page goes to the store and is dropped,
  while the next one is read;
- the watch starts from the list's ``resourceVersion`` with bookmarks, and each event (or
  bookmark) moves the version on;
- a watch that ends (its ``timeoutSeconds``, or a broken stream) is resumed from the last version;
- ``410 Gone`` (the version is older than the server's history) lists again;
- failures are retried with exponential backoff (0.8 s doubling to 30 s, with jitter, reset once a
  watch has run for a while), as client-go does; a run that reads the cache ends a wait that has
  lasted the initial backoff (``nudge``), so a recovery is seen within a run or two, not a
  backoff grown over a long outage.

What the API calls are is given (``Source``), so this module knows nothing of HTTP or JSON. The
loop runs on a thread of its own; ``freshness`` says when it last heard from the API server: a list
page, an event or a bookmark. A watch the server answers, or ends, says nothing by itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
import logging
import random
import threading
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from typing import Generic
from typing import Protocol
from typing import TypeVar

log = logging.getLogger(__name__)

O = TypeVar("O")  # noqa: E741 - an API object, as the source decodes it
O_in = TypeVar("O_in", contravariant=True)

ADDED, MODIFIED, DELETED, BOOKMARK = "ADDED", "MODIFIED", "DELETED", "BOOKMARK"


class Gone(Exception):
    """410: the version asked for is older than the server keeps; only a new list helps."""


class StreamEnded(Exception):
    """The watch stream broke, or its server went away: resume from the last version."""


@dataclass(frozen=True)
class Page(Generic[O]):
    items: list[O]
    version: str  # the list's resourceVersion
    next: str | None  # the continue token; None on the last page


@dataclass(frozen=True)
class Event(Generic[O]):
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    obj: O | None  # None for a bookmark
    version: str


class Source(Protocol[O]):
    """The API calls for one resource (with its selectors). Errors other than Gone and StreamEnded
    are the API's own (unreachable, forbidden, not JSON): retried with backoff."""

    def page(self, token: str | None) -> Page[O]: ...

    def watch(self, version: str) -> Iterator[Event[O]]:
        """Events after ``version`` until the server ends the stream; ``stop`` ends it from outside."""
        ...

    def stop(self) -> None: ...


class Store(Protocol[O_in]):
    def replace(self, objects: Iterable[O_in]) -> None:
        """The whole list, as pages arrive: afterwards the store holds exactly these objects."""

    def update(self, kind: str, obj: O_in) -> None:
        """One ADDED, MODIFIED or DELETED object."""


@dataclass(frozen=True)
class Freshness:
    """What a reflector can say about itself: ``heard_at`` on the monotonic clock (0: never)."""

    resource: str
    heard_at: float
    synced: bool  # a full list has been stored
    state: str  # "watching", "listing", or what it is waiting for
    error: str = ""  # the last failure, "" after a successful watch

    def silent_for(self, now: float) -> float:
        return float("inf") if not self.heard_at else max(0.0, now - self.heard_at)


class Backoff:
    """client-go's: 0.8 s doubling to 30 s, each with up to as much again of jitter."""

    def __init__(self, initial: float = 0.8, cap: float = 30.0, rng: random.Random | None = None) -> None:
        self.initial, self.cap = initial, cap
        self.delay = 0.0
        self.rng = rng or random.Random()

    def next(self) -> float:
        self.delay = min(self.cap, self.delay * 2) if self.delay else self.initial
        return self.delay * (1 + self.rng.random())

    def reset(self) -> None:
        self.delay = 0.0


_PAUSES = 0  # lists in progress
_WAS_ON = True  # the collector was on when the first of them began
_PAUSES_LOCK = threading.Lock()
PUT_OFF = 100_000  # objects made while paused past which the full pass is made at once


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a list is stored: it would walk the growing heap
    again and again (a quarter of a list's CPU at 10,000 nodes). Paused, never frozen: what the list
    made is the collector's as usual afterwards, and after a large list the one full pass the pause
    put off is made here, by the thread that listed, rather than by whichever run allocates next."""
    global _PAUSES, _WAS_ON
    with _PAUSES_LOCK:
        _PAUSES += 1
        if _PAUSES == 1:
            _WAS_ON = gc.isenabled()
            gc.disable()
    try:
        yield
    finally:
        with _PAUSES_LOCK:
            _PAUSES -= 1
            resume = _PAUSES == 0 and _WAS_ON
            if resume:
                gc.enable()
        if resume and gc.get_count()[0] >= PUT_OFF:
            gc.collect()


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
LARGE = 128 * 1024  # glibc's initial threshold, kept


@functools.cache
def _glibc() -> Any:
    """The C library when it is glibc (``malloc_trim``, ``mallopt``), else None (musl, macOS)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim, libc.mallopt  # noqa: B018 - glibc's own
    except (OSError, AttributeError):
        return None
    return libc


@functools.cache
def map_large_buffers() -> None:
    """Keep glibc mapping each large buffer (a list page's 5 MB) on its own. glibc raises the size
    it maps from to that of the last large buffer freed, so pages came from its heap afterwards, and
    the heap they fragmented stayed: 10 MB for a pool of 100 nodes after a list of 30,000 pods."""
    libc = _glibc()
    if libc is not None:
        libc.mallopt(M_MMAP_THRESHOLD, LARGE)


def release_free_memory() -> None:
    """Give what a list freed back to the system: glibc keeps freed blocks in its arenas."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


class Reflector(Generic[O]):
    """One resource's list-then-watch loop (the module's docstring has the rules)."""

    def __init__(
        self,
        resource: str,
        source: Source[O],
        store: Store[O],
        *,
        clock: Callable[[], float] = time.monotonic,
        backoff: Backoff | None = None,
        healthy_after_seconds: float = 1.0,
    ) -> None:
        self.resource = resource
        self.source = source
        self.store = store
        self.clock = clock
        self.backoff = backoff or Backoff()
        # a watch that the server ended cleanly after this long resets the backoff
        self.healthy_after_seconds = healthy_after_seconds
        self.version: str | None = None  # None: a list is needed
        self._heard_at = 0.0
        self._state = "not started"
        self._error = ""
        self._synced = False
        self._stopping = threading.Event()
        self._waking = threading.Event()  # set by ``nudge``: the wait in progress ends
        self._waiting_since = 0.0  # when the wait in progress began (0: not waiting)
        self._thread: threading.Thread | None = None
        self.lists = 0  # full lists done (the first included)
        self.watches = 0  # watch requests made

    # --- what readers see -----------------------------------------------------------------------

    def freshness(self) -> Freshness:
        return Freshness(self.resource, self._heard_at, self._synced, self._state, self._error)

    def _heard(self) -> None:
        self._heard_at = self.clock()

    # --- the loop -------------------------------------------------------------------------------

    def sync(self) -> None:
        """One full list into the store, in the caller's thread; the API's errors are raised."""
        map_large_buffers()
        self._state = "listing"
        version = ""

        def objects() -> Iterator[O]:
            # Ask for the next page on a thread of its own as soon as its token is known, so that
            # waiting for the server overlaps storing this page.
            nonlocal version
            with ThreadPoolExecutor(1, thread_name_prefix=f"list {self.resource}") as ahead:
                page = self.source.page(None)
                while True:
                    self._heard()
                    version = page.version
                    following = ahead.submit(self.source.page, page.next) if page.next is not None else None
                    yield from page.items
                    if following is None:
                        return
                    page = following.result()

        with collector_paused():
            self.store.replace(objects())
        release_free_memory()
        self.version = version
        self._synced = True
        self.lists += 1
        self._state = "watching"

    def start(self) -> None:
        """Watch (and list again when needed) on a thread of its own, until ``stop``."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"watch {self.resource}", daemon=True)
            self._thread.start()

    def nudge(self) -> None:
        """A run reads the cache: end a wait for a retry that has lasted the initial backoff, so
        that many runs (one reader serves several pools) still make one attempt at a time."""
        since = self._waiting_since
        if since and self.clock() - since >= self.backoff.initial:
            self._waking.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self._waking.set()
        self.source.stop()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                if self.version is None:
                    self.sync()
                self._watch_once()
            except Gone:
                log.info("watch of %s: version %s is gone (410): listing again", self.resource, self.version)
                self.version = None
                self._error = "410 Gone: the watch's version was older than the server's history"
                self._wait("listing again after 410 Gone")
            except StreamEnded as e:
                if self._stopping.is_set():
                    return
                self._error = f"the watch stream broke: {e}"
                self._wait("resuming the watch")
            except Exception as e:  # the API's own errors: retried, and shown in the freshness
                if self._stopping.is_set():
                    return
                self._error = str(e) or type(e).__name__
                log.warning("watch of %s: %s", self.resource, self._error)
                self._wait("retrying after an error" if self.version else "listing again after an error")

    def _wait(self, why: str) -> None:
        delay = self.backoff.next()
        self._state = f"{why} (in {delay:.1f} s)"
        self._waking.clear()
        if self._stopping.is_set():  # stopped before the wait began: its wake-up is cleared above
            return
        self._waiting_since = self.clock()
        try:
            self._waking.wait(delay)
        finally:
            self._waiting_since = 0.0

    def _watch_once(self) -> None:
        assert self.version is not None
        self._state = "watching"
        started = self.clock()
        self.watches += 1
        # Neither an answered watch nor its end is word from the server: a stream that says nothing
        # until it times out, or one ended at once again and again, would keep the cache fresh.
        # Its events and bookmarks are (a real API server sends a bookmark before a watch's end).
        for event in self.source.watch(self.version):
            self._heard()
            if event.type != BOOKMARK:
                assert event.obj is not None
                self.store.update(event.type, event.obj)
            if event.version:
                self.version = event.version
        # The server ended the stream at its timeoutSeconds: watch again at once. A stream that
        # ended as soon as it began means the server is not well, so the backoff applies.
        if self.clock() - started < self.healthy_after_seconds:
            self._wait("watching again after a short watch")
            return
        self._error = ""
        self.backoff.reset()
