"""A signal answering 1e308 cpus is refused as garbage, as a NaN is, with a real autoscaler and runners.

1e308 is a finite number, so the wire took it: the target jumped to ``max_capacity`` in one run
and the line printed a 309-digit demand. Now an answer over 100 times what the pool holds at its
max is refused: the app falls back to the default signal, the line says why in a few words, and
the pool stays as the default signal's demand has it.
"""

from __future__ import annotations

from itests.aws_world import World
from itests.faults.autoscaler_procs import POOL
from itests.faults.autoscaler_procs import Autoscaler
from itests.faults.autoscaler_procs import acted
from itests.faults.autoscaler_procs import app_signal_config
from itests.faults.autoscaler_procs import start_runner

HUGE = """

class Huge(BaseSignal):
    def value(self, metrics, timestamp):
        return SignalResources(cpus=1e308)
"""


def test_an_answer_of_1e308_cpus_falls_back_to_the_default_signal(tmp_path, moto_server):
    world = World(moto_server.url)
    world.asg(POOL, desired=1)
    config, namespace, app, signals = app_signal_config(tmp_path, world.cluster, moto_server.url, "Huge", HUGE)
    runners = [start_runner(signals, namespace, "__default__"), start_runner(signals, namespace, app, "Huge")]
    autoscaler = Autoscaler(config, world.cluster, "--period-seconds", "1", "--no-splay")
    try:
        # nodes of 2 cpus, max_capacity 10: at most 2,000 cpus; Steady asks 1 cpu: 50% of one node
        shown = f"(app {app} on the default signal: cpus=1e+308 is over 2000, 100 times the pool at max_capaci"
        at = 0.0
        for _ in range(3):
            at, line = autoscaler.wait_for(lambda x: shown in x and acted(x), timeout=60, after=at + 1e-6)
            assert "demand cpus=1.0 " in line and "| target 1 -> 1 |" in line, line
        assert not any("demand cpus=1e" in x or len(x) > 2000 for x in autoscaler.lines())
    finally:
        autoscaler.stop()
        for proc in runners:
            proc.kill()
            proc.wait()
