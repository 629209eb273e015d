"""The loop around the cycle: a stable splay, the run grid, and surviving a run that fails."""

import gc
import itertools
import threading

from clusterman.batch.autoscaler import next_run_time
from clusterman.batch.autoscaler import run_forever
from clusterman.batch.autoscaler import splay_seconds
from clusterman.events.exporter import AutoscalerMetrics
from clusterman.events.publisher import EventPublisher
from clusterman.events.recorder import Recorder
from clusterman.events.ring import EventRing
from clusterman.run.report import Outcome
from clusterman.run.report import RunReport


def test_splay_is_stable_and_spreads_pools():
    assert splay_seconds("norcal", "batch", 600) == splay_seconds("norcal", "batch", 600)
    spread = {splay_seconds("norcal", f"pool{i}", 600) for i in range(50)}
    assert len(spread) > 40 and all(0 <= s < 600 for s in spread)


def test_next_run_time_is_on_the_grid():
    assert next_run_time(1000, 60, 7) == 1027
    assert next_run_time(1027, 60, 7) == 1027
    assert next_run_time(1028, 60, 7) == 1087


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class SleepyStop(threading.Event):
    """A stop event whose waits move the fake clock instead of sleeping."""

    def __init__(self, clock):
        super().__init__()
        self.clock = clock

    def wait(self, timeout=None):
        self.clock.now += timeout or 0
        return self.is_set()


class FlakyCycle:
    def __init__(self, recorder):
        self.recorder = recorder
        self.runs = []

    def run_once(self, now):
        self.runs.append(now)
        if len(self.runs) == 2:
            raise RuntimeError("a bug in run two")
        return RunReport(now, Outcome.ACTED)


def test_a_failing_run_is_recorded_and_the_loop_goes_on():
    ring = EventRing(100)
    publisher = EventPublisher(ring)
    publisher.start()
    recorder = Recorder(publisher, AutoscalerMetrics("c", "p"), "p")
    cycle = FlakyCycle(recorder)
    clock = FakeClock()
    runs = run_forever(cycle, recorder, 60, 7, SleepyStop(clock), clock=clock, monotonic=clock, max_runs=4)
    assert runs == 4
    assert cycle.runs == [1027, 1087, 1147, 1207]  # on the grid, one per period
    publisher.flush()
    messages = [r.event.message for r in ring.read(0, 100).records]
    publisher.stop()
    assert any("a bug in run two" in m for m in messages)


class SeenCycle:
    """A cycle that notes each run and each full garbage collection, in order."""

    def __init__(self):
        self.seen = []

    def run_once(self, now):
        self.seen.append("run")
        return RunReport(now, Outcome.ACTED)

    def collected(self, phase, info):
        if phase == "start" and info["generation"] == 2:
            self.seen.append("full collection")


def test_a_full_collection_is_made_between_runs_not_left_to_fall_in_one():
    ring = EventRing(100)
    recorder = Recorder(EventPublisher(ring), AutoscalerMetrics("c", "p"), "p")
    cycle = SeenCycle()
    clock = FakeClock()
    gc.callbacks.append(cycle.collected)
    try:
        run_forever(cycle, recorder, 60, 7, SleepyStop(clock), clock=clock, monotonic=clock, max_runs=3)
    finally:
        gc.callbacks.remove(cycle.collected)
    runs = [i for i, seen in enumerate(cycle.seen) if seen == "run"]
    assert len(runs) == 3
    between = [cycle.seen[a + 1 : b] for a, b in itertools.pairwise(runs)]
    assert all("full collection" in seen for seen in between), cycle.seen
