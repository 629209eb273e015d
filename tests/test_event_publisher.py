import threading
import time

import pytest

from clusterman.events.event import ChangeDetail
from clusterman.events.event import ChangeType
from clusterman.events.event import Event
from clusterman.events.event import EventType
from clusterman.events.publisher import Closed
from clusterman.events.publisher import EventPublisher
from clusterman.events.publisher import Overflowed
from clusterman.events.ring import EventRing


def event(n: int) -> Event:
    return Event(EventType.LOCK, ChangeType.NONE, ChangeDetail.LOCK_TAKEN, n, "pool", message=f"#{n}")


def stored_messages(ring: EventRing) -> list[str]:
    return [r.event.message for r in ring.read(None, 10_000).records]


class GatedRing(EventRing):
    """A ring whose storage waits for the test: a stand-in for a storage thread that is stuck."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.gate = threading.Event()

    def extend(self, events):
        self.gate.wait(30)
        return super().extend(events)


def test_drain_without_a_thread_stores_in_order():
    ring = EventRing(100)
    publisher = EventPublisher(ring)
    for n in range(5):
        assert publisher.publish(event(n))
    assert len(ring) == 0  # nothing stored until drained
    assert publisher.drain() == 5
    assert stored_messages(ring) == [f"#{n}" for n in range(5)]


def test_a_full_hand_off_drops_and_counts_instead_of_blocking():
    publisher = EventPublisher(EventRing(100), queue_size=3)
    results = [publisher.publish(event(n)) for n in range(5)]
    assert results == [True, True, True, False, False]
    assert publisher.dropped == 2
    publisher.drain()
    assert stored_messages(publisher.ring) == ["#0", "#1", "#2"]


def test_publish_returns_at_once_while_storage_is_stuck():
    ring = GatedRing(1000)
    publisher = EventPublisher(ring, queue_size=50)
    publisher.start()
    try:
        publisher.publish(event(-1))  # the storage thread takes this one and blocks on the gate
        deadline = time.monotonic() + 5
        while publisher._pending and time.monotonic() < deadline:
            time.sleep(0.01)
        accepted = sum(publisher.publish(event(n)) for n in range(80))
        # every call returned while storage had not moved: the loop never waits for the ring
        assert len(ring) == 0
        assert accepted == 50
        assert publisher.dropped == 30
        ring.gate.set()
        assert publisher.flush(5)
        assert stored_messages(ring) == ["#-1"] + [f"#{n}" for n in range(50)]
    finally:
        ring.gate.set()
        publisher.stop()


def test_the_thread_stores_everything_in_order():
    publisher = EventPublisher(EventRing(10_000))
    publisher.start()
    try:
        for n in range(3000):
            publisher.publish(event(n))
        assert publisher.flush(10)
        assert stored_messages(publisher.ring) == [f"#{n}" for n in range(3000)]
        assert publisher.running
    finally:
        publisher.stop()
    assert not publisher.running


def test_subscribers_get_each_new_event_once_in_order():
    publisher = EventPublisher(EventRing(100))
    publisher.publish(event(0))
    publisher.drain()
    sub = publisher.subscribe()
    assert (sub.lowest_id, sub.after_id) == (0, 0)
    for n in range(1, 4):
        publisher.publish(event(n))
    publisher.drain()
    got = [sub.get(1) for _ in range(3)]
    assert [r.id for r in got] == [1, 2, 3]
    assert sub.get(0.01) is None


def test_a_subscriber_that_falls_behind_is_cut_off():
    publisher = EventPublisher(EventRing(100))
    slow = publisher.subscribe(buffer_size=2)
    fast = publisher.subscribe(buffer_size=100)
    for n in range(5):
        publisher.publish(event(n))
    publisher.drain()
    assert publisher.streams_cut == 1
    assert publisher.streams == 1
    items = [slow.get(0.1) for _ in range(3)]
    assert [r.id for r in items[:2]] == [0, 1]  # what was buffered still goes out, then the end
    assert items[2] == Overflowed(next_id=2)
    assert slow.get(0.01) == Overflowed(next_id=2)
    assert [fast.get(0.1).id for _ in range(5)] == [0, 1, 2, 3, 4]


def test_stop_stores_what_is_queued_and_ends_streams():
    publisher = EventPublisher(EventRing(100))
    publisher.start()
    sub = publisher.subscribe()
    for n in range(10):
        publisher.publish(event(n))
    publisher.stop()
    assert len(publisher.ring) == 10
    items = [sub.get(1) for _ in range(11)]
    assert isinstance(items[-1], Closed)


def test_resize_through_the_publisher_keeps_the_newest():
    publisher = EventPublisher(EventRing(10))
    for n in range(10):
        publisher.publish(event(n))
    publisher.drain()
    publisher.resize(4)
    assert stored_messages(publisher.ring) == ["#6", "#7", "#8", "#9"]


def test_sizes_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        EventPublisher(EventRing(1), queue_size=0)
