"""Everything behind the ``events:`` config block, wired together for one autoscaler process.

service = EventService(main_config.events, cluster="norcal", pool="web.kubernetes")
service.start()                      # publisher thread + HTTP server (see ``listen``)
service.recorder.node(NodeAction.TAINT, "i-0abc", "asg-web", node_size, "scale-down")
service.reload(new_main_config.events)
service.stop()
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from clusterman.core.config import EventsConfig
from clusterman.events.exporter import AutoscalerMetrics
from clusterman.events.http import EventServer
from clusterman.events.http import StreamLimits
from clusterman.events.publisher import EventPublisher
from clusterman.events.recorder import Recorder
from clusterman.events.ring import EventRing

log = logging.getLogger(__name__)


def stream_limits(config: EventsConfig) -> StreamLimits:
    return StreamLimits(
        max_total=config.stream_max_total,
        max_per_client=config.stream_max_per_client,
        buffer_size=config.stream_buffer_size,
        heartbeat_seconds=config.stream_heartbeat_seconds,
        write_timeout_seconds=config.stream_write_timeout_seconds,
    )


class EventService:
    def __init__(
        self, config: EventsConfig, cluster: str, pool: str, clock_ns: Callable[[], int] = time.time_ns
    ) -> None:
        self.config = config
        self.ring = EventRing(config.ring_capacity)
        self.publisher = EventPublisher(self.ring, config.publish_queue_size, config.stream_buffer_size)
        self.metrics = AutoscalerMetrics(cluster, pool, self.publisher)
        self.recorder = Recorder(self.publisher, self.metrics, pool, clock_ns)
        self.server = EventServer(
            self.publisher,
            self.metrics,
            host=config.host,
            port=config.port,
            rest_response_size=config.rest_response_size,
            limits=stream_limits(config),
        )
        self._refused = False  # the last try to listen failed (said once per outage)

    def start(self) -> EventService:
        self.publisher.start()
        self.listen()
        return self

    def listen(self) -> bool:
        """Serve the event API if it does not yet; whether it does. A port another process holds
        (a second autoscaler on the host, an old one still stopping) is one ERROR line, not the
        end of the autoscaler: events are still recorded, and each call tries again."""
        if self.server.listening:
            return True
        try:
            self.server.start()
        except OSError as e:
            if not self._refused:
                log.error(
                    "the event API cannot listen on %s:%d: %s (another autoscaler on this host?); "
                    "autoscaling goes on, and the API is tried again every run",
                    self.config.host, self.config.port, e.strerror or e,
                )  # fmt: skip
            self._refused = True
            return False
        self._refused = False
        return True

    def stop(self) -> None:
        self.server.stop()
        self.publisher.stop()

    def reload(self, config: EventsConfig) -> list[str]:
        """Apply a reloaded ``events`` block; return what waits for a restart (host, port)."""
        waiting = [f"events.{key}" for key in ("host", "port") if getattr(config, key) != getattr(self.config, key)]
        if config.ring_capacity != self.ring.capacity:
            self.publisher.resize(config.ring_capacity)
        self.publisher.queue_size = config.publish_queue_size
        self.publisher.stream_buffer_size = config.stream_buffer_size
        self.server.apply(config.rest_response_size, stream_limits(config))
        self.config = replace(config, host=self.config.host, port=self.config.port)  # what is in effect
        return waiting

    def __enter__(self) -> EventService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
