"""The runner and the client over real abstract sockets, in separate processes."""

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

import pytest

from clusterman.core.resources import NO_OPINION
from clusterman.core.resources import ResourceRequest
from clusterman.signals.client import SignalAddress
from clusterman.signals.client import SignalClient
from clusterman.signals.protocol import SignalError
from itests.conftest import FIXTURES
from itests.conftest import unique_app

METRICS = {"cpus_allocated": [[100, 1.0], [160, 2.5]]}


def test_both_value_forms(runners):
    address, _ = runners.start("testns", "CountPoints")
    with SignalClient(address, "cluster-a", "pool-b") as client:
        assert client.evaluate(METRICS, 1234) == ResourceRequest(cpus=2.0, mem=1234.0)

    address, _ = runners.start("testns", "LatestFromCache")
    with SignalClient(address, "cluster-a", "pool-b") as client:
        request = client.evaluate(METRICS, 1234)
    assert request == ResourceRequest(cpus=2.5, disk=float(len("cluster-a") + len("pool-b")))
    assert request.mem is NO_OPINION


def test_parameters_and_cluster_reach_the_signal(runners):
    address, _ = runners.start("testns", "Params")
    with SignalClient(address, "abc", "p", parameters={"cpus": 7}) as client:
        assert client.evaluate({}, 1) == ResourceRequest(cpus=7.0, gpus=3.0)


def test_default_namespace_constant_signal(runners):
    address, _ = runners.start("clusterman", "ConstantSignal")
    with SignalClient(address, "c", "p", parameters={"cpus": 10, "mem": 2048}) as client:
        assert client.evaluate({}, 1).opinions() == {"cpus": 10.0, "mem": 2048.0}


def test_many_evaluations_on_one_connection(runners):
    address, _ = runners.start("testns", "CountPoints")
    with SignalClient(address, "c", "p") as client:
        for i in range(50):
            assert client.evaluate({"x": [[j, j] for j in range(i)]}, i).cpus == float(i)


def test_twenty_megabyte_payload(runners):
    address, _ = runners.start("testns", "CountPoints")
    points = [[1700000000 + i, float(i % 97)] for i in range(1_100_000)]
    payload = {"cpus_allocated": points}
    assert len(json.dumps(payload)) > 20_000_000
    with SignalClient(address, "c", "p", read_timeout=60) as client:
        assert client.evaluate(payload, 1).cpus == float(len(points))


def test_signal_that_raises_is_an_error_and_the_runner_keeps_serving(runners):
    address, proc = runners.start("testns", "Raises")
    with SignalClient(address, "c", "p") as client:
        for _ in range(2):
            with pytest.raises(SignalError, match="RuntimeError: the signal broke"):
                client.evaluate(METRICS, 1)
    assert proc.poll() is None


@pytest.mark.parametrize("kind", ["nan", "negative", "string", "not-resources"])
def test_garbage_from_value_is_an_error(runners, kind):
    address, _ = runners.start("testns", "ReturnsGarbage")
    with SignalClient(address, "c", "p", parameters={"kind": kind}) as client, pytest.raises(SignalError) as err:
        client.evaluate(METRICS, 1)
    assert "testns.ReturnsGarbage" in str(err.value)


def test_a_plain_dict_is_refused_as_clusterman_refuses_it(runners):
    """docs/signals.md: value() returns SignalResources; Clusterman's runner calls _asdict() on it."""
    address, _ = runners.start("testns", "ReturnsGarbage")
    with (
        SignalClient(address, "c", "p", parameters={"kind": "dict"}) as client,
        pytest.raises(SignalError, match=r"returned dict, expected SignalResources; wrap it"),
    ):
        client.evaluate(METRICS, 1)


def test_unloadable_signals_answer_with_the_reason(runners):
    address, _ = runners.start("testns", "NoSuchSignal")
    with (
        SignalClient(address, "c", "p") as client,
        pytest.raises(SignalError, match="has no signal named NoSuchSignal"),
    ):
        client.evaluate(METRICS, 1)
    address, _ = runners.start("nosuchnamespace", "X")
    with (
        SignalClient(address, "c", "p") as client,
        pytest.raises(
            SignalError, match=r"no namespace clusterman_signals\.nosuchnamespace \(namespaces here: clusterman, testns"
        ),
    ):
        client.evaluate(METRICS, 1)
    address, _ = runners.start("testns", "FailsToConstruct")
    with SignalClient(address, "c", "p") as client, pytest.raises(SignalError, match="missing parameter"):
        client.evaluate(METRICS, 1)


def test_hanging_signal_hits_the_deadline(runners):
    address, _ = runners.start("testns", "Hangs")
    client = SignalClient(address, "c", "p", parameters={"seconds": 30}, read_timeout=0.5)
    started = time.monotonic()
    with client, pytest.raises(SignalError, match=r"Hangs.*after one reconnect"):
        client.evaluate(METRICS, 1)
    # one deadline, a reconnect, a second deadline: about 1 s, never the signal's 30 s
    assert time.monotonic() - started < 5


def test_hung_runner_exits_past_its_own_limit(runners):
    address, proc = runners.start("testns", "Hangs", None, "--max-eval-seconds", "0.5")
    with SignalClient(address, "c", "p", read_timeout=10, connect_timeout=0.5) as client, pytest.raises(SignalError):
        client.evaluate(METRICS, 1)
    assert proc.wait(timeout=10) == 75


def test_client_reconnects_after_the_runner_restarts(runners):
    address, proc = runners.start("testns", "CountPoints")
    client = SignalClient(address, "c", "p", connect_timeout=10)
    assert client.evaluate(METRICS, 1).cpus == 2.0
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    runners.start("testns", "CountPoints", address.app)
    assert client.evaluate(METRICS, 2).cpus == 2.0  # the old connection is dead: one reconnect
    client.close()


def test_no_runner_is_a_clear_error():
    client = SignalClient(SignalAddress("testns", "Nobody", unique_app()), "c", "p", connect_timeout=0.3)
    with pytest.raises(SignalError, match="nobody listens"):
        client.evaluate(METRICS, 1)


def _raw_connect(address: SignalAddress) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(address.socket_name)
    return sock


def test_runner_accepts_init_and_length_in_one_write(runners):
    """Deployed clients may have the init and the first length arrive in one read."""
    address, _ = runners.start("testns", "CountPoints")
    body = json.dumps({"metrics": METRICS, "timestamp": 5}).encode()
    with _raw_connect(address) as sock:
        sock.sendall(json.dumps({"parameters": {"cluster": "c", "pool": "p"}}).encode() + struct.pack(">I", len(body)))
        assert sock.recv(1) == b"\x01"
        for i in range(0, len(body), 7):  # the payload in odd-sized pieces
            sock.sendall(body[i : i + 7])
        reply = b""
        while not reply.endswith(b"}}"):
            reply += sock.recv(4096)
    assert reply[:1] == b"\x01"
    assert json.loads(reply[1:])["Resources"]["cpus"] == 2.0


def test_malformed_payload_gets_nack_and_the_connection_survives(runners):
    address, _ = runners.start("testns", "CountPoints")
    with _raw_connect(address) as sock:
        sock.sendall(b'{"parameters": {}}')
        bad = b"{not json"
        sock.sendall(struct.pack(">I", len(bad)))
        assert sock.recv(1) == b"\x01"
        sock.sendall(bad)
        assert sock.recv(1) == b"\x02"
        good = json.dumps({"metrics": {}, "timestamp": 1}).encode()
        sock.sendall(struct.pack(">I", len(good)))
        assert sock.recv(1) == b"\x01"
        sock.sendall(good)
        assert sock.recv(1) == b"\x01"


def test_bad_length_is_refused(runners):
    address, proc = runners.start("testns", "CountPoints")
    with _raw_connect(address) as sock:
        sock.sendall(b"{}" + struct.pack(">I", 0))
        assert sock.recv(1) == b"\x02"
        assert sock.recv(1) == b""  # the runner closed the connection: the stream is out of step
    assert proc.poll() is None
    with SignalClient(address, "c", "p") as client:  # and serves the next connection
        assert client.evaluate(METRICS, 1).cpus == 2.0


class SeedRunner:
    """A minimal runner written from the seed, sending its bytes in the layouts under test."""

    def __init__(self, reply: bytes, layout: str) -> None:
        self.address = SignalAddress("seedrunner", "Fake", unique_app())
        self.reply = reply
        self.layout = layout
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.address.socket_name)
        self.server.listen(1)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _read_exact(self, conn: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    def _serve(self) -> None:
        conn, _ = self.server.accept()
        with conn:
            buf = b""
            while True:  # the init object: read until it parses
                buf += conn.recv(1)
                try:
                    json.loads(buf)
                    break
                except ValueError:
                    continue
            (n,) = struct.unpack(">I", self._read_exact(conn, 4))
            conn.sendall(b"\x01")
            self._read_exact(conn, n)
            if self.layout == "ack-and-reply-together":
                conn.sendall(b"\x01" + self.reply)
            elif self.layout == "split":
                conn.sendall(b"\x01")
                for byte in self.reply:
                    conn.sendall(bytes([byte]))
                    time.sleep(0.002)
            elif self.layout == "nack":
                conn.sendall(b"\x02")
            elif self.layout == "bad-ack":
                conn.sendall(b"\x07")
            time.sleep(0.5)

    def close(self) -> None:
        self.server.close()


GOOD_REPLY = json.dumps({"Resources": {"cpus": 3.5, "mem": None, "disk": 10, "gpus": 0}}).encode()


@pytest.mark.parametrize("layout", ["ack-and-reply-together", "split"])
def test_client_reads_every_reply_layout(layout):
    fake = SeedRunner(GOOD_REPLY, layout)
    with SignalClient(fake.address, "c", "p", read_timeout=5) as client:
        assert client.evaluate(METRICS, 1) == ResourceRequest(cpus=3.5, disk=10.0, gpus=0.0)
    fake.close()


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (b'{"Resources": {"cpus": NaN}}', "NaN is not a number"),
        (b'{"Resources": {"cpus": -2}}', "finite"),
        (b'{"Resources": {"cpus": "10"}}', "number or null"),
        (b'{"Resources": {"cpus": 1, "ram": 5}}', "unknown resource"),
        (b'{"Answer": 42}', "no Resources"),
        (b"[1, 2]", "JSON object"),
    ],
)
def test_client_rejects_bad_replies(reply, message):
    fake = SeedRunner(reply, "ack-and-reply-together")
    with SignalClient(fake.address, "c", "p", read_timeout=5) as client, pytest.raises(SignalError, match=message):
        client.evaluate(METRICS, 1)
    fake.close()


@pytest.mark.parametrize(("layout", "message"), [("nack", "0x02"), ("bad-ack", "0x07")])
def test_client_reports_refusals(layout, message):
    fake = SeedRunner(GOOD_REPLY, layout)
    with SignalClient(fake.address, "c", "p", read_timeout=5) as client, pytest.raises(SignalError, match=message):
        client.evaluate(METRICS, 1)
    fake.close()


def test_cli_evaluate_with_start(tmp_path):
    metrics = tmp_path / "m.json"
    metrics.write_text(json.dumps({"metrics": {"cpus_allocated": [[0, 4.0], [60, 4.0]]}, "timestamp": 60}))
    out = subprocess.run(
        [sys.executable, "-m", "clusterman.cli.main", "signal", "evaluate", "--start", "--namespace", "clusterman",
         "--name", "MostRecentResources", "--app", unique_app(), "--metrics", str(metrics)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"cpus": 4.0, "mem": None, "disk": None, "gpus": None}


def test_cli_evaluate_names_the_missing_signal_at_once(tmp_path):
    """Without --start nobody is about to listen: no reconnect, no WARNING, one line saying how to start one."""
    metrics = tmp_path / "m.json"
    metrics.write_text("{}")
    app = unique_app()
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "clusterman.cli.main", "signal", "evaluate", "--namespace", "clusterman",
         "--name", "Nope", "--app", app, "--metrics", str(metrics)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    took = time.monotonic() - started
    assert out.returncode == 1 and out.stdout == ""
    [line] = out.stderr.splitlines()
    assert line.startswith("clusterman signal evaluate: signal clusterman.Nope") and "nobody listens" in line
    assert line.endswith(f"start one with --start, or with `python -m clusterman_signals.run clusterman Nope {app}`")
    assert took < 3.0, took  # it took 4 s, with a reconnect and its WARNING


def test_cli_evaluate_prints_the_signals_traceback(tmp_path, runners):
    """Against a runner already listening (as deployed): the answer's error, then the file and line."""
    metrics = tmp_path / "m.json"
    metrics.write_text("{}")
    address, _ = runners.start("testns", "Raises")
    out = subprocess.run(
        [sys.executable, "-m", "clusterman.cli.main", "signal", "evaluate", "--namespace", "testns",
         "--name", "Raises", "--app", address.app, "--metrics", str(metrics)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1 and out.stdout == ""
    lines = out.stderr.splitlines()
    assert lines[0] == (
        f"clusterman signal evaluate: signal testns.Raises (app {address.app}): "
        "the signal failed: value() raised RuntimeError: the signal broke"
    )
    module = FIXTURES / "clusterman_signals" / "testns" / "__init__.py"
    line = module.read_text().splitlines().index('        raise RuntimeError("the signal broke")') + 1
    assert lines[1:] == [
        "the signal's traceback:",
        "Traceback (most recent call last):",
        f'  File "{module}", line {line}, in value',
        '    raise RuntimeError("the signal broke")',
        "RuntimeError: the signal broke",
    ]


def test_a_client_that_does_not_ask_gets_no_traceback(runners):
    """Deployed clients send no "traceback" key: the reply stays {"Error": ...} alone."""
    address, _ = runners.start("testns", "Raises")
    with SignalClient(address, "c", "p") as client, pytest.raises(SignalError) as plain:
        client.evaluate(METRICS, 1)
    assert plain.value.traceback == ""
    with SignalClient(address, "c", "p", traceback=True) as client, pytest.raises(SignalError) as asked:
        client.evaluate(METRICS, 1)
    assert asked.value.traceback.endswith("RuntimeError: the signal broke\n")


def test_client_refuses_a_runner_of_another_uid(runners):
    """Abstract sockets have no permissions: the client checks the listener's uid (SO_PEERCRED)."""
    address, proc = runners.start("testns", "CountPoints")
    client = SignalClient(address, "c", "p", allowed_uids={12345})
    with pytest.raises(SignalError, match=r"uid \d+, which is not allowed"):
        client.connect()
    assert proc.poll() is None


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to become another user")
@pytest.mark.parametrize(
    ("uid", "expected"), [(0, ("b'\\x01'",)), (65534, ("b''", "ConnectionResetError", "BrokenPipeError"))]
)
def test_runner_refuses_a_client_of_another_uid(runners, uid, expected):
    address, _ = runners.start("testns", "CountPoints")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child becomes "nobody" and tries an evaluation
        try:
            os.setuid(uid)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(5)
            sock.connect(address.socket_name)
            sock.sendall(b"{}" + struct.pack(">I", 2))
            answer = repr(sock.recv(1))
        except Exception as e:
            answer = type(e).__name__
        try:
            os.write(write_end, answer.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    with os.fdopen(read_end) as f:
        assert f.read() in expected  # another user's connection is closed without an ACK
