import json
import os
import socket
import uuid

from clusterman.signals.client import SignalAddress
from clusterman.tree.environment import SignalProcess
from clusterman.tree.liveness import WATCH_ENV
from clusterman.tree.liveness import Heartbeat
from clusterman.tree.liveness import LivenessRules
from clusterman.tree.liveness import crash_loop
from clusterman.tree.liveness import heartbeat_problem
from clusterman.tree.liveness import on_monotonic
from clusterman.tree.liveness import runner_unanswered_for
from clusterman.tree.liveness import stalled_for
from clusterman.tree.liveness import watch_problem
from clusterman.tree.liveness import write_watch
from clusterman.tree.process_tree import accepts_from

RULES = LivenessRules(stale_periods=3, start_grace_seconds=60, crash_starts=5, crash_window_seconds=300)


def test_no_heartbeat_means_nothing_is_judged():
    assert stalled_for(None, started_at=0, now=10_000, rules=RULES) is None


def test_stalled_after_n_periods_without_a_finished_run():
    beat = Heartbeat(finished_at=1000, period_seconds=60)
    assert stalled_for(beat, started_at=900, now=1000 + 180, rules=RULES) is None
    assert stalled_for(beat, started_at=900, now=1000 + 181, rules=RULES) == 181


def test_a_restarted_autoscaler_gets_the_grace_before_its_first_run():
    beat = Heartbeat(finished_at=1000, period_seconds=60)  # the previous process's last run
    assert stalled_for(beat, started_at=2000, now=2000 + 60 + 180, rules=RULES) is None
    assert stalled_for(beat, started_at=2000, now=2000 + 60 + 181, rules=RULES) == 241


def test_heartbeat_file(tmp_path):
    path = tmp_path / "beat.json"
    assert Heartbeat.read(path) is None
    path.write_text(json.dumps({"finished_at": 5.5, "period_seconds": 60}))
    assert Heartbeat.read(path) == Heartbeat(5.5, 60.0)
    for bad in ("{", json.dumps({"finished_at": 5}), json.dumps({"finished_at": 5, "period_seconds": 0})):
        path.write_text(bad)
        assert Heartbeat.read(path) is None
    beat = Heartbeat(5.5, 60.0, pid=7, monotonic=3.0, unworkable="state store /x/state.sqlite: /x is not a directory")
    beat.write(path)
    assert Heartbeat.read(path) == beat


def test_crash_loop_counts_starts_in_the_window_without_a_finished_run_between():
    def starts(*monotonic):
        return [(1e9 + t, t) for t in monotonic]  # the wall clock an arbitrary distance away

    now = (1e9 + 400, 400)
    assert crash_loop(starts(100, 200, 300, 400), now, RULES) == []
    assert crash_loop(starts(100, 200, 300, 350, 400), now, RULES) == starts(100, 200, 300, 350, 400)
    assert crash_loop(starts(10, 200, 300, 350, 400), now, RULES) == []  # the first is older than 300 s
    ran = Heartbeat(0.0, 10, pid=7, monotonic=250)  # a run finished after the second start: killed from outside
    assert crash_loop(starts(100, 200, 300, 350, 400), now, RULES, ran) == []
    assert crash_loop(starts(100, 200, 300, 350, 390, 400), now, RULES, ran) == []  # 4 since that run
    assert crash_loop(starts(260, 300, 350, 380, 400), now, RULES, ran) == starts(260, 300, 350, 380, 400)
    old = Heartbeat(1e9 + 250, 10)  # an older autoscaler's heartbeat: its wall clock
    assert crash_loop(starts(100, 200, 300, 350, 400), now, RULES, old) == []


def test_a_runner_silent_for_n_periods_counts_as_hung():
    beat = Heartbeat(1000.0, 60.0, {"web": (700.0, 1000.0)})
    assert runner_unanswered_for(beat, "web", started_at=0.0, now=880.0, rules=RULES) is None  # 3 periods: not yet
    assert runner_unanswered_for(beat, "web", started_at=0.0, now=881.0, rules=RULES) == 181.0
    assert runner_unanswered_for(beat, "batch", started_at=0.0, now=2000.0, rules=RULES) is None  # it answers
    assert runner_unanswered_for(None, "web", started_at=0.0, now=2000.0, rules=RULES) is None


def test_a_restarted_runner_is_judged_from_its_start_once_it_was_asked():
    beat = Heartbeat(1000.0, 60.0, {"web": (700.0, 1000.0)})
    assert runner_unanswered_for(beat, "web", started_at=900.0, now=1000.0, rules=RULES) is None
    assert runner_unanswered_for(beat, "web", started_at=900.0, now=1081.0, rules=RULES) == 181.0
    # not asked since its start (the autoscaler stands by): its last word is about the old runner
    assert runner_unanswered_for(beat, "web", started_at=1001.0, now=2000.0, rules=RULES) is None


def test_heartbeat_file_with_unanswered_signals(tmp_path):
    path = tmp_path / "heartbeat.json"
    path.write_text(
        json.dumps({"finished_at": 5.0, "period_seconds": 60, "unanswered": {"web": {"since": 3, "last": 5}}})
    )
    assert Heartbeat.read(path) == Heartbeat(5.0, 60.0, {"web": (3.0, 5.0)})
    path.write_text(json.dumps({"finished_at": 5.0, "period_seconds": 60, "unanswered": ["web"]}))
    assert Heartbeat.read(path) is None  # not one the autoscaler writes: wait for a good one


def test_the_watch_file_says_when_the_bootstrap_last_looked_at_the_tree(tmp_path):
    path = tmp_path / "watch.json"
    env = {WATCH_ENV: str(path)}
    assert watch_problem({}, 100.0) == ""  # no bootstrap: not judged
    assert watch_problem(env, 100.0) == ""  # not written yet
    write_watch(path, 100.0, 10.0)
    assert watch_problem(env, 135.0) == ""  # 3 polls and the margin
    assert watch_problem(env, 136.0) == (
        "the bootstrap has not looked at the tree for 36 s (polls every 10 s): stopped or hung"
    )
    write_watch(tmp_path / "no-such-dir" / "watch.json", 100.0, 10.0)  # logged, never raised


def test_a_stall_is_judged_on_the_monotonic_clock_when_the_heartbeat_gives_it(tmp_path):
    """The wall clock stepped an hour forward after the last run (NTP, an operator): the wall-clock
    rule sees an hour without a run; the monotonic one, the 30 s there were."""
    path = tmp_path / "beat.json"
    Heartbeat(1000.0, 60.0, pid=42, monotonic=500.0).write(path)
    beat = Heartbeat.read(path)
    assert beat == Heartbeat(1000.0, 60.0, pid=42, monotonic=500.0)
    assert stalled_for(beat, started_at=900.0, now=1000.0 + 3600 + 30, rules=RULES) == 3630  # the wall rule
    assert stalled_for(on_monotonic(beat, 42), started_at=400.0, now=530.0, rules=RULES) is None
    assert stalled_for(on_monotonic(beat, 42), started_at=400.0, now=681.0, rules=RULES) == 181
    # another process's heartbeat (the one before a restart): from when this one was seen, plus the grace
    assert stalled_for(on_monotonic(beat, 43), started_at=600.0, now=600.0 + 60 + 180, rules=RULES) is None
    assert stalled_for(on_monotonic(beat, 43), started_at=600.0, now=600.0 + 60 + 181, rules=RULES) == 241
    path.write_text(json.dumps({"finished_at": 5, "period_seconds": 60}))  # an older autoscaler's
    assert Heartbeat.read(path) == Heartbeat(5.0, 60.0)  # pid 0: judged on the wall clock


def test_the_watch_file_is_judged_on_the_monotonic_clock_when_both_sides_give_it(tmp_path):
    path = tmp_path / "watch.json"
    env = {WATCH_ENV: str(path)}
    write_watch(path, 100.0, 10.0, monotonic=7.0)
    assert watch_problem(env, 100.0 + 3600, monotonic_now=8.0) == ""  # the wall clock stepped: a second ago
    assert "for 36 s" in watch_problem(env, 100.0, monotonic_now=43.0)  # stopped, whatever the wall clock says
    assert watch_problem(env, 100.0 + 3600) != ""  # a reader without the monotonic time: the wall rule


def test_a_probe_judges_a_loops_heartbeat_on_the_monotonic_clock(tmp_path):
    path = tmp_path / "beat.json"
    assert heartbeat_problem(path, 0.0, 0.0, RULES) == f"no heartbeat in {path}: not started yet, or not writing it"
    Heartbeat(1000.0, 60.0, pid=7, monotonic=500.0).write(path)
    assert heartbeat_problem(path, 1000.0 + 3600, 680.0, RULES) == ""  # the wall clock stepped: 3 periods on
    assert heartbeat_problem(path, 1000.0, 681.0, RULES) == (
        "no run finished for 181 s (runs every 60 s): stopped or hung"
    )
    Heartbeat(1000.0, 60.0).write(path)  # an older writer's: the wall clock
    assert heartbeat_problem(path, 1180.0, 0.0, RULES) == ""
    assert "181 s" in heartbeat_problem(path, 1181.0, 0.0, RULES)


def test_a_liveness_file_that_cannot_be_replaced_is_rewritten_in_place(tmp_path, monkeypatch):
    import errno

    from clusterman.tree import liveness

    path = tmp_path / "heartbeat.json"
    assert Heartbeat(100.0, 10.0, pid=7, monotonic=5.0).write(path) == ""
    assert path.stat().st_size == liveness.LIVENESS_BYTES  # room for a rewrite in place

    def full(*_):  # a new file cannot be written: the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(liveness, "write_atomically", full)
    assert Heartbeat(110.0, 10.0, pid=7, monotonic=15.0).write(path) == "No space left on device"
    assert Heartbeat.read(path) == Heartbeat(110.0, 10.0, pid=7, monotonic=15.0)
    nothing_to_rewrite = write_watch(tmp_path / "watch.json", 100.0, 10.0)
    assert nothing_to_rewrite == "not written: No space left on device"


def test_accepts_from_names_the_process_behind_the_socket(monkeypatch):
    """The tree trusts a runner only when the kernel says that pid holds the socket."""
    monkeypatch.setenv("CMAN_SIGNAL_SOCKET_PREFIX", f"test-{uuid.uuid4().hex[:8]}-")
    process = SignalProcess("v1", "clusterman", "Const", "web")
    assert not accepts_from(process, os.getpid())  # nobody listens
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(SignalAddress("clusterman", "Const", "web").socket_name)
        server.listen()
        assert accepts_from(process, os.getpid())
        assert not accepts_from(process, os.getppid())
