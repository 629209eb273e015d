"""``clusterman events`` against a real event server."""

import json
import os
import subprocess
import sys
import time

import pytest

from clusterman.cli.main import main
from clusterman.core.config import EventsConfig
from clusterman.core.resources import ResourceRequest
from clusterman.core.resources import Resources
from clusterman.events.client import EventClient
from clusterman.events.event import ChangeDetail
from clusterman.events.event import ChangeType
from clusterman.events.event import Event
from clusterman.events.event import EventType
from clusterman.events.exporter import NodeAction
from clusterman.events.service import EventService
from clusterman.local.moto_server import free_port
from clusterman.wiring.pool_status import last_decisions


@pytest.fixture
def service():
    service = EventService(EventsConfig(port=0, ring_capacity=50, rest_response_size=7), "c", "p.simulated").start()
    yield service
    service.stop()


def scale_up(service: EventService, nodes: int) -> None:
    rec = service.recorder
    rec.signal_evaluated("web", "Sig@v1", ResourceRequest(cpus=10), 0.02)
    for n in range(nodes):
        rec.node(NodeAction.TAINT, f"i-{n}", "asg-a", Resources(cpus=4, mem=8000), "oldest first")
    rec.lock_taken(300, "after scale-up")
    assert service.publisher.flush(10)


def run(capsys, *args: str) -> tuple[int, list[str], str]:
    status = main(["events", *args])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err


def test_prints_one_line_per_event_across_pages(service, capsys):
    scale_up(service, 10)  # 12 events, 7 per page
    status, lines, err = run(capsys, "--url", service.server.url)
    assert (status, err) == (0, "")
    assert len(lines) == 12
    assert " SIGNAL " in lines[0] and "web (Sig@v1) cpus=10: answered in 20 ms" in lines[0]
    assert lines[1].split()[1:6] == ["1", "NODE", "SET", "NODE_TAINT", "i-0"]
    assert lines[1].endswith("(asg-a) cpus=4 mem=8000 disk=0 gpus=0: oldest first")
    assert "LOCK_TAKEN" in lines[-1]


def test_type_filter_since_last_and_json(service, capsys):
    scale_up(service, 10)
    _, lines, _ = run(capsys, "--url", service.server.url, "--type", "signal,lock")
    assert [line.split()[2] for line in lines] == ["SIGNAL", "LOCK"]
    _, lines, _ = run(capsys, "--url", service.server.url, "--since", "9", "--json")
    assert [json.loads(line)["id"] for line in lines] == [9, 10, 11]
    _, lines, _ = run(capsys, "--url", service.server.url, "--last", "2", "--json")
    assert [json.loads(line)["eventChangeDetail"] for line in lines] == ["NODE_TAINT", "LOCK_TAKEN"]


def test_last_counts_only_the_types_asked_for(service, capsys):
    """--type LOCK --last 2: the 2 newest LOCK events, not the LOCK events among the 2 newest."""
    for _ in range(3):
        scale_up(service, 3)  # each: SIGNAL, 3 NODE, LOCK
    service.recorder.signal_evaluated("web", "Sig@v1", ResourceRequest(cpus=10), 0.02)
    assert service.publisher.flush(10)
    _, lines, _ = run(capsys, "--url", service.server.url, "--type", "LOCK", "--last", "2", "--json")
    assert [json.loads(line)["id"] for line in lines] == [9, 14]
    _, lines, _ = run(capsys, "--url", service.server.url, "--type", "node", "--since", "6", "--json")
    assert [json.loads(line)["id"] for line in lines] == [6, 7, 8, 11, 12, 13]


def test_overwritten_events_are_reported_not_skipped_silently(service, capsys):
    scale_up(service, 60)  # 62 events in a ring of 50: ids 12..61 kept
    status, lines, err = run(capsys, "--url", service.server.url, "--since", "5", "--json")
    assert status == 0
    assert "5..11 are gone" in err
    assert [json.loads(line)["id"] for line in lines] == list(range(12, 62))


def test_errors_are_one_line(service, capsys):
    status, _, err = run(capsys, "--url", service.server.url, "--type", "wibble")
    assert status == 1
    assert err.startswith("clusterman events: --type WIBBLE: unknown event type (known: UNKNOWN, SIGNAL")
    status, _, err = run(capsys, "--url", f"http://127.0.0.1:{free_port()}")
    assert status == 1
    assert err.startswith("clusterman events: cannot reach the event API at http://127.0.0.1:")
    assert len(err.splitlines()) == 1


def test_default_url_comes_from_the_main_config(service, capsys, tmp_path):
    config = tmp_path / "clusterman.yaml"
    config.write_text(f"events:\n  host: 0.0.0.0\n  port: {service.server.port}\n")
    scale_up(service, 1)
    status = main(["--env-config-path", str(config), "events", "--last", "1"])
    out, _ = capsys.readouterr()
    assert status == 0
    assert "LOCK_TAKEN" in out


def test_follow_prints_history_then_live_events(service):
    scale_up(service, 2)  # ids 0..3
    proc = subprocess.Popen(
        [sys.executable, "-m", "clusterman.cli.main", "events", "--url", service.server.url, "--follow", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        history = [json.loads(proc.stdout.readline())["id"] for _ in range(4)]
        deadline = time.monotonic() + 10
        while service.publisher.streams == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        scale_up(service, 3)  # ids 4..8, live
        live = [json.loads(proc.stdout.readline())["id"] for _ in range(5)]
        assert history + live == list(range(9))
        service.server.stop()  # the stream ends with a line saying so; the command exits 1
        assert proc.wait(10) == 1
        assert "server shutting down" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_follow_with_type_and_last(service):
    for _ in range(2):
        scale_up(service, 2)  # ids 0..3 and 4..7; LOCK at 3 and 7
    service.recorder.signal_evaluated("web", "Sig@v1", ResourceRequest(cpus=10), 0.02)  # id 8
    assert service.publisher.flush(10)
    proc = subprocess.Popen(
        [sys.executable, "-m", "clusterman", "events", "--url", service.server.url, "--follow", "--json",
         "--type", "LOCK", "--last", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert json.loads(proc.stdout.readline())["id"] == 7
        deadline = time.monotonic() + 10
        while service.publisher.streams == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        scale_up(service, 2)  # ids 9..12, LOCK at 12
        assert json.loads(proc.stdout.readline())["id"] == 12
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_status_finds_the_last_decisions_behind_many_other_events(service):
    """``clusterman status`` asks for the newest DECISION events, not for decisions among the newest events."""
    rec = service.recorder
    common = {"demand": {}, "capacity": {}, "utilisation": {"cpus": 0.5}, "setpoint": 0.7}
    rec.decision(ChangeDetail.DECISION_UTILISATION, 1, target=3, explanation="first", **common)
    rec.decision(ChangeDetail.DECISION_UTILISATION, 0, target=3, explanation="second", **common)
    service.reload(EventsConfig(port=service.server.port, ring_capacity=7000, rest_response_size=7))
    failed = Event(EventType.SIGNAL, ChangeType.NONE, ChangeDetail.SIGNAL_FAILED, 1, "web", "Sig@v1", (), "timeout")
    for _ in range(6000):
        service.publisher.publish(failed)
    assert service.publisher.flush(30)
    found = last_decisions(EventClient(service.server.url), "p.simulated", 2)
    assert [d.message.rsplit(": ", 1)[-1] for d in found] == ["first", "second"]


def test_no_match_is_said_not_silent(service, capsys):
    """``events --type pool`` with no such event printed nothing at all: a person could not tell an
    empty answer from a stuck command."""
    scale_up(service, 1)
    status, lines, err = run(capsys, "--url", service.server.url, "--type", "pool")
    assert (status, lines) == (0, [])
    assert err == "clusterman events: no events of type POOL kept by the autoscaler\n"
    status, lines, err = run(capsys, "--url", service.server.url, "--since", "1000")
    assert (status, lines, err) == (0, [], "clusterman events: no events from id 1000 on kept by the autoscaler\n")
