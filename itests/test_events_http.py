"""The event API over real sockets: batch paging and errors, the stream, limits, slow clients."""

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from clusterman.core.config import EventsConfig
from clusterman.events.client import EventClient
from clusterman.events.client import Heartbeat
from clusterman.events.client import StreamEnded
from clusterman.events.event import ChangeDetail
from clusterman.events.event import ChangeType
from clusterman.events.event import Event
from clusterman.events.event import EventType
from clusterman.events.http import ConnectionLimits
from clusterman.events.service import EventService


def event(n: int) -> Event:
    return Event(EventType.NODE, ChangeType.NONE, ChangeDetail.NODE_DRAIN, n, f"i-{n:05d}", "asg", message="drain")


@pytest.fixture
def make_service():
    services = []

    def make(**overrides) -> EventService:
        config = EventsConfig(**{"port": 0, "stream_heartbeat_seconds": 5.0, **overrides})
        service = EventService(config, "itest", "pool.simulated").start()
        services.append(service)
        return service

    yield make
    for service in services:
        service.stop()


def publish(service: EventService, first: int, count: int) -> None:
    for n in range(first, first + count):
        assert service.publisher.publish(event(n))
    assert service.publisher.flush(10)


def get(service: EventService, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(service.server.url + path, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def record_ids(body: dict) -> list[int]:
    return [r["id"] for r in body["EventRecords"]]


# --- batch -------------------------------------------------------------------------------


def test_batch_on_an_empty_ring(make_service):
    service = make_service()
    status, body = get(service, "/ws/v1/events/batch")
    assert status == 200
    assert body == {
        "InstanceUUID": service.ring.instance_uuid,
        "LowestID": 0,
        "HighestID": -1,
        "EventRecords": [],
    }


def test_batch_count_defaults_to_and_is_capped_at_the_response_size(make_service):
    service = make_service(rest_response_size=4, ring_capacity=10)
    publish(service, 0, 15)
    assert record_ids(get(service, "/ws/v1/events/batch")[1]) == [5, 6, 7, 8]
    assert record_ids(get(service, "/ws/v1/events/batch?count=1000")[1]) == [5, 6, 7, 8]
    assert record_ids(get(service, "/ws/v1/events/batch?start=13&count=1000")[1]) == [13, 14]


def test_batch_after_a_wrap_starting_in_the_older_half(make_service):
    service = make_service(ring_capacity=10)
    publish(service, 0, 15)
    _, body = get(service, "/ws/v1/events/batch?start=6&count=3")
    assert record_ids(body) == [6, 7, 8]
    assert (body["LowestID"], body["HighestID"]) == (5, 14)
    assert [r["objectID"] for r in body["EventRecords"]] == ["i-00006", "i-00007", "i-00008"]
    assert record_ids(get(service, "/ws/v1/events/batch?start=8&count=5")[1]) == [8, 9, 10, 11, 12]


@pytest.mark.parametrize("start", [0, 4, 15, 10**30])
def test_batch_start_outside_the_ring_returns_the_range_to_resume_from(make_service, start):
    service = make_service(ring_capacity=10)
    publish(service, 0, 15)
    status, body = get(service, f"/ws/v1/events/batch?start={start}")
    assert status == 200
    assert (body["EventRecords"], body["LowestID"], body["HighestID"]) == ([], 5, 14)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("count=0", "count must be at least 1, got 0"),
        ("count=-5", "count must not be negative"),
        ("count=abc", "count must be a whole number (at most 100 digits), got 'abc'"),
        ("count=", "count must be a whole number (at most 100 digits), got ''"),
        ("count=1.5", "count must be a whole number"),
        ("count=1_0", "count must be a whole number"),
        ("count=+5", "count must be a whole number"),
        ("start=" + "9" * 5000, "start must be a whole number"),
        ("start=-1", "start must not be negative"),
        ("start=x", "start must be a whole number"),
        ("count=1&count=2", "count is given 2 times"),
        ("limit=5", "unknown parameter(s) limit"),
    ],
)
def test_batch_bad_parameters_are_a_400_with_a_json_error(make_service, query, message):
    service = make_service()
    publish(service, 0, 3)
    status, body = get(service, f"/ws/v1/events/batch?{query}")
    assert status == 400
    assert body["status_code"] == 400
    assert message in body["message"]
    assert body["description"]


def test_unknown_paths_and_methods(make_service):
    service = make_service()
    status, body = get(service, "/ws/v1/nope")
    assert (status, body["status_code"]) == (404, 404)
    request = urllib.request.Request(service.server.url + "/ws/v1/events/batch", method="POST", data=b"")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=10)
    assert err.value.code == 405


def test_healthz_follows_the_publisher(make_service):
    service = make_service()
    status, body = get(service, "/healthz")
    assert (status, body["publisher"]) == (200, "running")
    service.publisher.stop()
    status, body = get(service, "/healthz")
    assert (status, body["publisher"]) == (503, "stopped")


def test_healthz_names_what_its_checks_find_wrong(make_service):
    service = make_service()
    problems = [""]
    service.server.health_checks.append(lambda: problems[0])
    assert get(service, "/healthz")[0] == 200
    problems[0] = "no run finished for 200 s (runs every 60 s): hung"
    status, body = get(service, "/healthz")
    assert (status, body["problems"]) == (503, ["no run finished for 200 s (runs every 60 s): hung"])


def test_the_client_pages_through_history_and_reports_overwritten_events(make_service):
    service = make_service(rest_response_size=3, ring_capacity=10)
    publish(service, 0, 15)
    client = EventClient(service.server.url)
    assert [r.id for r in client.history(None)] == list(range(5, 15))
    items = list(client.history(2))
    assert isinstance(items[0], StreamEnded)
    assert items[0].description == "2..4 are gone"
    assert [r.id for r in items[1:]] == list(range(5, 15))


# --- stream ------------------------------------------------------------------------------


def test_stream_sends_history_then_live_events_in_order(make_service):
    service = make_service()
    publish(service, 0, 5)
    with EventClient(service.server.url, timeout=10).stream(count=3) as stream:
        assert stream.header.instance_uuid == service.ring.instance_uuid
        assert (stream.header.lowest_id, stream.header.highest_id, stream.header.history_from_id) == (0, 4, 2)
        items = iter(stream)
        assert [next(items).id for _ in range(3)] == [2, 3, 4]
        publish(service, 5, 3)
        assert [next(items).id for _ in range(3)] == [5, 6, 7]


def test_stream_history_is_as_much_as_is_kept_never_none(make_service):
    service = make_service(ring_capacity=10)
    publish(service, 0, 25)
    with EventClient(service.server.url, timeout=10).stream(count=1_000_000) as stream:
        items = iter(stream)
        assert [next(items).id for _ in range(10)] == list(range(15, 25))


def test_stream_never_interleaves_or_skips_while_events_keep_coming(make_service):
    service = make_service(ring_capacity=5000)
    publish(service, 0, 200)
    stop = threading.Event()
    got: list[int] = []

    def keep_publishing() -> None:
        # Stay at most 500 events ahead of the reader: a loaded machine must not
        # turn this test of ordering into one of the 1,000-event slow-consumer limit.
        n = 200
        while not stop.is_set() and n < 20_000:
            if n - (got[-1] if got else 199) > 500:
                time.sleep(0.001)
                continue
            service.publisher.publish(event(n))
            n += 1
            if n % 50 == 0:
                time.sleep(0.001)

    publisher = threading.Thread(target=keep_publishing)
    publisher.start()
    try:
        with EventClient(service.server.url, timeout=10).stream(count=100) as stream:
            first = stream.header.history_from_id
            for item in stream:
                if isinstance(item, Heartbeat):
                    continue
                assert not isinstance(item, StreamEnded), item
                got.append(item.id)
                if len(got) == 1500:
                    break
    finally:
        stop.set()
        publisher.join()
    assert got == list(range(first, first + 1500))


def test_an_idle_stream_gets_heartbeats(make_service):
    service = make_service(stream_heartbeat_seconds=0.2)
    publish(service, 0, 2)
    with EventClient(service.server.url, timeout=10).stream(count=5) as stream:
        items = iter(stream)
        assert [next(items).id for _ in range(2)] == [0, 1]
        beat = next(items)
        assert isinstance(beat, Heartbeat)
        assert beat.last_id == 1


def test_stream_bad_count_is_a_400(make_service):
    service = make_service()
    status, body = get(service, "/ws/v1/events/stream?count=-3")
    assert (status, body["status_code"]) == (400, 400)


def test_stream_limits_per_client_and_in_total_are_a_503(make_service):
    service = make_service(stream_max_per_client=2, stream_max_total=3)
    client = EventClient(service.server.url, timeout=10)
    first, second = client.stream(), client.stream()
    try:
        status, body = get(service, "/ws/v1/events/stream")
        assert status == 503
        assert "limit per client is 2" in body["description"]
        second.close()
        deadline = time.monotonic() + 10
        while service.server.slots.total > 1 and time.monotonic() < deadline:
            time.sleep(0.02)  # the server notices the closed stream at its next write
            publish(service, 0, 1)
        third = client.stream()
        third.close()
    finally:
        first.close()


def test_stream_limit_in_total(make_service):
    service = make_service(stream_max_per_client=5, stream_max_total=1)
    with EventClient(service.server.url, timeout=10).stream():
        status, body = get(service, "/ws/v1/events/stream")
        assert status == 503
        assert "the limit is 1" in body["description"]


def test_a_client_that_stops_reading_is_sent_an_error_and_dropped(make_service):
    service = make_service(stream_buffer_size=50, stream_write_timeout_seconds=30)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", service.server.port))
    sock.sendall(b"GET /ws/v1/events/stream HTTP/1.0\r\n\r\n")
    deadline = time.monotonic() + 10
    while service.publisher.streams == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    # The client reads nothing: socket buffers fill, the server's writer blocks, then the
    # subscriber's 50-event buffer overflows and the publisher cuts it off. Nothing else waits.
    n = 0
    while service.publisher.streams_cut == 0 and time.monotonic() < deadline:
        publish(service, n, 500)
        n += 500
    assert service.publisher.streams_cut == 1
    assert service.publisher.streams == 0
    # Now the client reads: everything it was sent, contiguous, then the error line, then EOF.
    sock.settimeout(20)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    lines = [json.loads(line) for line in data.split(b"\r\n\r\n", 1)[1].splitlines()]
    header, events, last = lines[0], lines[1:-1], lines[-1]
    assert header["HighestID"] == -1
    assert [e["id"] for e in events] == list(range(len(events)))
    assert last["Error"]["message"] == "slow consumer"
    assert last["NextID"] == len(events)
    assert len(events) < n
    # the autoscaler side lost nothing
    assert service.publisher.dropped == 0
    assert len(service.ring) == n


def connect(service: EventService, source: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", service.server.port), timeout=10, source_address=(source, 0))


def read_to_end(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    return data


def test_idle_connections_are_capped_and_let_go_and_the_api_answers_again(make_service):
    service = make_service()
    service.server.connections = ConnectionLimits(max_total=4, max_per_client=3, timeout_seconds=3.0)
    idle = [connect(service, "127.0.0.1") for _ in range(3)]  # connected, sending nothing
    # a fourth from the same address is refused with a 503, not left waiting behind them
    refused = read_to_end(connect(service, "127.0.0.1"))
    assert refused.startswith(b"HTTP/1.0 503")
    assert b"127.0.0.1 has 3 connections open, the limit per client is 3" in refused
    idle.append(connect(service, "127.0.0.2"))  # another address still gets in, up to the total
    refused = read_to_end(connect(service, "127.0.0.3"))
    assert b"4 connections are open, the limit is 4" in refused
    # the idle peers are let go after the timeout (not the client's 10): the server closes them
    assert [read_to_end(sock) for sock in idle] == [b""] * 4
    deadline = time.monotonic() + 5
    while service.server.connection_slots.total and time.monotonic() < deadline:
        time.sleep(0.01)
    assert service.server.connection_slots.total == 0
    assert get(service, "/healthz")[0] == 200
    assert get(service, "/ws/v1/events/batch")[0] == 200


def test_a_client_that_stops_reading_an_answer_is_let_go(make_service):
    service = make_service(rest_response_size=100_000)
    publish(service, 0, 100_000)
    service.server.connections = ConnectionLimits(timeout_seconds=1.0)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", service.server.port))
    sock.sendall(b"GET /ws/v1/events/batch HTTP/1.0\r\n\r\n")  # about 15 MB, never read
    slots = service.server.connection_slots
    deadline = time.monotonic() + 10
    while slots.total == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert slots.total == 1  # being answered
    while slots.total and time.monotonic() < deadline:
        time.sleep(0.05)
    assert slots.total == 0  # the thread that was writing is free again
    sock.close()
    assert get(service, "/healthz")[0] == 200


def test_server_stop_ends_streams_with_a_line_saying_so(make_service):
    service = make_service()
    stream = EventClient(service.server.url, timeout=10).stream()
    service.server.stop()
    items = list(stream)
    assert isinstance(items[-1], StreamEnded)
    assert items[-1].message == "server shutting down"
    stream.close()


# --- type filters: applied before count and last ---------------------------------------------


def pool_event(n: int) -> Event:
    return Event(EventType.POOL, ChangeType.NONE, ChangeDetail.POOL_PAUSE, n, "pool", message=f"pause {n}")


def publish_mixed(service: EventService, total: int, pool_every: int) -> list[int]:
    """``total`` events, every ``pool_every``-th a POOL event; returns the POOL events' ids."""
    pools = []
    for n in range(total):
        is_pool = n % pool_every == 0
        assert service.publisher.publish(pool_event(n) if is_pool else event(n))
        if is_pool:
            pools.append(n)
    assert service.publisher.flush(10)
    return pools


def test_batch_filters_by_type_before_counting(make_service):
    service = make_service(rest_response_size=4)
    pools = publish_mixed(service, 100, 10)  # POOL events 0, 10, ..., 90
    status, body = get(service, "/ws/v1/events/batch?type=POOL&last=3")
    assert status == 200
    assert record_ids(body) == pools[-3:]
    assert (body["LowestID"], body["HighestID"]) == (0, 99)
    _, body = get(service, "/ws/v1/events/batch?type=pool,node&start=38&count=3")
    assert record_ids(body) == [38, 39, 40]
    _, body = get(service, "/ws/v1/events/batch?type=POOL&start=11")
    assert record_ids(body) == [20, 30, 40, 50]  # capped at rest_response_size, counting POOL events only
    _, body = get(service, "/ws/v1/events/batch?type=ERROR&last=3")
    assert record_ids(body) == []
    _, body = get(service, "/ws/v1/events/batch?last=2")
    assert record_ids(body) == [98, 99]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("type=WIBBLE", "unknown event type 'WIBBLE'"),
        ("type=POOL&type=NODE", "type is given 2 times"),
        ("last=0", "last must be at least 1"),
        ("last=2&start=1", "start and last given together"),
    ],
)
def test_batch_bad_filters_are_a_400(make_service, query, message):
    service = make_service()
    status, body = get(service, f"/ws/v1/events/batch?{query}")
    assert status == 400
    assert message in body["message"]


def test_stream_filters_history_and_live_events(make_service):
    service = make_service()
    pools = publish_mixed(service, 60, 10)
    with EventClient(service.server.url, timeout=10).stream(count=2, types={EventType.POOL}) as stream:
        assert stream.header.history_from_id == pools[-2]
        items = iter(stream)
        assert [next(items).id for _ in range(2)] == pools[-2:]
        for n in range(60, 75):
            service.publisher.publish(pool_event(n) if n % 5 == 0 else event(n))
        assert service.publisher.flush(10)
        assert [next(items).id for _ in range(3)] == [60, 65, 70]


def test_the_client_reads_the_newest_of_a_type_across_pages(make_service):
    service = make_service(rest_response_size=2)
    pools = publish_mixed(service, 100, 10)
    client = EventClient(service.server.url)
    assert [r.id for r in client.newest(5, {EventType.POOL})] == pools[-5:]
    assert [r.id for r in client.history(None, types={EventType.POOL})] == pools


def test_a_peer_that_resets_mid_request_is_no_traceback_on_stderr(make_service, capfd):
    """A client that leaves mid-request (killed, a proxy's reset) is routine: logged at debug, never
    a multi-line traceback on the autoscaler's stderr."""
    service = make_service()
    host, port = service.server.url.removeprefix("http://").split(":")
    peers = []
    for _ in range(5):
        peer = socket.create_connection((host, int(port)), timeout=5)
        peers.append(peer.getsockname())
        peer.sendall(b"GET /api/v1/events?count=1 HT")  # half a request line
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        peer.close()  # with linger 0: a reset
    time.sleep(0.5)
    assert get(service, "/healthz")[0] == 200  # still serving
    # socketserver's traceback names the peer; another test's server left in this worker may print its own
    err = capfd.readouterr().err
    assert not [p for p in peers if f"Exception occurred during processing of request from {p}" in err], err
