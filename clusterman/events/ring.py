"""The event history: a fixed-capacity ring, oldest overwritten, ids never renumbered.

Storage is columnar (one ``array`` per field, allocated to the exact size) instead of one Python
object per event:

- ``_ts``: the timestamp, 8 bytes;
- ``_kind``: type, change detail, change type and which ``RESOURCE_KEYS`` are present, as a code
  into a small table of the combinations seen (a few dozen in practice): 1 byte;
- ``_object``, ``_reference``, ``_message``: handles into one reference-counted ``Interner`` per
  column. A column is as wide as its largest handle needs (1, 2 or 4 bytes) and widens in place
  when a handle outgrows it: references (a few signal, group and pool names) stay at 1 byte,
  messages (templated text) usually at 2;
- the resource amounts, queued back to back in an ``AmountQueue`` (32-bit floats, 7 significant
  digits): 4 bytes per amount an event carries, not per amount it could carry.

That is 16 bytes per event, 4 per resource amount, plus the distinct strings (``bench/events.py`` measures both against
a list of small objects). Nothing is lost: every field reads back as it was appended.

Ids: the first event of a process gets 0, each next one the next integer. The ring holds the
ids ``lowest_id .. highest_id``; every position is computed with Python integers from those two
numbers, so nothing can wrap or underflow (YuniKorn's ring returned extra events with a gap in
the ids when a read started in the older half after a wrap). An empty ring reports
``highest_id == lowest_id - 1``, so "empty" and "one event" never look alike.

Reads can ask for some event types only: the filter is applied before ``count`` (the N newest
NODE events, not the NODE events among the N newest). It scans the 1-byte kind column in C
(``bytes.translate``), so filtering a million events takes milliseconds.

Thread safety: one lock; appends come from the publisher's thread, reads from HTTP handlers.
"""

from __future__ import annotations

import sys
import threading
import uuid
from array import array
from collections.abc import Collection
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from typing import Final
from typing import NamedTuple

from clusterman.events.amounts import BLOCK
from clusterman.events.amounts import AmountQueue
from clusterman.events.amounts import zeros as _zeros
from clusterman.events.event import MAX_RESOURCE_KEYS
from clusterman.events.event import RESOURCE_KEYS
from clusterman.events.event import ChangeDetail
from clusterman.events.event import ChangeType
from clusterman.events.event import Event
from clusterman.events.event import EventRecord
from clusterman.events.event import EventType
from clusterman.events.interner import Interner

_KEY_BIT: Final = {key: 1 << i for i, key in enumerate(RESOURCE_KEYS)}
_WIDER: Final = ("B", "H", "I", "Q")
_BLOCK_MASK: Final = BLOCK - 1
assert BLOCK & _BLOCK_MASK == 0, "BLOCK must be a power of two"  # column widths, narrowest first

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


def _widened(column: array[int], value: int) -> array[int]:
    """``column`` copied into the narrowest wider typecode that holds ``value`` (C-speed copy)."""
    for code in _WIDER:
        new = _zeros(code, 0)
        if new.itemsize > column.itemsize and value < 1 << (8 * new.itemsize):
            break
    n, narrow, wide = len(column), column.itemsize, new.itemsize
    new = _zeros(code, n)
    raw = bytearray(wide * n)
    source = column.tobytes()
    shift = 0 if sys.byteorder == "little" else wide - narrow
    for k in range(narrow):  # each value's bytes go to the low end of its wider slot
        raw[shift + k :: wide] = source[k::narrow]
    memoryview(new).cast("B")[:] = raw
    return new


class _Kind(NamedTuple):
    """What the kind column's code stands for (a tuple: decoding unpacks it)."""

    type: EventType
    change: ChangeType
    detail: ChangeDetail
    keys: tuple[str, ...]
    amounts: int  # len(keys)


@dataclass(frozen=True)
class Page:
    """A read from the ring, with the id range as it was at that moment."""

    lowest_id: int
    highest_id: int
    records: list[EventRecord]


class EventRing:
    # (attribute, values per slot) of every column, for resize
    _COLUMNS: Final = ("_ts", "_kind", "_object", "_reference", "_message")
    _STRINGS: Final = (("_object", "_objects"), ("_reference", "_references"), ("_message", "_messages"))

    def __init__(self, capacity: int, instance_uuid: str | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"event ring capacity must be at least 1, got {capacity}")
        self.instance_uuid = instance_uuid or str(uuid.uuid4())
        self._lock = threading.Lock()
        self._objects = Interner()
        self._references = Interner()
        self._messages = Interner()
        self._kinds: list[_Kind] = []
        self._kind_amounts = bytearray()  # amounts per event of each kind code
        self._amount_table = bytearray(256)  # the same, as a bytes.translate table for 1-byte codes
        self._kind_codes: dict[int, int] = {}  # detail (or type*100+99) << 8 | change << 6 | key bits
        self._next_id = 0
        self._head = 0  # slot of the oldest event
        self._len = 0
        self._allocate(capacity, {name: "B" for name in self._COLUMNS})
        self._amounts = AmountQueue(capacity, MAX_RESOURCE_KEYS)

    def _allocate(self, capacity: int, typecodes: dict[str, str]) -> None:
        self._capacity = capacity
        self._ts = _zeros("q", capacity)
        self._kind = _zeros(typecodes["_kind"], capacity)
        self._object = _zeros(typecodes["_object"], capacity)
        self._reference = _zeros(typecodes["_reference"], capacity)
        self._message = _zeros(typecodes["_message"], capacity)

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
        return len(self._objects) + len(self._references) + len(self._messages)

    def append(self, event: Event) -> int:
        """Store ``event``, overwriting the oldest when full; return its id."""
        with self._lock:
            return self._store((event,))[0]

    def extend(self, events: Sequence[Event]) -> list[int]:
        with self._lock:
            return self._store(events)

    def _new_kind(self, what: int, event: Event, shape: int) -> int:
        code = self._kind_codes[what] = len(self._kinds)
        keys = tuple(k for k in RESOURCE_KEYS if shape & _KEY_BIT[k])
        self._kinds.append(_Kind(event.type, event.change, event.detail, keys, len(keys)))
        self._kind_amounts.append(len(keys))
        if code < 256:
            self._amount_table[code] = len(keys)
        return code

    def _store(self, events: Sequence[Event]) -> list[int]:
        """Append ``events``: the storage thread's hot path, so the state lives in locals."""
        cap, head, length, next_id = self._capacity, self._head, self._len, self._next_id
        ts, kinds, objects, references, messages = self._ts, self._kind, self._object, self._reference, self._message
        # the interners' common cases (a string already held) are inlined: see Interner
        object_table, reference_table, message_table = self._objects, self._references, self._messages
        object_handles, reference_handles, message_handles = (
            object_table.handles,
            reference_table.handles,
            message_table.handles,
        )
        object_refs, reference_refs, message_refs = object_table.refs, reference_table.refs, message_table.refs
        kind_codes, kind_amounts = self._kind_codes, self._kind_amounts
        queue = self._amounts
        values, marks, q_head, q_tail = queue.values, queue.marks, queue.head, queue.tail
        size, n_marks, mark_mask = len(values), len(marks), queue.mark_mask
        ids = []
        try:
            for event in events:
                if length == cap:  # overwrite the oldest
                    slot = head
                    q_tail += kind_amounts[kinds[slot]]
                    h = objects[slot]
                    if object_refs[h] > 1:
                        object_refs[h] -= 1
                    else:
                        object_table.release(h)
                    h = references[slot]
                    if reference_refs[h] > 1:
                        reference_refs[h] -= 1
                    else:
                        reference_table.release(h)
                    h = messages[slot]
                    if message_refs[h] > 1:
                        message_refs[h] -= 1
                    else:
                        message_table.release(h)
                    head = slot + 1 if slot + 1 < cap else 0
                else:
                    slot = head + length
                    if slot >= cap:
                        slot -= cap
                    length += 1
                event_id = next_id
                next_id += 1
                if not event_id & _BLOCK_MASK:
                    marks[(event_id // BLOCK) % n_marks] = q_head & mark_mask
                resource = event.resource
                shape = event.change << 6
                if resource:
                    n = len(resource)
                    if q_head + n - q_tail > size:
                        queue.head, queue.tail = q_head, q_tail
                        queue.grow(q_head + n - q_tail)
                        values = queue.values
                        size = len(values)
                    at = q_head % size
                    if at + n <= size:
                        for key, amount in resource:
                            shape |= _KEY_BIT[key]
                            values[at] = amount
                            at += 1
                    else:
                        for i, (key, amount) in enumerate(resource):
                            shape |= _KEY_BIT[key]
                            values[(q_head + i) % size] = amount
                    q_head += n
                what = (event.detail or event.type * 100 + 99) << 8 | shape
                kind = kind_codes.get(what)
                if kind is None:
                    kind = self._new_kind(what, event, shape)
                ts[slot] = event.timestamp_ns
                obj = object_handles.get(event.object_id)
                if obj is None:
                    obj = object_table.add(event.object_id)
                else:
                    object_refs[obj] += 1
                ref = reference_handles.get(event.reference_id)
                if ref is None:
                    ref = reference_table.add(event.reference_id)
                else:
                    reference_refs[ref] += 1
                msg = message_handles.get(event.message)
                if msg is None:
                    msg = message_table.add(event.message)
                else:
                    message_refs[msg] += 1
                try:
                    kinds[slot] = kind
                    objects[slot] = obj
                    references[slot] = ref
                    messages[slot] = msg
                except OverflowError:  # a code or handle outgrew its column's width: widen, once
                    for name, value in (("_kind", kind), ("_object", obj), ("_reference", ref), ("_message", msg)):
                        self._put(name, slot, value)
                    kinds, objects, references, messages = self._kind, self._object, self._reference, self._message
                ids.append(event_id)
        finally:  # what was stored stays consistent if an event is refused half-way
            self._head, self._len, self._next_id = head, length, next_id
            queue.head, queue.tail = q_head, q_tail
        return ids

    def _put(self, name: str, slot: int, value: int) -> None:
        column: array[int] = getattr(self, name)
        try:
            column[slot] = value
        except OverflowError:
            column = _widened(column, value)
            column[slot] = value
            setattr(self, name, column)

    def _release_strings(self, slot: int) -> None:
        self._objects.release(self._object[slot])
        self._references.release(self._reference[slot])
        self._messages.release(self._message[slot])

    # --- reads -----------------------------------------------------------------------------

    def read(self, start: int | None, count: int, types: Collection[EventType] = ()) -> Page:
        """Up to ``count`` events from id ``start`` (default: the oldest kept), oldest first.

        Without ``types`` the ids have no gaps. With ``types``, only events of those types are
        returned and counted, so ids skip the others. A ``start`` outside ``lowest_id ..
        highest_id`` gives no records, and the page still names the range so the caller can
        resume from ``lowest_id``.
        """
        with self._lock:
            lowest, highest = self._next_id - self._len, self._next_id - 1
            if start is None:
                start = lowest
            if count <= 0 or start < lowest or start > highest:
                return Page(lowest, highest, [])
            if not types:
                n = min(count, highest - start + 1)
                return Page(lowest, highest, self._decode(range(start, start + n)))
            return Page(lowest, highest, self._decode(self._matching(start, highest, types)[:count]))

    def newest(self, count: int, types: Collection[EventType] = (), until: int | None = None) -> Page:
        """The last ``count`` events (of ``types``, if given) up to id ``until`` (default: the newest)."""
        with self._lock:
            return Page(*self._bounds(), self._decode(self._newest_ids(count, types, until)))

    def newest_start(self, count: int, types: Collection[EventType] = (), until: int | None = None) -> int | None:
        """The id of the ``count``-th newest event of ``types`` up to ``until``; None if there is none."""
        with self._lock:
            found = self._newest_ids(count, types, until)
            return found[0] if found else None

    def _bounds(self) -> tuple[int, int]:
        return self._next_id - self._len, self._next_id - 1

    def _newest_ids(self, count: int, types: Collection[EventType], until: int | None) -> list[int]:
        lowest, highest = self._bounds()
        last = highest if until is None else min(until, highest)
        if count <= 0 or last < lowest:
            return []
        if not types:
            return list(range(max(lowest, last - count + 1), last + 1))
        return self._matching(lowest, last, types)[-count:]

    def _matching(self, first: int, last: int, types: Collection[EventType]) -> list[int]:
        """The ids in ``first .. last`` (both kept) of an event of ``types``, by a C-speed scan."""
        wanted = bytes(1 if k.type in types else 0 for k in self._kinds)
        if not any(wanted):
            return []
        lowest = self._next_id - self._len
        start_slot = (self._head + (first - lowest)) % self._capacity
        n = last - first + 1
        end_slot = start_slot + n
        column = self._kind
        if end_slot <= self._capacity:
            codes = column[start_slot:end_slot]
        else:
            codes = column[start_slot:] + column[: end_slot - self._capacity]
        if column.typecode == "B":
            flags = codes.tobytes().translate(wanted.ljust(256, b"\0"))
        else:
            flags = bytes(map(wanted.__getitem__, codes))
        found = []
        at = flags.find(1)
        while at >= 0:
            found.append(first + at)
            at = flags.find(1, at + 1)
        return found

    def _slot(self, event_id: int) -> int:
        return (self._head + (event_id - (self._next_id - self._len))) % self._capacity

    def _amounts_between(self, first: int, end: int) -> int:
        """How many amounts the kept events ``first .. end - 1`` carry (a C-speed sum)."""
        if end <= first:
            return 0
        a = self._slot(first)
        b = a + (end - first)
        column = self._kind
        codes = column[a:b] if b <= self._capacity else column[a:] + column[: b - self._capacity]
        if column.typecode == "B":  # kind code -> its number of amounts, byte by byte, in C
            return sum(codes.tobytes().translate(self._amount_table))
        return sum(map(self._kind_amounts.__getitem__, codes))

    def _decode(self, ids: Sequence[int]) -> list[EventRecord]:
        """The records of kept ``ids`` (increasing): amounts are found once, then counted on."""
        records: list[EventRecord] = []
        if not ids:
            return records
        queue = self._amounts
        values = queue.values
        size = len(values)
        lowest = self._next_id - self._len
        objects, references, messages = self._objects.get, self._references.get, self._messages.get
        kinds, kind_column, ts = self._kinds, self._kind, self._ts
        object_column, reference_column, message_column = self._object, self._reference, self._message
        head, capacity = self._head, self._capacity
        between = self._amounts_between
        known_id, index = -1, 0  # the amounts of event known_id start at index (-1: not looked up yet)
        for event_id in ids:
            slot = (head + event_id - lowest) % capacity
            event_type, change, detail, keys, n = kinds[kind_column[slot]]
            if n:
                if known_id < 0 or event_id - known_id > BLOCK:  # from the nearest mark
                    index = queue.start_of(event_id, lowest, between)
                elif event_id != known_id:  # a filtered read skipped some
                    index += between(known_id, event_id)
                at = index % size
                if at + n <= size:
                    amounts = tuple([(key, _shown(values[at + i])) for i, key in enumerate(keys)])
                else:
                    amounts = tuple([(key, _shown(values[(at + i) % size])) for i, key in enumerate(keys)])
                index += n
                known_id = event_id + 1
            else:
                amounts = ()
            event = Event(
                event_type,
                change,
                detail,
                ts[slot],
                objects(object_column[slot]),
                references(reference_column[slot]),
                amounts,
                messages(message_column[slot]),
            )
            records.append(EventRecord(event_id, event))
        return records

    # --- capacity --------------------------------------------------------------------------

    def resize(self, capacity: int) -> None:
        """Change the capacity, keeping the newest events and their ids."""
        if capacity < 1:
            raise ValueError(f"event ring capacity must be at least 1, got {capacity}")
        with self._lock:
            keep = min(self._len, capacity)
            dropped = self._len - keep
            lowest = self._next_id - self._len
            kept_ids = range(lowest + dropped, self._next_id)
            amounts = self._amounts.rebuilt(capacity, MAX_RESOURCE_KEYS, kept_ids, lowest, self._amounts_between)
            for i in range(dropped):
                self._release_strings((self._head + i) % self._capacity)
            first = (self._head + dropped) % self._capacity
            old = self._capacity
            columns = {name: self._take(getattr(self, name), first, keep, old) for name in self._COLUMNS}
            self._allocate(capacity, {name: column.typecode for name, column in columns.items()})
            for name in self._COLUMNS:
                getattr(self, name)[:keep] = columns[name]
            self._amounts = amounts
            self._head = 0
            self._len = keep

    @staticmethod
    def _take(column: array[Any], first: int, n: int, capacity: int) -> array[Any]:
        """``n`` consecutive ring slots from ``first``, unwrapped into one array."""
        end = first + n
        if end <= capacity:
            return column[first:end]
        return column[first:] + column[: end - capacity]
