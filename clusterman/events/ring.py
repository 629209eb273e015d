"""The event history: a fixed-capacity ring, oldest overwritten, ids never renumbered.

Storage is columnar (one ``array`` per field, preallocated) instead of one Python object per
event, and strings go through a reference-counted ``Interner``: 39 bytes per event plus
the distinct strings, where a list of small objects costs several hundred (``bench/events.py``
measures both). Resource amounts are kept as 32-bit floats (7 significant digits, ample for
cpus in shares and mem in MB) behind a bit mask of which ``RESOURCE_KEYS`` are present.

Ids: the first event of a process gets 0, each next one the next integer. The ring holds the
ids ``lowest_id .. highest_id``; every position is computed with Python integers from those two
numbers, so nothing can wrap or underflow (YuniKorn's ring returned extra events with a gap in
the ids when a read started in the older half after a wrap). An empty ring reports
``highest_id == lowest_id - 1``, so "empty" and "one event" never look alike.

Thread safety: one lock; appends come from the publisher's thread, reads from HTTP handlers.
"""

from __future__ import annotations

import threading
import uuid
from array import array
from dataclasses import dataclass
from typing import Any
from typing import Final

from clusterman.events.interner import Interner
from clusterman.events.record import MAX_RESOURCE_KEYS
from clusterman.events.record import RESOURCE_KEYS
from clusterman.events.record import ChangeDetail
from clusterman.events.record import ChangeType
from clusterman.events.record import Event
from clusterman.events.record import EventRecord
from clusterman.events.record import EventType

# Two small columns carry type, detail, change type and which resources are present:
#   what  (16 bits)  the detail's value, or type * 100 + 99 for DETAILS_NONE (no detail ends in 99)
#   shape (8 bits)   change type in the top 2 bits, a bit per RESOURCE_KEYS entry in the low 6
_KEY_BIT: Final = {key: 1 << i for i, key in enumerate(RESOURCE_KEYS)}
_WHAT: Final = {
    **{d.value: (d.event_type, d) for d in ChangeDetail if d},
    **{t.value * 100 + 99: (t, ChangeDetail.DETAILS_NONE) for t in EventType},
}
_SHAPE: Final = tuple(
    (ChangeType(shape >> 6), tuple(k for k in RESOURCE_KEYS if shape & _KEY_BIT[k])) for shape in range(256)
)
_STRIDE: Final = MAX_RESOURCE_KEYS


_SHOWN: dict[float, float] = {}
_SHOWN_LIMIT: Final = 65_536


def _shown(stored: float) -> float:
    """A 32-bit amount as the decimal it was written as (0.1, not 0.10000000149011612)."""
    shown = _SHOWN.get(stored)
    if shown is None:
        if len(_SHOWN) >= _SHOWN_LIMIT:
            _SHOWN.clear()
        shown = _SHOWN[stored] = float(f"{stored:.7g}")
    return shown


@dataclass(frozen=True)
class Page:
    """A read from the ring, with the id range as it was at that moment."""

    lowest_id: int
    highest_id: int
    records: list[EventRecord]


class EventRing:
    # (attribute, values per slot) of every column, for resize
    _COLUMNS: Final = (
        ("_ts", 1),
        ("_what", 1),
        ("_shape", 1),
        ("_object", 1),
        ("_reference", 1),
        ("_message", 1),
        ("_amounts", _STRIDE),
    )

    def __init__(self, capacity: int, instance_uuid: str | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"event ring capacity must be at least 1, got {capacity}")
        self.instance_uuid = instance_uuid or str(uuid.uuid4())
        self._lock = threading.Lock()
        self._strings = Interner()
        self._next_id = 0
        self._head = 0  # slot of the oldest event
        self._len = 0
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        self._capacity = capacity
        self._ts = array("q", bytes(8 * capacity))
        self._what = array("H", bytes(2 * capacity))
        self._shape = array("B", bytes(capacity))
        self._object = array("I", bytes(4 * capacity))
        self._reference = array("I", bytes(4 * capacity))
        self._message = array("I", bytes(4 * capacity))
        self._amounts = array("f", bytes(4 * _STRIDE * capacity))

    @property
    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        return self._len

    @property
    def lowest_id(self) -> int:
        with self._lock:
            return self._next_id - self._len

    @property
    def highest_id(self) -> int:
        with self._lock:
            return self._next_id - 1

    @property
    def distinct_strings(self) -> int:
        return len(self._strings)

    def append(self, event: Event) -> int:
        """Store ``event``, overwriting the oldest when full; return its id."""
        with self._lock:
            return self._append(event)

    def extend(self, events: list[Event]) -> list[int]:
        with self._lock:
            return [self._append(e) for e in events]

    def _append(self, event: Event) -> int:
        cap = self._capacity
        if self._len == cap:
            slot = self._head
            self._release(slot)
            self._head = (slot + 1) % cap
        else:
            slot = (self._head + self._len) % cap
            self._len += 1
        strings = self._strings
        self._ts[slot] = event.timestamp_ns
        self._what[slot] = event.detail or event.type * 100 + 99
        self._object[slot] = strings.add(event.object_id)
        self._reference[slot] = strings.add(event.reference_id)
        self._message[slot] = strings.add(event.message)
        shape = event.change << 6
        base = slot * _STRIDE
        for i, (key, amount) in enumerate(event.resource):
            shape |= _KEY_BIT[key]
            self._amounts[base + i] = amount
        self._shape[slot] = shape
        event_id = self._next_id
        self._next_id += 1
        return event_id

    def _release(self, slot: int) -> None:
        self._strings.release(self._object[slot])
        self._strings.release(self._reference[slot])
        self._strings.release(self._message[slot])

    def read(self, start: int | None, count: int) -> Page:
        """Up to ``count`` events from id ``start`` (default: the oldest kept), ids without gaps.

        A ``start`` outside ``lowest_id .. highest_id`` gives no records, and the page still
        names the range so the caller can resume from ``lowest_id``.
        """
        with self._lock:
            return self._read(start, count)

    def newest(self, count: int) -> Page:
        """The last ``count`` events (all of them if fewer are kept)."""
        with self._lock:
            return self._read(max(self._next_id - self._len, self._next_id - count), count)

    def _read(self, start: int | None, count: int) -> Page:
        lowest = self._next_id - self._len
        highest = self._next_id - 1
        if start is None:
            start = lowest
        if count <= 0 or start < lowest or start > highest:
            return Page(lowest, highest, [])
        n = min(count, highest - start + 1)
        first = (self._head + (start - lowest)) % self._capacity
        return Page(lowest, highest, [self._decode((first + i) % self._capacity, start + i) for i in range(n)])

    def _decode(self, slot: int, event_id: int) -> EventRecord:
        strings = self._strings
        event_type, detail = _WHAT[self._what[slot]]
        change, keys = _SHAPE[self._shape[slot]]
        base = slot * _STRIDE
        amounts = self._amounts
        event = Event(
            event_type,
            change,
            detail,
            self._ts[slot],
            strings.get(self._object[slot]),
            strings.get(self._reference[slot]),
            tuple((key, _shown(amounts[base + i])) for i, key in enumerate(keys)),
            strings.get(self._message[slot]),
        )
        return EventRecord(event_id, event)

    def resize(self, capacity: int) -> None:
        """Change the capacity, keeping the newest events and their ids."""
        if capacity < 1:
            raise ValueError(f"event ring capacity must be at least 1, got {capacity}")
        with self._lock:
            keep = min(self._len, capacity)
            dropped = self._len - keep
            for i in range(dropped):
                self._release((self._head + i) % self._capacity)
            first = (self._head + dropped) % self._capacity
            old = self._capacity
            columns = {
                name: self._take(getattr(self, name), first, keep, old, stride) for name, stride in self._COLUMNS
            }
            self._allocate(capacity)
            for name, stride in self._COLUMNS:
                getattr(self, name)[: keep * stride] = columns[name]
            self._head = 0
            self._len = keep

    @staticmethod
    def _take(column: array[Any], first: int, n: int, capacity: int, stride: int) -> array[Any]:
        """``n`` consecutive ring slots from ``first``, unwrapped into one array."""
        end = first + n
        if end <= capacity:
            return column[first * stride : end * stride]
        return column[first * stride :] + column[: (end - capacity) * stride]
