"""Faults on the signal wire with real runner processes and real abstract sockets (unique names).

A stalled or hostile peer, a runner restarted under idle connections, a full accept queue, huge or
malformed frames, a bad uid list: none may stop the autoscaler's evaluations.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from clusterman.signals.client import SignalAddress
from clusterman.signals.client import SignalClient
from itests.conftest import FIXTURES
from itests.conftest import Runners
from itests.conftest import unique_app
from itests.conftest import wait_listening

METRICS = {"cpus_allocated": [[0, 3.0], [60, 4.0]]}
INIT = json.dumps({"parameters": {"cpus": 2}}).encode()


@pytest.fixture
def runners() -> Iterator[Runners]:
    r = Runners()
    yield r
    r.stop_all()


def idle_connections(address: SignalAddress, count: int) -> list[socket.socket]:
    """Connections that send nothing, as a stalled or hostile peer holds them (non-blocking
    connects: once the runner's queue is full they fail with EAGAIN, and we stop there)."""
    held = []
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(address.socket_name)
        except BlockingIOError:
            s.close()
            break
        held.append(s)
    return held


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()


def peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):  # peak resident memory
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def raw(address: SignalAddress) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(address.socket_name)
    return s


def recv_exactly(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise EOFError(f"closed after {data!r}")
        data += chunk
    return data


def test_idle_peers_and_a_runner_restart_do_not_stop_evaluations(runners):
    """Issue 11.1: 20 idle connections + one runner restart used to fail every later evaluation."""
    address, proc = runners.start("clusterman", "ConstantSignal")
    client = SignalClient(address, "c", "p", {"cpus": 2}, read_timeout=5, connect_timeout=5)
    with client:
        assert client.evaluate(METRICS, 60).opinions() == {"cpus": 2.0}
        held = idle_connections(address, 20)
        proc.kill()
        proc.wait()
        close_all(held)
        _, proc = runners.start("clusterman", "ConstantSignal", address.app)
        held = idle_connections(address, 20)
        try:
            for _ in range(3):
                assert client.evaluate(METRICS, 60).opinions() == {"cpus": 2.0}
        finally:
            close_all(held)


def test_a_second_client_is_served_while_the_autoscaler_holds_its_connection(runners, tmp_path):
    """``clusterman signal evaluate`` against a deployed runner while the autoscaler is connected."""
    address, _ = runners.start("clusterman", "ConstantSignal")
    metrics = tmp_path / "m.json"
    metrics.write_text(json.dumps({"metrics": METRICS, "timestamp": 60}))
    with SignalClient(address, "c", "p", {"cpus": 2}, read_timeout=5, connect_timeout=5) as autoscaler:
        assert autoscaler.evaluate(METRICS, 60).opinions() == {"cpus": 2.0}
        out = subprocess.run(
            [sys.executable, "-m", "clusterman.cli.main", "signal", "evaluate", "--namespace", "clusterman",
             "--name", "ConstantSignal", "--app", address.app, "--metrics", str(metrics), "--param", "cpus=7",
             "--timeout", "10"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["cpus"] == 7.0
        assert autoscaler.evaluate(METRICS, 60).opinions() == {"cpus": 2.0}


def test_a_full_accept_queue_is_retried_within_the_connect_budget(runners):
    """EAGAIN on connect (the runner stopped, its queue full) is retried until the runner resumes."""
    address, proc = runners.start("clusterman", "ConstantSignal")
    os.kill(proc.pid, signal.SIGSTOP)
    held = idle_connections(address, 500)
    try:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.setblocking(False)
        with pytest.raises(BlockingIOError):
            probe.connect(address.socket_name)  # the queue is full: a plain connect fails now
        probe.close()
        threading.Timer(1.0, os.kill, (proc.pid, signal.SIGCONT)).start()
        with SignalClient(address, "c", "p", {"cpus": 2}, read_timeout=10, connect_timeout=10) as client:
            assert client.evaluate(METRICS, 60).opinions() == {"cpus": 2.0}
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        close_all(held)


def test_a_peer_stalled_inside_a_message_is_dropped(runners):
    """A client that sends a length and then stops is dropped after --stall-seconds."""
    address, _ = runners.start("clusterman", "ConstantSignal", None, "--stall-seconds", "1", "--init-seconds", "1")
    s = raw(address)
    s.sendall(INIT + struct.pack(">I", 100))
    assert recv_exactly(s, 1) == b"\x01"
    s.sendall(b'{"metrics"')
    s.settimeout(15)
    assert s.recv(1) == b""  # closed by the runner, not waited on forever
    s.close()
    silent = raw(address)  # and one that never sends its init
    silent.settimeout(15)
    assert silent.recv(1) == b""
    silent.close()


def test_a_one_gib_length_costs_no_memory_before_the_data(runners):
    """Issue 11.2: the runner used to allocate the announced length at once."""
    address, proc = runners.start("clusterman", "ConstantSignal")
    before = peak_rss_kib(proc.pid)
    s = raw(address)
    s.sendall(INIT + struct.pack(">I", 1 << 30))
    assert recv_exactly(s, 1) == b"\x01"
    s.sendall(b'{"metrics": {"x": [' + b"[1, 2]," * 100_000)
    time.sleep(1.0)
    grown_mib = (peak_rss_kib(proc.pid) - before) / 1024
    assert grown_mib < 256, f"the runner's peak resident memory grew by {grown_mib:.0f} MiB"
    with SignalClient(address, "c", "p", {"cpus": 2}, read_timeout=5) as client:  # and it serves others
        assert client.evaluate(METRICS, 60).opinions() == {"cpus": 2.0}
    s.close()


@pytest.mark.parametrize(
    "payload",
    [
        b"[" * 200_000 + b"]" * 200_000,
        b'{"metrics": {"x": [[1, ' + b"9" * 5000 + b"]]}}",
        b'{"metrics": {"x": [[1, NaN]]}}',
    ],
    ids=["deep-nesting", "5000-digit-integer", "nan"],
)
def test_hostile_payloads_get_0x02_and_the_connection_survives(runners, payload):
    address, proc = runners.start("clusterman", "ConstantSignal")
    s = raw(address)
    s.sendall(INIT + struct.pack(">I", len(payload)))
    assert recv_exactly(s, 1) == b"\x01"
    s.sendall(payload)
    assert recv_exactly(s, 1) == b"\x02"
    good = json.dumps({"metrics": METRICS, "timestamp": 60}).encode()
    s.sendall(struct.pack(">I", len(good)))
    assert recv_exactly(s, 1) == b"\x01"
    s.sendall(good)
    assert recv_exactly(s, 1) == b"\x01"
    assert json.loads(s.recv(4096)) == {"Resources": {"cpus": 2.0, "mem": None, "disk": None, "gpus": None}}
    s.close()
    assert proc.poll() is None


@pytest.mark.parametrize(
    "init", [b"[" * 200_000, b'{"parameters": {"cpus": ' + b"9" * 5000 + b"}}"], ids=["deep-nesting", "5000-digits"]
)
def test_a_hostile_init_gets_0x02(runners, init):
    address, proc = runners.start("clusterman", "ConstantSignal")
    s = raw(address)
    s.sendall(init)
    assert recv_exactly(s, 1) == b"\x02"
    s.close()
    with SignalClient(address, "c", "p", {"cpus": 2}, read_timeout=5) as client:
        assert client.evaluate(METRICS, 60).opinions() == {"cpus": 2.0}
    assert proc.poll() is None


def test_a_non_numeric_allowed_uid_is_one_clear_line():
    env = {**os.environ, "CMAN_SIGNAL_ALLOWED_UIDS": "1000,root"}
    out = subprocess.run(
        [sys.executable, "-m", "clusterman_signals.run", "clusterman", "ConstantSignal", unique_app()],
        env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "$CMAN_SIGNAL_ALLOWED_UIDS: 'root' is not a uid" in out.stderr


def test_the_socket_prefix_is_understood_by_both_sides(monkeypatch):
    """Issue 11.10: $CMAN_SIGNAL_SOCKET_PREFIX separates local stacks; empty keeps Clusterman's names."""
    app = unique_app()
    prefix = f"stack-{app}-"
    env = {**os.environ, "CMAN_SIGNAL_SOCKET_PREFIX": prefix,
           "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "clusterman_signals.run", "clusterman", "ConstantSignal", app], env=env
    )
    try:
        monkeypatch.setenv("CMAN_SIGNAL_SOCKET_PREFIX", prefix)
        address = SignalAddress("clusterman", "ConstantSignal", app)
        assert address.socket_name == f"\0{prefix}clusterman-ConstantSignal-{app}-socket"
        wait_listening(address, proc)
        with SignalClient(address, "c", "p", {"cpus": 3}, read_timeout=5) as client:
            assert client.evaluate(METRICS, 60).opinions() == {"cpus": 3.0}
        unprefixed = SignalAddress("clusterman", "ConstantSignal", app, prefix="")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s, pytest.raises(ConnectionRefusedError):
            s.connect(unprefixed.socket_name)
    finally:
        proc.kill()
        proc.wait()


def alive(socks: list[socket.socket]) -> int:
    """How many of ``socks`` the runner has not closed."""
    count = 0
    for s in socks:
        s.setblocking(False)
        try:
            count += s.recv(1, socket.MSG_PEEK) != b""
        except BlockingIOError:
            count += 1
    return count


def wait_alive_at_most(socks: list[socket.socket], most: int, timeout: float = 15.0) -> int:
    deadline = time.monotonic() + timeout
    while (left := alive(socks)) > most and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_beyond_max_clients_the_longest_idle_connection_makes_room(runners):
    """More peers than --max-clients: idle ones are dropped, the autoscaler is still served."""
    address, proc = runners.start("clusterman", "ConstantSignal", None, "--max-clients", "3")
    with SignalClient(address, "c", "p", {"cpus": 2}, read_timeout=5, connect_timeout=5) as client:
        assert client.evaluate(METRICS, 60).opinions() == {"cpus": 2.0}
        held = []
        for _ in range(10):
            s = raw(address)
            s.sendall(INIT)
            held.append(s)
        try:
            assert wait_alive_at_most(held, 3) <= 3  # every one accepted: the rest made room
            for _ in range(3):
                assert client.evaluate(METRICS, 60).opinions() == {"cpus": 2.0}
            assert wait_alive_at_most(held, 2) <= 2  # and the client's reconnection took one more
        finally:
            close_all(held)
    assert proc.poll() is None
