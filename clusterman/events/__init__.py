"""Event history and observability: what the autoscaler did and why, in bounded memory.

``record`` (the event and its enumerations) · ``ring`` (bounded history) · ``publisher``
(non-blocking hand-off, live subscribers) · ``exporter`` (Prometheus metrics) · ``recorder``
(one call per autoscaler action) · ``http`` (REST, stream, /metrics) · ``client`` (the API's
client, used by ``clusterman events``) · ``service`` (wires them from the ``events:`` config).
"""
