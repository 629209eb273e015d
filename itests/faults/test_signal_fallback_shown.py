"""A signal that raises is seen where people look, with a real autoscaler and real runners.

It used to be nearly invisible: the decision line showed only the fallback demand, ``clusterman
status`` said ``autoscaler health: ok``, and the runner dropped the traceback. Now the line says
which app fell back and why, ``status`` shows each signal's last outcome and ``degraded``, and the
runner logs the signal's traceback (file and line) once for the same error at every run.
"""

from __future__ import annotations

import json
import re

from clusterman.cli.main import main
from itests.aws_world import World
from itests.faults.autoscaler_procs import POOL
from itests.faults.autoscaler_procs import Autoscaler
from itests.faults.autoscaler_procs import app_signal_config
from itests.faults.autoscaler_procs import start_runner

BROKEN = """

class Broken(BaseSignal):
    def value(self, metrics, timestamp):
        per_task = 1.0 / len(metrics)  # no metrics configured: ZeroDivisionError
        return SignalResources(cpus=per_task)
"""
CAUSE = "value() raised ZeroDivisionError: float division by zero"


def test_a_raising_signal_shows_in_the_line_in_status_and_in_the_runners_log(tmp_path, moto_server, capsys):
    world = World(moto_server.url)
    world.asg(POOL, desired=1)
    config, namespace, app, signals = app_signal_config(tmp_path, world.cluster, moto_server.url, "Broken", BROKEN)
    runner_log = (tmp_path / "runner.log").open("w+b")
    runners = [
        start_runner(signals, namespace, "__default__"),
        start_runner(signals, namespace, app, "Broken", runner_log),
    ]
    autoscaler = Autoscaler(config, world.cluster, "--period-seconds", "2", "--no-splay")
    try:
        shown = f"(app {app} on the default signal: {CAUSE}) |"
        seen = 0.0
        for _ in range(3):  # three runs, each line printed after the one before
            seen = autoscaler.wait_for(lambda line: shown in line, timeout=60, after=seen + 1e-6)[0]
        url = re.search(r"events and /metrics on (http://\S+)", autoscaler.stderr())
        assert url, autoscaler.stderr()
        pool = ["--env-config-path", config, "status", "--cluster", world.cluster, "--pool", POOL,
                "--scheduler", "simulated", "--events-url", url[1]]  # fmt: skip

        assert main(pool) == 3  # degraded
        lines = capsys.readouterr().out.splitlines()
        assert "signals (last run):" in lines, lines
        failed = f"  app {app}: {namespace}.Broken failed, on {namespace}.Steady since "
        assert [line for line in lines if line.startswith(failed) and line.endswith(f": {CAUSE}")], lines
        health = lines[-1]
        assert health.startswith(f"autoscaler health: degraded: app {app}: {namespace}.Broken failed"), lines

        assert main([*pool, "--json"]) == 3
        doc = json.loads(capsys.readouterr().out)
        assert doc["autoscaler_health"]["state"] == "degraded"
        [outcome] = doc["signals"]["outcomes"]
        assert outcome | {"since": ""} == {
            "app": app, "signal": f"{namespace}.Broken", "outcome": "fallback",
            "answered_by": f"{namespace}.Steady", "cause": CAUSE, "since": "",
        }  # fmt: skip
    finally:
        autoscaler.stop()
        for proc in runners:
            proc.kill()
            proc.wait()
    runner_log.seek(0)
    log = runner_log.read().decode()
    runner_log.close()
    assert log.count(f"ERROR {namespace}.Broken for {app}: {CAUSE}") >= 3, log
    assert log.count("the signal's traceback") == 1, log  # the same error at every run: once
    module = signals / "clusterman_signals" / namespace / "__init__.py"
    line = (
        module.read_text()
        .splitlines()
        .index("        per_task = 1.0 / len(metrics)  # no metrics configured: ZeroDivisionError")
        + 1
    )
    assert f'File "{module}", line {line}, in value\n    per_task = 1.0 / len(metrics)' in log, log
