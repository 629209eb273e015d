"""docs/events.md's code for the autoscaler loop runs as written, against real objects."""

import re
from pathlib import Path

from clusterman.core.config import EventsConfig
from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.core.model import Node
from clusterman.core.model import NodeState as SchedulerNodeState
from clusterman.core.resources import ResourceRequest
from clusterman.core.resources import Resources
from clusterman.events.event import ChangeDetail
from clusterman.events.event import EventType

DOC = Path(__file__).resolve().parents[1] / "docs" / "events.md"


def loop_sample() -> str:
    text = DOC.read_text()
    section = text[text.index("### For the autoscaler loop") :]
    return re.search(r"```python\n(.*?)\n```", section, re.DOTALL).group(1)


class _Main:
    events = EventsConfig(port=0)


def test_the_loop_sample_runs_and_records_what_it_says():
    node = Node("i-0abc", SchedulerNodeState.READY, Resources(cpus=4, mem=16000), group_id="asg-web-a")
    names = {
        "main_config": _Main(),
        "new_main_config": _Main(),
        "identity": PoolIdentity("norcal", "web", Scheduler.KUBERNETES),
        "app": "web",
        "request": ResourceRequest(cpus=10),
        "seconds": 0.02,
        "demand": {"cpus": 10.0},
        "capacity": {"cpus": 12.0},
        "node": node,
    }
    exec(compile(loop_sample(), str(DOC), "exec"), names)  # the sample stops the service at its end
    ring = names["events"].ring
    records = ring.read(None, 100).records
    assert [r.event.type for r in records] == [EventType.SIGNAL, EventType.DECISION, EventType.NODE]
    assert records[1].event.detail is ChangeDetail.DECISION_UTILISATION
    tainted = records[2].event
    assert (tainted.object_id, tainted.reference_id) == ("i-0abc", "asg-web-a")
    assert dict(tainted.resource)["cpus"] == 4.0
