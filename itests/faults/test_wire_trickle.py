"""Peers that trickle inside a message (issue 26, item 6), against real runner processes.

Before: 16 connections, each sending the init and a length, then one byte every 10 s, held every
slot of the default runner for good (the stall timer restarted at each byte, and a busy
connection never gave way), so the runner refused the autoscaler run after run (``Connection
reset by peer``), and as the autoscaler counted only timeouts as unanswered, the bootstrap never
restarted it. Now every message has a deadline from its first byte, a newcomer takes the slot of
the slowest peer, the other uids never hold the tree's last slot, and a runner that refuses is
counted as one that is silent.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import threading
import time
import uuid

import pytest

from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.core.config import SignalConfig
from clusterman.datastore.store import InMemoryStore
from clusterman.signals.client import SignalAddress
from clusterman.signals.client import SignalClient
from clusterman.signals.evaluator import SignalEvaluator
from clusterman.signals.specs import SignalSpec
from itests.conftest import Runners

METRICS = {"cpus_allocated": [[0, 3.0], [60, 4.0]]}
INIT = json.dumps({"parameters": {"cpus": 2}}).encode()
NOBODY = 65534

# A peer of another uid that keeps every slot it can get: connect, init, a length, then a byte of
# payload every 0.2 s; when dropped, it connects again at once. Runs as ``nobody``, with the
# system's Python and the standard library only.
FLOODER = r"""
import json, socket, struct, sys, threading, time
name, count, seconds = "\0" + sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
end = time.monotonic() + seconds
init = json.dumps({"parameters": {"cpus": 2}}).encode()
def trickle():
    while time.monotonic() < end:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(5)
            s.connect(name)
            s.sendall(init + struct.pack(">I", 1000))
            s.recv(1)
            while time.monotonic() < end:
                s.sendall(b" ")
                time.sleep(0.2)
        except OSError:
            time.sleep(0.01)
        finally:
            s.close()
threads = [threading.Thread(target=trickle) for _ in range(count)]
for t in threads: t.start()
for t in threads: t.join()
"""


def trickler(address: SignalAddress, closed: list[float], stop: threading.Event) -> threading.Thread:
    """A peer that sends its init and a length, then one byte of the payload every 0.2 s, until the
    runner drops it (then it notes when) or ``stop``."""

    def run() -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(address.socket_name)
        started = time.monotonic()
        try:
            s.sendall(INIT + struct.pack(">I", 1000))
            if s.recv(1) != b"\x01":
                raise OSError("no ACK")
            while not stop.wait(0.2):
                s.sendall(b" ")
        except OSError:
            closed.append(time.monotonic() - started)
        finally:
            s.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_trickling_peers_neither_starve_the_autoscaler_nor_outlive_their_deadline(runners: Runners):
    address, proc = runners.start("clusterman", "ConstantSignal", None, "--max-clients", "4", "--message-seconds", "3")
    closed: list[float] = []
    stop = threading.Event()
    peers = [trickler(address, closed, stop) for _ in range(4)]  # every slot, each inside a message
    try:
        time.sleep(0.5)
        with SignalClient(address, "c", "p", {"cpus": 2}, read_timeout=5, connect_timeout=5) as client:
            asked = time.monotonic()
            assert client.evaluate(METRICS, 60).opinions() == {"cpus": 2.0}
            print(f"the autoscaler answered in {time.monotonic() - asked:.3f} s with 4 trickling peers on 4 slots")
        for peer in peers:
            peer.join(10)
        assert len(closed) == 4, closed  # all dropped though each kept sending: one took the autoscaler's place
        assert max(closed) < 3 + 1.5, closed  # the others at the message's deadline, not by a stall timer
        print(f"trickling peers dropped after {sorted(round(c, 1) for c in closed)} s (--message-seconds 3)")
    finally:
        stop.set()
    assert proc.poll() is None


def test_peers_of_another_uid_never_take_the_trees_last_slot(runners: Runners):
    """A flood of trickling peers of another allowed uid, reconnecting as soon as dropped: the
    tree's own client is served on every evaluation, by a fresh connection each time."""
    address, proc = runners.start(
        "clusterman", "ConstantSignal", None, "--max-clients", "4", "--allowed-uids", str(NOBODY)
    )
    flood = subprocess.Popen(
        ["/usr/bin/python3", "-c", FLOODER, address.socket_name[1:], "12", "6"], user=NOBODY, cwd="/"
    )
    try:
        time.sleep(1.0)
        worst = 0.0
        while flood.poll() is None:
            with SignalClient(address, "c", "p", {"cpus": 2}, read_timeout=5, connect_timeout=5) as client:
                asked = time.monotonic()
                assert client.evaluate(METRICS, 60).opinions() == {"cpus": 2.0}
                worst = max(worst, time.monotonic() - asked)
            time.sleep(0.1)
        print(f"worst answer to the tree's own uid under a flood of 12 peers of another uid: {worst:.3f} s")
        assert flood.returncode == 0
    finally:
        flood.kill()
        flood.wait()
    assert proc.poll() is None


def test_a_runner_that_refuses_the_autoscaler_counts_as_unanswered():
    """A runner that accepts and closes at once (as one with every slot busy did) is noted in the
    heartbeat's ``unanswered`` like a silent one, so the bootstrap restarts it."""
    app = f"itest{uuid.uuid4().hex[:10]}"
    spec = SignalSpec(app, "clusterman", SignalConfig(period_minutes=1, name="ConstantSignal", branch_or_tag="v1"))
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(spec.address.socket_name)
    server.listen(16)
    stop = threading.Event()

    def refuse() -> None:
        while not stop.is_set():
            conn, _ = server.accept()
            conn.close()

    threading.Thread(target=refuse, daemon=True).start()
    evaluator = SignalEvaluator(PoolIdentity("c", "p", Scheduler.MESOS), spec, [], signal_seconds=5)
    try:
        with pytest.raises(Exception, match="after one reconnect"):
            evaluator.evaluate(InMemoryStore(), 3600)
        assert evaluator.unanswered == {app: (3600, 3600)}
    finally:
        stop.set()
        evaluator.close()
        server.close()
