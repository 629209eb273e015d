import threading
import time

from clusterman.tree.status_file import StatusFeed
from clusterman.tree.status_file import StatusWriter
from clusterman.tree.status_file import follow_tree
from clusterman.tree.status_file import read_outcomes
from clusterman.tree.status_file import tree_rolled_back


class Recorded:
    """Implements the two recorder calls the feed makes, keeping them in order."""

    def __init__(self):
        self.calls = []

    def config_reloaded(self, path, summary=""):
        self.calls.append(("reloaded", path, summary))

    def config_rejected(self, path, error):
        self.calls.append(("rejected", path, error))

    def set_signal_fallbacks(self, versions):
        self.calls.append(("fallbacks", versions))


def test_each_outcome_is_recorded_once_across_restarts(tmp_path):
    status = tmp_path / "tree-status.json"
    writer = StatusWriter(status)
    writer.record(True, "pool.yaml", "2 signals", now=1.0)
    first = Recorded()
    assert StatusFeed(status, first).poll() == 1
    writer.record(False, "pool.yaml", "pool.yaml: x: unknown key", now=2.0)
    assert StatusFeed(status, first).poll() == 1
    assert first.calls == [
        ("reloaded", "pool.yaml", "2 signals"),
        ("rejected", "pool.yaml", "pool.yaml: x: unknown key"),
    ]
    restarted = Recorded()
    assert StatusFeed(status, restarted).poll() == 0  # already recorded by the previous process
    assert [o.seq for o in read_outcomes(status)] == [1, 2]


def test_a_rollback_is_said_until_a_change_is_accepted(tmp_path):
    status = tmp_path / "tree-status.json"
    env = {"CMAN_TREE_STATUS_FILE": str(status)}
    assert tree_rolled_back(env) == "" and tree_rolled_back({}) == ""
    writer = StatusWriter(status)
    writer.record(False, "main.yaml", "CONFIGURATION ROLLED BACK: the change to main.yaml", rolled_back=True)
    assert tree_rolled_back(env) == "CONFIGURATION ROLLED BACK: the change to main.yaml"
    writer.record(False, "main.yaml", "main.yaml: x: unknown key")  # refused: the rollback still runs
    assert tree_rolled_back(env).startswith("CONFIGURATION ROLLED BACK")
    writer.record(True, "main.yaml", "1 signal")
    assert tree_rolled_back(env) == ""


def test_the_writer_keeps_the_latest_outcomes(tmp_path):
    writer = StatusWriter(tmp_path / "s.json")
    for n in range(60):
        writer.record(True, "f", str(n), now=float(n))
    outcomes = read_outcomes(tmp_path / "s.json")
    assert len(outcomes) == 50 and outcomes[-1].seq == 60


def test_follow_tree_exports_the_fallback_versions_the_bootstrap_writes(tmp_path):
    status = tmp_path / "tree-status.json"
    writer = StatusWriter(status)
    writer.set_fallbacks({"v1": "S3 gave no answer within 30 s", "v2": "checksum mismatch"})
    recorded = Recorded()
    stop = threading.Event()
    thread = follow_tree({"CMAN_TREE_STATUS_FILE": str(status)}, recorded, recorded, stop)
    assert thread is not None
    deadline = time.monotonic() + 10
    while ("fallbacks", ["v1", "v2"]) not in recorded.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(10)
    assert recorded.calls == [("fallbacks", ["v1", "v2"])]


def test_an_outcome_is_recorded_once_though_its_ack_cannot_be_written(tmp_path):
    status = tmp_path / "tree-status.json"
    StatusWriter(status).record(True, "pool.yaml", "2 signals", now=1.0)
    (tmp_path / "tree-status.json.ack").mkdir()  # cannot be replaced by a file: as a full disk refuses it
    recorded = Recorded()
    feed = StatusFeed(status, recorded)
    try:
        feed.poll()
    except OSError:
        pass
    assert feed.poll() == 0 and recorded.calls == [("reloaded", "pool.yaml", "2 signals")]
