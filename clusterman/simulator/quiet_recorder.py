"""The cycle's recorder, keeping no events: a simulation has no one reading them.

The cycle records each signal answer, decision, node action and target change through
``events.recorder.Recorder``; a simulation would build every one of those events (messages
formatted, amounts converted) each simulated minute, into a queue nothing ever drains. Every
method that records is a no-op here (a test checks that none is missed); the metrics are
``QuietMetrics``, which keep nothing either.
"""

from __future__ import annotations

from typing import Any

from clusterman.events.publisher import EventPublisher
from clusterman.events.recorder import Recorder
from clusterman.events.ring import EventRing
from clusterman.simulator.quiet_metrics import QuietMetrics

RECORDS = (
    "signal_evaluated",
    "signal_failed",
    "decision",
    "group_target",
    "node",
    "consolidated",
    "evicted",
    "drain",
    "notice",
    "migration",
    "migration_progress",
    "lock_taken",
    "lock_released",
    "breaker_opened",
    "breaker_closed",
    "paused",
    "resumed",
    "config_reloaded",
    "config_rejected",
    "run_took",
    "overrun",
    "error",
)


class QuietRecorder(Recorder):
    def __init__(self, cluster: str, pool: str) -> None:
        # a publisher that is never started and never published to: the recorder's type asks for one
        super().__init__(EventPublisher(EventRing(1), queue_size=1), QuietMetrics(cluster, pool), pool)


def _ignore(self: Recorder, *args: Any, **kwargs: Any) -> None:
    """A simulation keeps no events."""


for _name in RECORDS:
    setattr(QuietRecorder, _name, _ignore)
