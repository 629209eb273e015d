import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from clusterman.events.event import MAX_MESSAGE_CHARS
from clusterman.events.event import RESOURCE_KEYS
from clusterman.events.event import ChangeDetail
from clusterman.events.event import ChangeType
from clusterman.events.event import Event
from clusterman.events.event import EventRecord
from clusterman.events.event import EventType
from clusterman.events.event import record_from_json
from clusterman.events.event import resource
from clusterman.events.ring import EventRing


def node_event(n: int, message: str = "") -> Event:
    return Event(
        EventType.NODE,
        ChangeType.REMOVE,
        ChangeDetail.NODE_TERMINATE,
        1_700_000_000_000_000_000 + n,
        f"i-{n:04d}",
        "asg-web",
        resource(cpus=4, mem=16000.5),
        message or f"event {n}",
    )


def filled(capacity: int, count: int) -> EventRing:
    ring = EventRing(capacity)
    for n in range(count):
        assert ring.append(node_event(n)) == n
    return ring


def ids(page) -> list[int]:
    return [r.id for r in page.records]


def test_empty_ring_has_an_unambiguous_range():
    ring = EventRing(10)
    page = ring.read(None, 5)
    assert (page.lowest_id, page.highest_id, page.records) == (0, -1, [])
    assert ring.read(0, 5).records == []
    one = filled(10, 1).read(None, 5)
    assert (one.lowest_id, one.highest_id, ids(one)) == (0, 0, [0])


def test_events_come_back_as_stored():
    ring = filled(10, 3)
    record = ring.read(1, 1).records[0]
    assert record == EventRecord(1, node_event(1))


def test_wrap_around_keeps_the_newest_with_their_ids():
    ring = filled(5, 12)
    page = ring.read(None, 100)
    assert (page.lowest_id, page.highest_id) == (7, 11)
    assert ids(page) == [7, 8, 9, 10, 11]
    assert [r.event.object_id for r in page.records] == ["i-0007", "i-0008", "i-0009", "i-0010", "i-0011"]


def test_read_starting_in_the_older_half_after_a_wrap_has_no_gap_and_no_excess():
    # capacity 10, 15 events: ids 5..9 sit at the end of the arrays, 10..14 at the start
    ring = filled(10, 15)
    assert ids(ring.read(6, 3)) == [6, 7, 8]
    assert ids(ring.read(8, 4)) == [8, 9, 10, 11]
    assert ids(ring.read(6, 100)) == list(range(6, 15))
    assert ids(ring.read(12, 2)) == [12, 13]


def test_start_outside_the_ring_gives_no_records_but_the_range():
    ring = filled(5, 12)
    below = ring.read(3, 10)
    above = ring.read(12, 10)
    assert (below.records, below.lowest_id, below.highest_id) == ([], 7, 11)
    assert (above.records, above.lowest_id, above.highest_id) == ([], 7, 11)


def test_newest_returns_as_many_as_are_kept():
    ring = filled(5, 12)
    assert ids(ring.newest(2)) == [10, 11]
    assert ids(ring.newest(1000)) == [7, 8, 9, 10, 11]
    assert ids(EventRing(3).newest(10)) == []


def test_resize_down_keeps_the_newest_and_frees_their_strings():
    ring = filled(10, 15)
    strings_before = ring.distinct_strings
    ring.resize(3)
    assert ring.capacity == 3
    assert ids(ring.read(None, 100)) == [12, 13, 14]
    assert ring.distinct_strings < strings_before
    assert ring.append(node_event(15)) == 15
    assert ids(ring.read(None, 100)) == [13, 14, 15]
    assert ring.read(13, 1).records[0].event == node_event(13)


def test_resize_up_keeps_everything_and_grows():
    ring = filled(4, 6)  # wrapped: ids 2..5
    ring.resize(8)
    assert ids(ring.read(None, 100)) == [2, 3, 4, 5]
    for n in range(6, 12):
        ring.append(node_event(n))
    assert ids(ring.read(None, 100)) == list(range(4, 12))
    assert ring.read(4, 1).records[0].event == node_event(4)


def test_strings_are_freed_when_their_last_event_is_overwritten():
    ring = EventRing(4)
    for n in range(1000):
        ring.append(node_event(n, message=f"unique message {n}"))
    # 4 events kept: each has its own object id and message, all share "asg-web"
    assert ring.distinct_strings == 4 * 2 + 1


def test_resource_amounts_read_back_as_written():
    ring = EventRing(2)
    amounts = resource(cpus=0.1, mem=123456.7, disk=1e6, gpus=3)
    ring.append(Event(EventType.NODE, ChangeType.SET, ChangeDetail.NODE_TAINT, 1, "n", resource=amounts))
    assert ring.read(0, 1).records[0].event.resource == (
        ("cpus", 0.1),
        ("mem", 123456.7),
        ("disk", 1000000.0),
        ("gpus", 3.0),
    )


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        EventRing(0)
    with pytest.raises(ValueError, match="at least 1"):
        EventRing(3).resize(0)


# --- the record itself --------------------------------------------------------------------


def test_detail_must_belong_to_the_type():
    with pytest.raises(ValueError, match="NODE_TAINT belongs to NODE, not GROUP"):
        Event(EventType.GROUP, ChangeType.SET, ChangeDetail.NODE_TAINT, 0, "g")
    Event(EventType.GROUP, ChangeType.NONE, ChangeDetail.DETAILS_NONE, 0, "g")  # fits any type


def test_long_messages_are_clipped_to_1024_characters():
    event = Event(EventType.ERROR, ChangeType.NONE, ChangeDetail.ERROR_CLOUD, 0, "asg", message="x" * 5000)
    assert len(event.message) == MAX_MESSAGE_CHARS
    assert event.message.endswith("…")


@pytest.mark.parametrize(
    ("amounts", "error"),
    [
        ({"cpus": -1}, "at least 0"),
        ({"cpus": float("nan")}, "finite"),
        ({"bananas": 1}, "unknown resource key"),
        ({"cpus": 1, "mem": 1, "disk": 1, "gpus": 1, "nodes": 1}, "at most 4"),
    ],
)
def test_bad_resources_are_refused(amounts, error):
    with pytest.raises(ValueError, match=error):
        resource(amounts)


def test_a_resource_needs_a_change_type():
    with pytest.raises(ValueError, match="needs a change type"):
        Event(EventType.NODE, ChangeType.NONE, ChangeDetail.NODE_TAINT, 0, "n", resource=resource(cpus=1))


def test_json_round_trip():
    record = EventRecord(42, node_event(42))
    data = record.to_json()
    assert data["id"] == 42
    assert data["eventChangeDetail"] == "NODE_TERMINATE"
    assert data["resource"] == {"cpus": 4.0, "mem": 16000.5}
    assert record_from_json(data) == record
    with pytest.raises(ValueError, match="'WIBBLE'"):
        record_from_json({**data, "type": "WIBBLE"})


# --- against a plain list, whatever the sequence of appends, resizes and reads -------------

operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 7)),
        st.tuples(st.just("resize"), st.integers(1, 9)),
        st.tuples(st.just("read"), st.integers(-2, 40), st.integers(1, 12)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(capacity=st.integers(1, 9), ops=operations)
def test_ring_matches_a_list_model(capacity, ops):
    ring = EventRing(capacity)
    model: list[int] = []  # ids kept, oldest first
    next_id = 0
    for op in ops:
        if op[0] == "append":
            for _ in range(op[1]):
                assert ring.append(node_event(next_id)) == next_id
                model = [*model, next_id][-capacity:]
                next_id += 1
        elif op[0] == "resize":
            capacity = op[1]
            ring.resize(capacity)
            model = model[-capacity:]
        else:
            start, count = max(op[1], 0), op[2]
            page = ring.read(start, count)
            expected = [i for i in model if i >= start][:count] if model and start >= model[0] else []
            assert ids(page) == expected
            assert [r.event.object_id for r in page.records] == [f"i-{i:04d}" for i in expected]
            assert page.lowest_id == (model[0] if model else next_id)
            assert page.highest_id == next_id - 1
    assert len(ring) == len(model)


def test_the_enumerations_fit_the_packed_columns():
    # ring.py packs change type into 2 bits, resource keys into 6, and DETAILS_NONE as type*100+99
    assert len(RESOURCE_KEYS) <= 6
    assert max(ChangeType) < 4
    assert all(d.value % 100 != 99 and d.value < 65536 for d in ChangeDetail)


def test_every_type_detail_and_change_reads_back():
    ring = EventRing(500)
    stored = []
    for event_type in EventType:
        for detail in [ChangeDetail.DETAILS_NONE, *(d for d in ChangeDetail if d and d.event_type is event_type)]:
            for change in ChangeType:
                amounts = resource(nodes=2) if change is not ChangeType.NONE else ()
                e = Event(event_type, change, detail, len(stored), f"{event_type.name}", resource=amounts)
                ring.append(e)
                stored.append(e)
    assert [r.event for r in ring.read(None, 500).records] == stored


# --- variable amounts, type filters and column widths, against a plain list -----------------

_KINDS = [
    (EventType.DECISION, ChangeType.NONE, ChangeDetail.DECISION_UTILISATION, ()),
    (EventType.DECISION, ChangeType.ADD, ChangeDetail.DECISION_UTILISATION, ("capacity",)),
    (EventType.SIGNAL, ChangeType.SET, ChangeDetail.SIGNAL_REQUEST, ("cpus", "mem")),
    (EventType.SIGNAL, ChangeType.SET, ChangeDetail.SIGNAL_REQUEST, ("cpus", "mem", "disk")),
    (EventType.NODE, ChangeType.REMOVE, ChangeDetail.NODE_TERMINATE, ("cpus", "mem", "disk", "gpus")),
    (EventType.POOL, ChangeType.NONE, ChangeDetail.POOL_PAUSE, ()),
]


def mixed_event(n: int, kind: int) -> Event:
    event_type, change, detail, keys = _KINDS[kind]
    amounts = tuple((key, float(n % 1000 + i)) for i, key in enumerate(keys))
    return Event(event_type, change, detail, n, f"o{n % 300}", f"r{n % 3}", amounts, f"m{n}")


mixed_operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(st.integers(0, len(_KINDS) - 1), min_size=1, max_size=40)),
        st.tuples(st.just("resize"), st.integers(1, 70)),
        st.tuples(st.just("read"), st.integers(-2, 400), st.integers(1, 50)),
        st.tuples(st.just("filtered"), st.integers(-2, 400), st.integers(1, 50), st.sets(st.sampled_from(EventType))),
        st.tuples(st.just("newest"), st.integers(0, 50), st.sets(st.sampled_from(EventType))),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(capacity=st.integers(1, 70), ops=mixed_operations)
def test_ring_with_any_amounts_and_filters_matches_a_list_model(capacity, ops):
    ring = EventRing(capacity)
    model: list[tuple[int, Event]] = []
    next_id = 0
    for op in ops:
        if op[0] == "append":
            for kind in op[1]:
                event = mixed_event(next_id, kind)
                assert ring.append(event) == next_id
                model = [*model, (next_id, event)][-capacity:]
                next_id += 1
        elif op[0] == "resize":
            capacity = op[1]
            ring.resize(capacity)
            model = model[-capacity:]
        elif op[0] in ("read", "filtered"):
            start, count = max(op[1], 0), op[2]
            types = op[3] if op[0] == "filtered" else set()
            page = ring.read(start, count, types)
            kept = [(i, e) for i, e in model if i >= start] if model and start >= model[0][0] else []
            expected = [(i, e) for i, e in kept if not types or e.type in types][:count]
            assert [(r.id, r.event) for r in page.records] == expected
        else:
            count, types = op[1], op[2]
            expected = [(i, e) for i, e in model if not types or e.type in types][-count:] if count else []
            assert [(r.id, r.event) for r in ring.newest(count, types).records] == expected
    assert [(r.id, r.event) for r in ring.read(None, 10_000).records] == model


def test_filter_comes_before_count():
    """The 3 newest POOL events, however many other events came after them."""
    ring = EventRing(1000)
    for n in range(500):
        ring.append(mixed_event(n, 5 if n % 50 == 0 else 2))
    assert [r.id for r in ring.newest(3, {EventType.POOL}).records] == [350, 400, 450]
    assert [r.id for r in ring.read(120, 2, {EventType.POOL}).records] == [150, 200]
    assert ring.newest(3, {EventType.ERROR}).records == []


def test_columns_widen_when_handles_outgrow_them():
    ring = EventRing(100_000)
    for n in range(70_000):  # 70,000 distinct object ids and messages: past 1 and 2 bytes
        ring.append(Event(EventType.NODE, ChangeType.NONE, ChangeDetail.NODE_TAINT, n, f"node-{n}", "g", (), f"m{n}"))
    assert ring._object.itemsize == 4 and ring._reference.itemsize == 1
    assert [r.event.object_id for r in ring.read(0, 2).records] == ["node-0", "node-1"]
    assert ring.read(69_999, 1).records[0].event.message == "m69999"


def test_amounts_take_room_only_for_what_events_carry():
    ring = EventRing(10_000)
    for n in range(10_000):
        ring.append(mixed_event(n, 2))  # two amounts each
    assert ring._amounts.size < 2.5 * 10_000
    assert ring.read(9_999, 1).records[0].event.resource == (("cpus", 999.0), ("mem", 1000.0))


def test_amount_marks_that_wrap_still_find_the_amounts():
    """Marks keep the amount index modulo 2**bits; 8 bits wrap after 256 amounts."""
    from clusterman.events.amounts import AmountQueue

    ring = EventRing(30)
    ring._amounts = AmountQueue(30, 4, mark_bits=8)
    stored = []
    for n in range(2000):
        event = mixed_event(n, n % len(_KINDS))
        ring.append(event)
        stored.append(event)
    for start in range(1970, 2000):
        assert [r.event for r in ring.read(start, 3).records] == stored[start : start + 3]


def test_more_than_255_kinds_widen_the_kind_column_and_still_filter():
    import itertools

    ring = EventRing(2000)
    stored = []
    masks = [c for r in range(1, 5) for c in itertools.combinations(RESOURCE_KEYS, r)]
    details = [d for d in ChangeDetail if d]
    for n, (detail, keys, change) in enumerate(itertools.product(details, masks, (ChangeType.SET, ChangeType.ADD))):
        if n == 600:
            break
        event = Event(detail.event_type, change, detail, n, "o", resource=resource({k: 1 for k in keys}))
        ring.append(event)
        stored.append(event)
    assert ring._kind.itemsize == 2
    assert [r.event for r in ring.read(None, 1000).records] == stored
    decisions = [e for e in stored if e.type is EventType.DECISION]
    assert len(decisions) > 100
    assert [r.event for r in ring.read(None, 1000, {EventType.DECISION}).records] == decisions
    assert [r.event for r in ring.newest(2, {EventType.DECISION}).records] == decisions[-2:]
