"""The recorder's Prometheus metrics, not kept: a simulation has no one scraping it.

The cycle records through ``events.recorder.Recorder``, which updates ``AutoscalerMetrics`` with
every event; in a simulation those gauges would be set tens of thousands of times for nobody, at a
few microseconds a label lookup. Every method that updates them is a no-op here (a test checks
that none is missed); the events themselves still go to the recorder's publisher.
"""

from __future__ import annotations

from typing import Any

from clusterman.events.exporter import AutoscalerMetrics

UPDATES = (
    "observe_run",
    "observe_decision",
    "observe_group",
    "forget_group",
    "observe_nodes",
    "observe_tasks",
    "observe_node_action",
    "observe_signal",
    "set_scale_lock",
    "set_breaker",
    "set_paused",
    "observe_error",
    "observe_config_reload",
    "set_signal_fallbacks",
    "set_signal_versions_disk",
    "set_unwritable",
    "observe_overrun",
    "set_lease",
    "observe_evictions",
    "observe_consolidation",
    "observe_notice",
    "observe_drain",
    "observe_migration",
    "observe_migration_nodes",
)


class QuietMetrics(AutoscalerMetrics):
    pass


def _ignore(self: AutoscalerMetrics, *args: Any, **kwargs: Any) -> None:
    """A simulation keeps no Prometheus metrics."""


for _name in UPDATES:
    setattr(QuietMetrics, _name, _ignore)
