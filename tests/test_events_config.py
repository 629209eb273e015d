import pytest

from clusterman.config import ConfigError
from clusterman.config import load_main_config
from clusterman.core.config import EventsConfig
from clusterman.events.event import ChangeDetail
from clusterman.events.event import ChangeType
from clusterman.events.event import Event
from clusterman.events.event import EventType
from clusterman.events.service import EventService


def main_config(tmp_path, text):
    path = tmp_path / "clusterman.yaml"
    path.write_text(text)
    return load_main_config(path)


def test_defaults():
    events = EventsConfig()
    assert (events.ring_capacity, events.rest_response_size) == (100_000, 10_000)
    assert events.host == "127.0.0.1"
    assert (events.stream_max_total, events.stream_max_per_client, events.stream_buffer_size) == (100, 15, 1000)


def test_events_block_with_yunikorn_spellings(tmp_path):
    config = main_config(tmp_path, "events:\n  ringBufferCapacity: 500\n  RESTResponseSize: 50\n  port: 0\n")
    assert (config.events.ring_capacity, config.events.rest_response_size, config.events.port) == (500, 50, 0)


@pytest.mark.parametrize(
    ("block", "error"),
    [
        ("port: 70000", "events.port: must be a TCP port"),
        ("ring_capacity: 0", "events.ring_capacity: must be greater than 0"),
        ("stream_heartbeat_seconds: -1", "events.stream_heartbeat_seconds: must be greater than 0"),
        ("ring_size: 10", "events.ring_size: unknown key"),
        ("ring_capacity: 10\n  ringBufferCapacity: 20", "given twice"),
    ],
)
def test_bad_events_blocks_name_the_key(tmp_path, block, error):
    with pytest.raises(ConfigError, match=error):
        main_config(tmp_path, f"events:\n  {block}\n")


def test_reload_resizes_and_applies_limits_but_not_the_address():
    service = EventService(EventsConfig(ring_capacity=10, port=0), "c", "p")
    for n in range(10):
        service.publisher.publish(Event(EventType.POOL, ChangeType.NONE, ChangeDetail.POOL_PAUSE, n, "p"))
    service.publisher.drain()
    waiting = service.reload(
        EventsConfig(ring_capacity=4, port=9999, rest_response_size=3, stream_max_total=2, publish_queue_size=7)
    )
    assert waiting == ["events.port"]
    assert [r.id for r in service.ring.read(None, 100).records] == [6, 7, 8, 9]
    assert service.server.rest_response_size == 3
    assert service.server.limits.max_total == 2
    assert service.publisher.queue_size == 7
    assert service.config.port == 0  # what is in effect until a restart
    assert service.reload(service.config) == []
