"""Hand events from the autoscaler loop to the ring and to live streams, never blocking the loop.

``publish`` only appends to a bounded deque (a few hundred nanoseconds, no lock); when the
deque is full the event is counted as dropped and the loop goes on. One background thread
(``start``) moves events into the ring and offers each to every live stream subscriber. A
subscriber has its own bounded buffer: when it is full the subscriber is cut off (its stream
then ends with an error line) instead of slowing anything else down.

Without the thread (the simulator, tests), ``drain()`` does the same work in the caller.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
from dataclasses import dataclass
from typing import Final

from clusterman.events.event import Event
from clusterman.events.event import EventRecord
from clusterman.events.ring import EventRing

log = logging.getLogger(__name__)

_BATCH: Final = 512  # events moved per lock hold


@dataclass(frozen=True)
class Overflowed:
    """Put in a subscriber's queue when it fell behind; the stream ends after it."""

    next_id: int  # the first id the subscriber did not get


@dataclass(frozen=True)
class Closed:
    """Put in a subscriber's queue when the publisher stops."""


class Subscription:
    """One live stream: events with ids above ``after_id``, in order, then an end marker.

    ``lowest_id .. after_id`` is what the ring held when the subscription began: the history a
    stream can send before its live events, with neither gap nor overlap.
    """

    def __init__(self, lowest_id: int, after_id: int, buffer_size: int) -> None:
        self.lowest_id = lowest_id
        self.after_id = after_id
        self._queue: queue.Queue[EventRecord | Overflowed | Closed] = queue.Queue(maxsize=buffer_size)
        self._end: Overflowed | Closed | None = None

    @property
    def ended(self) -> bool:
        return self._end is not None

    def offer(self, record: EventRecord) -> bool:
        """Called by the publisher; False (and the subscriber is finished) when it is full."""
        try:
            self._queue.put_nowait(record)
            return True
        except queue.Full:
            self._finish(Overflowed(record.id))
            return False

    def close(self) -> None:
        self._finish(Closed())

    def _finish(self, marker: Overflowed | Closed) -> None:
        # What is queued still goes out first, so the stream ends without a gap.
        if self._end is None:
            self._end = marker
        try:
            self._queue.put_nowait(marker)  # wakes a reader waiting on an empty queue
        except queue.Full:
            pass  # the reader is busy; it finds the marker when the queue runs dry

    def get(self, timeout: float) -> EventRecord | Overflowed | Closed | None:
        """The next item, the end marker once everything queued is out, or None after ``timeout``."""
        if self._end is not None and self._queue.empty():
            return self._end
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return self._end
        return self._end if isinstance(item, (Overflowed, Closed)) else item


class _Flush:
    def __init__(self) -> None:
        self.done = threading.Event()


class EventPublisher:
    def __init__(self, ring: EventRing, queue_size: int = 10_000, stream_buffer_size: int = 1000) -> None:
        if queue_size < 1 or stream_buffer_size < 1:
            raise ValueError("publisher queue and stream buffer sizes must be at least 1")
        self.ring = ring
        self.queue_size = queue_size
        self.stream_buffer_size = stream_buffer_size
        self._pending: collections.deque[Event | _Flush] = collections.deque()
        self._wake = threading.Event()
        self._lock = threading.Lock()  # held while storing + fanning out, and to subscribe
        self._subscribers: list[Subscription] = []
        self._drop_lock = threading.Lock()
        self._dropped = 0
        self._streams_cut = 0
        self._thread: threading.Thread | None = None
        self._stopping = False

    # --- the autoscaler's side -------------------------------------------------------------

    def publish(self, event: Event) -> bool:
        """Queue ``event`` for storage; False if the queue was full and the event is dropped."""
        if len(self._pending) >= self.queue_size:
            with self._drop_lock:
                self._dropped += 1
            return False
        self._pending.append(event)
        if not self._wake.is_set():
            self._wake.set()
        return True

    @property
    def dropped(self) -> int:
        """Events lost because the hand-off queue was full (the ring is not keeping up)."""
        return self._dropped

    @property
    def streams_cut(self) -> int:
        """Stream subscribers dropped for falling behind."""
        return self._streams_cut

    @property
    def streams(self) -> int:
        return len(self._subscribers)

    # --- moving events into the ring -------------------------------------------------------

    def drain(self) -> int:
        """Store every queued event and offer it to live subscribers; return how many."""
        stored = 0
        while True:
            batch: list[Event] = []
            flushes: list[_Flush] = []
            while len(batch) < _BATCH:
                try:
                    item = self._pending.popleft()
                except IndexError:
                    break
                if isinstance(item, _Flush):
                    flushes.append(item)
                else:
                    batch.append(item)
            if batch:
                self._store(batch)
                stored += len(batch)
            for f in flushes:
                f.done.set()
            if not batch and not flushes:
                return stored

    def _store(self, batch: list[Event]) -> None:
        with self._lock:
            ids = self.ring.extend(batch)
            if not self._subscribers:
                return
            records = [EventRecord(i, e) for i, e in zip(ids, batch, strict=True)]
            keep = []
            for sub in self._subscribers:
                if all(sub.offer(r) for r in records):
                    keep.append(sub)
                else:
                    self._streams_cut += 1
            self._subscribers = keep

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything published before this call is stored (tests, shutdown)."""
        marker = _Flush()
        self._pending.append(marker)
        if self._thread is None or not self._thread.is_alive():
            self.drain()
        else:
            self._wake.set()
        return marker.done.wait(timeout)

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="event-publisher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(timeout=1.0)
            self._wake.clear()
            try:
                self.drain()
            except Exception:  # a bug here must not end event storage for the process
                log.exception("storing events failed; continuing")

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """Store what is queued, stop the thread and end every live stream."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():  # stuck: a second drainer could reorder ids
                log.error("event publisher thread did not stop within %.1f s", timeout)
            else:
                self._thread = None
        if self._thread is None:
            self.drain()
        with self._lock:
            for sub in self._subscribers:
                sub.close()
            self._subscribers = []

    # --- live streams ----------------------------------------------------------------------

    def subscribe(self, buffer_size: int | None = None) -> Subscription:
        """A subscription to every event stored from now on; ``after_id`` is the last one before."""
        with self._lock:
            bounds = self.ring.read(None, 0)
            sub = Subscription(bounds.lowest_id, bounds.highest_id, buffer_size or self.stream_buffer_size)
            self._subscribers.append(sub)
            return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            if sub in self._subscribers:
                self._subscribers.remove(sub)

    def cut(self, sub: Subscription) -> None:
        """Drop a subscriber that stopped reading (its writes timed out)."""
        with self._lock:
            if sub in self._subscribers:
                self._subscribers.remove(sub)
                self._streams_cut += 1
        sub.close()

    def resize(self, capacity: int) -> None:
        """A new ring capacity (config reload), keeping the newest events."""
        with self._lock:
            self.ring.resize(capacity)
