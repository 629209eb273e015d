"""Looking the signals up in their fetched versions (``tree/fetching.check_signals``), with real
child processes standing in for each version's interpreter."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.tree import fetching
from clusterman.tree.environment import SignalProcess
from clusterman.tree.environment import TreePlan
from clusterman.tree.process_tree import Stopped
from clusterman.tree.process_tree import TreeError

IDENTITY = PoolIdentity("c1", "web", Scheduler.KUBERNETES)


def version(root: Path, name: str, script: str) -> None:
    """A version whose interpreter runs ``script`` (shell) instead of the lookup."""
    python = root / name / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\n{script}\n")
    python.chmod(0o755)


def test_a_lookup_that_hangs_leaves_the_watch_going_and_is_refused_at_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(fetching, "LOOKUP_SECONDS", 1.5)
    version(tmp_path, "v1", "exit 0")
    version(tmp_path, "v2", "sleep 30")  # its import waits on something that never answers
    plan = TreePlan(IDENTITY, (SignalProcess("v1", "a", "A", "__default__"), SignalProcess("v2", "b", "B", "b")), "")
    looks = []
    started = time.monotonic()
    with pytest.raises(TreeError, match=r"looking the class up took over 1\.5 s \(version v2\)"):
        fetching.check_signals(
            plan, tmp_path, {}, threading.Event(), meanwhile=lambda: looks.append(time.monotonic()), every=0.2
        )
    assert time.monotonic() - started < 5
    assert len(looks) >= 5  # the running tree was looked at all along


def test_a_failed_lookup_is_the_answer_at_once(tmp_path):
    version(tmp_path, "v1", "sleep 30")
    version(tmp_path, "v2", "echo 'cannot import namespace clusterman_signals.b: boom' >&2; exit 1")
    plan = TreePlan(IDENTITY, (SignalProcess("v1", "a", "A", "__default__"), SignalProcess("v2", "b", "B", "b")), "")
    started = time.monotonic()
    with pytest.raises(TreeError, match=r"cannot import namespace clusterman_signals\.b: boom"):
        fetching.check_signals(plan, tmp_path, {}, threading.Event())
    assert time.monotonic() - started < 5  # not the lookup limit (60 s)


def test_a_stop_ends_a_lookup_that_hangs(tmp_path):
    """SIGTERM to the bootstrap while a change's signals are looked up: it stops now, not after the
    lookup's limit (60 s)."""
    version(tmp_path, "v1", "sleep 30")
    plan = TreePlan(IDENTITY, (SignalProcess("v1", "a", "A", "__default__"),), "")
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()
    with pytest.raises(Stopped):
        fetching.check_signals(plan, tmp_path, {}, stop)
    assert time.monotonic() - started < 5
