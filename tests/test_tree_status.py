import threading

from clusterman.tree.status import StatusFeed
from clusterman.tree.status import StatusWriter
from clusterman.tree.status import follow_tree
from clusterman.tree.status import read_outcomes


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


def test_the_writer_keeps_the_latest_outcomes(tmp_path):
    writer = StatusWriter(tmp_path / "s.json")
    for n in range(60):
        writer.record(True, "f", str(n), now=float(n))
    outcomes = read_outcomes(tmp_path / "s.json")
    assert len(outcomes) == 50 and outcomes[-1].seq == 60


def test_follow_tree_exports_the_fallback_versions(tmp_path):
    recorded = Recorded()
    stop = threading.Event()
    stop.set()
    assert follow_tree({"CMAN_SIGNAL_FALLBACK_VERSIONS": "v1 v2"}, recorded, recorded, stop) is None
    assert recorded.calls == [("fallbacks", ["v1", "v2"])]
