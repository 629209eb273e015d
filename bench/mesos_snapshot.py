"""A Mesos pool read from the master's state endpoints, for 1,000 / 3,000 agents × 30 tasks.

The figures behind docs/cluster.md's "Why not SUBSCRIBE" (docs/measured_speed.md): what one run's two GETs
(``/master/slaves``, ``/master/frameworks``) cost the connector, with agents and tasks shaped as
the recorded fixtures (1.5 KB an agent, 0.6 KB a task, with statuses), served on loopback. Next to
it, in the same run, ``json.loads`` of the same answers: the least any reader of them pays.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from bench._memory import peak_rss_mb
from bench._memory import reset_peak
from bench._memory import rss_mb
from bench._timing import best_of
from clusterman.cluster.mesos import MesosConnector
from clusterman.cluster.mesos import MesosPool

TASKS_PER_AGENT = 30
FIXTURES = Path(__file__).parent.parent / "itests" / "fixtures" / "mesos"


def answers(agents: int) -> tuple[dict[str, Any], dict[str, Any]]:
    slaves = json.loads((FIXTURES / "slaves.json").read_text())
    frameworks = json.loads((FIXTURES / "frameworks.json").read_text())
    agent = slaves["slaves"][0]
    task = frameworks["frameworks"][0]["tasks"][0]
    framework = {k: v for k, v in frameworks["frameworks"][0].items() if k != "tasks"}
    made, tasks = [], []
    for i in range(agents):
        a = copy.deepcopy(agent)
        a["id"], a["hostname"] = f"agent-{i}", f"10.0.{i >> 8 & 255}.{i & 255}"
        a["pid"] = f"slave(1)@{a['hostname']}:5051"
        made.append(a)
        for j in range(TASKS_PER_AGENT):
            t = copy.deepcopy(task)
            t["id"], t["slave_id"] = f"task-{i}-{j}", a["id"]
            tasks.append(t)
    return {"slaves": made, "recovered_slaves": []}, {"frameworks": [{**framework, "tasks": tasks}]}


def measure(agents: int) -> dict[str, Any]:
    from itests.recorded_api import recorded_api

    before = rss_mb()
    fresh = reset_peak()  # else the peak is this process's since it started
    slaves, frameworks = answers(agents)
    text = json.dumps(slaves).encode(), json.dumps(frameworks).encode()
    with recorded_api() as api:
        api.serve("/master/slaves", text[0])
        api.serve("/master/frameworks", text[1])
        connector = MesosConnector(MesosPool(str(slaves["slaves"][0]["attributes"]["pool"])), api.url)
        run = best_of(lambda: connector.scheduler_view(0.0), 3)
        connector.close()
    decode = best_of(lambda: [json.loads(t) for t in text], 3)
    return {
        "agents": agents,
        "tasks": agents * TASKS_PER_AGENT,
        "mb_per_run": round(sum(map(len, text)) / 1e6, 1),
        "run_seconds": round(run, 3),
        "json_loads_seconds": round(decode, 3),
        "ratio_to_json_loads": round(run / decode, 2),
        "rss_before_mb": round(before),
        "peak_rss_mb": round(peak_rss_mb()),
        "peak_is_this_measurement": fresh,
    }


def run(quick: bool) -> dict[str, Any]:
    return {"sizes": [measure(n) for n in ([300] if quick else [1000, 3000])]}
