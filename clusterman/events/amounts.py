"""The resource amounts of the events in the ring, oldest first, in one circular run of floats.

Events carry 0 to ``MAX_RESOURCE_KEYS`` amounts (a decision one or none, a signal answer two or
three, a node four). Reserving the maximum for every event left half of that space empty, so the
amounts are queued back to back instead: the ring adds an event's amounts when it stores the
event and drops them when it overwrites it, both in id order, so the queue is first in, first
out. Its space grows by an eighth when the events kept need more (up to the maximum per event),
and is never reserved ahead.

An event's amounts start at an absolute index (amounts ever added before it). A mark every
``BLOCK`` ids remembers that index, so a read can begin at any id by counting the amounts of
at most ``BLOCK - 1`` events before it; consecutive reads just keep counting.

Amounts are 32-bit floats: 7 significant digits, ample for cpus in shares and mem in MB.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any
from typing import Final

BLOCK: Final = 16
_GROWTH: Final = 8  # grow by 1/8 of the current size


def zeros(typecode: str, n: int) -> array[Any]:
    """An array of ``n`` zeros of exactly that size (``array(code, bytes(...))`` over-allocates)."""
    return array(typecode, [0]) * n


class AmountQueue:
    def __init__(self, events_capacity: int, max_per_event: int, mark_bits: int | None = None) -> None:
        self._limit = max(1, events_capacity * max_per_event)
        self.values = zeros("f", max(1, min(events_capacity, self._limit)))
        # Marks keep an absolute index modulo 2**mark_bits: enough while fewer amounts are kept.
        bits = mark_bits or (32 if self._limit < 1 << 32 else 64)
        self.mark_mask = (1 << bits) - 1
        self.marks = zeros("I" if bits <= 32 else "Q", events_capacity // BLOCK + 2)
        self.head = 0  # absolute index of the next amount added
        self.tail = 0  # absolute index of the oldest amount kept

    @property
    def size(self) -> int:
        """Amounts the queue has room for now."""
        return len(self.values)

    def start_of(self, event_id: int, lowest_id: int, between: Callable[[int, int], int]) -> int:
        """Where the amounts of kept event ``event_id`` start.

        ``between(a, b)`` is the number of amounts of the kept events ``a .. b - 1``.
        """
        first = event_id - event_id % BLOCK
        if first <= lowest_id:  # the mark may be gone with the events before lowest_id
            return self.tail + between(lowest_id, event_id)
        # A kept event's amounts start at or after the tail, fewer than mark_mask amounts after it
        # (at most max_per_event per kept event), so the mark's low bits restore the index.
        mark = self.marks[(first // BLOCK) % len(self.marks)]
        return self.tail + ((mark - self.tail) & self.mark_mask) + between(first, event_id)

    def get(self, index: int) -> float:
        values = self.values
        return values[index % len(values)]

    def grow(self, needed: int) -> None:
        size = len(self.values)
        new_size = min(self._limit, max(needed, size + size // _GROWTH + 1))
        live = self._slice(self.tail, self.head)
        self.values = zeros("f", new_size)
        self._place(self.tail, live)

    def _slice(self, start: int, end: int) -> array[Any]:
        """The amounts ``start .. end - 1`` (absolute), unwrapped."""
        size = len(self.values)
        a, n = start % size, end - start
        if a + n <= size:
            return self.values[a : a + n]
        return self.values[a:] + self.values[: a + n - size]

    def _place(self, start: int, live: array[Any]) -> None:
        size = len(self.values)
        a, n = start % size, len(live)
        if a + n <= size:
            self.values[a : a + n] = live
        else:
            self.values[a:] = live[: size - a]
            self.values[: a + n - size] = live[size - a :]

    def rebuilt(
        self, events_capacity: int, max_per_event: int, ids: range, lowest_id: int, between: Callable[[int, int], int]
    ) -> AmountQueue:
        """A queue for a new ring capacity holding the amounts of ``ids`` (the newest kept ones).

        ``lowest_id`` is the oldest id this queue holds now; ``between`` must still see the events.
        """
        new = AmountQueue(events_capacity, max_per_event)
        if not ids:
            return new
        start = self.start_of(ids.start, lowest_id, between)
        live = self._slice(start, self.head)
        if len(live) > new.size:
            new.values = zeros("f", len(live))
        new._place(0, live)
        new.head = len(live)
        for first in range(ids.start + (-ids.start) % BLOCK, ids.stop, BLOCK):
            new.marks[(first // BLOCK) % len(new.marks)] = between(ids.start, first) & new.mark_mask
        return new  # its absolute indexes start at 0 with the first event kept
