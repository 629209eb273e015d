"""Fuzz a real runner process with malformed frames: crashes, hangs and the runner's peak memory.

Each connection sends an init (valid, or garbage / too deep / a 5,000-digit number), then a few
evaluations whose length and payload are drawn from valid, truncated, random bytes, deeply
nested, huge integers, NaN, wrong shapes, zero and over-limit lengths, or a length of 1 GiB
followed by a little data and a hang-up. Where the protocol owes an answer (an ACK, a 0x02, a
reply or a close) it must come within ``ANSWER_SECONDS``, else it counts as a hang; after every
batch of connections a well-behaved client must be served. A crash is the runner exiting.
Seeded, so a failure can be replayed.
"""

from __future__ import annotations

import json
import os
import random
import socket
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench._memory import peak_rss_mb
from clusterman.signals.client import SignalAddress
from clusterman.signals.client import SignalClient

ANSWER_SECONDS = 10.0
GOOD_INIT = json.dumps({"parameters": {"cpus": 1, "cluster": "fuzz", "pool": "fuzz"}}).encode()


def good_payload(rng: random.Random) -> bytes:
    series = [[1_700_000_000 + 60 * i, rng.random() * 100] for i in range(rng.randint(0, 200))]
    return json.dumps({"metrics": {"cpus_allocated": series}, "timestamp": 1_700_000_000}).encode()


def bad_payload(rng: random.Random) -> bytes:
    kind = rng.randrange(8)
    if kind == 0:
        return rng.randbytes(rng.randint(1, 4000))
    if kind == 1:
        depth = rng.choice([100, 10_000, 200_000])
        return b"[" * depth + b"]" * depth
    if kind == 2:
        return b'{"metrics": {"x": [[1, ' + b"9" * rng.choice([4301, 5000, 100_000]) + b"]]}}"
    if kind == 3:
        return b'{"metrics": {"x": [[1, ' + rng.choice([b"NaN", b"Infinity", b"-Infinity", b"1e999"]) + b"]]}}"
    if kind == 4:
        return rng.choice([b"[]", b"null", b'"metrics"', b'{"metrics": []}', b'{"metrics": {}, "timestamp": "x"}'])
    if kind == 5:
        good = good_payload(rng)
        cut = rng.randrange(1, len(good))
        return good[:cut] + rng.randbytes(rng.randint(0, 20)) + good[cut + 1 :]
    if kind == 6:
        return '{"metrics": {"é": [[1, 2]]}}'.encode("latin-1")
    return b'{"metrics": {"x": [[1, 2]]}, "timestamp": 1}' + b" " * rng.randint(0, 100) + b"trailing"


class Fuzzer:
    def __init__(self, address: SignalAddress, rng: random.Random) -> None:
        self.address = address
        self.rng = rng
        self.frames = 0
        self.hangs = 0
        self.hang_examples: list[str] = []

    def _hang(self, what: str) -> None:
        self.hangs += 1
        if len(self.hang_examples) < 5:
            self.hang_examples.append(what)

    def _expect_answer(self, sock: socket.socket, what: str) -> bytes | None:
        """The runner's next byte(s), b"" for a close, None (a hang) when nothing comes in time."""
        sock.settimeout(ANSWER_SECONDS)
        try:
            return sock.recv(4096)
        except TimeoutError:
            self._hang(what)
            return None
        except OSError:
            return b""

    def connection(self) -> None:
        rng = self.rng
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(ANSWER_SECONDS)
        try:
            sock.connect(self.address.socket_name)
            roll = rng.random()
            if roll < 0.1:  # an init that can never parse: the runner owes a 0x02 (or a close)
                sock.sendall(rng.choice([b"[" * 200_000, b'{"parameters": {"x": ' + b"7" * 5000 + b"}}"]))
                self.frames += 1
                self._expect_answer(sock, "bad init")
                return
            if roll < 0.15:  # garbage, then hang up: nothing is owed
                sock.sendall(rng.randbytes(rng.randint(1, 100)))
                self.frames += 1
                return
            sock.sendall(GOOD_INIT)
            self.frames += 1
            for _ in range(rng.randint(1, 6)):
                if not self.evaluation(sock):
                    return
        except OSError:
            pass
        finally:
            sock.close()

    def evaluation(self, sock: socket.socket) -> bool:
        """One evaluation, well or badly formed; False when the connection is over."""
        rng = self.rng
        payload = good_payload(rng) if rng.random() < 0.4 else bad_payload(rng)
        mode = rng.random()
        if mode < 0.05:
            length = rng.choice([0, (1 << 30) + 1, 0xFFFFFFFF])
        elif mode < 0.1:
            length = 1 << 30  # announce a gigabyte, send a little, hang up
        else:
            length = len(payload)
        sock.sendall(struct.pack(">I", length))
        self.frames += 1
        ack = self._expect_answer(sock, f"length {length}")
        if ack != b"\x01":
            return False
        if length != len(payload):
            sock.sendall(payload[: rng.randint(0, len(payload))])
            self.frames += 1
            return False
        sock.sendall(payload)
        self.frames += 1
        answer = self._expect_answer(sock, f"payload of {len(payload)} bytes")
        if not answer:
            return False
        if answer[:1] == b"\x02":
            return len(answer) == 1
        if answer[:1] == b"\x01" and len(answer) == 1:
            answer += self._expect_answer(sock, "reply") or b""
        return answer[:1] == b"\x01" and answer.rstrip().endswith(b"}")


def run(quick: bool = False, connections: int | None = None, seed: int = 1) -> dict[str, Any]:
    count = connections or (400 if quick else 4000)
    rng = random.Random(seed)
    app = f"fuzz{uuid.uuid4().hex[:8]}"
    address = SignalAddress("clusterman", "ConstantSignal", app)
    checkout = str(Path(__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([checkout, os.environ.get("PYTHONPATH", "")])}
    runner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "clusterman_signals.run",
            "clusterman",
            "ConstantSignal",
            app,
            "--log-level",
            "CRITICAL",
        ],
        env=env,
    )  # fmt: skip
    fuzzer = Fuzzer(address, rng)
    health_failures = 0
    started = time.perf_counter()
    try:
        good = SignalClient(address, "fuzz", "fuzz", {"cpus": 1}, read_timeout=ANSWER_SECONDS, connect_timeout=30)
        good.connect()
        base_rss = peak_rss_mb(runner.pid)
        for i in range(count):
            fuzzer.connection()
            if runner.poll() is not None:
                break
            if i % 50 == 49:
                try:
                    good.evaluate({"cpus_allocated": [[1, 1.0]]}, 1)
                except Exception:
                    health_failures += 1
        good.close()
        crashed = runner.poll() is not None
        peak = peak_rss_mb(runner.pid) if not crashed else float("nan")
    finally:
        runner.kill()
        runner.wait()
    return {
        "seed": seed,
        "connections": count,
        "frames": fuzzer.frames,
        "crashes": int(crashed),
        "hangs": fuzzer.hangs,
        "hang_examples": fuzzer.hang_examples,
        "health_check_failures": health_failures,
        "runner_rss_at_start_mib": round(base_rss, 1),
        "runner_peak_rss_mib": round(peak, 1),
        "seconds": round(time.perf_counter() - started, 1),
    }


if __name__ == "__main__":
    arguments = [a for a in sys.argv[1:] if a != "--quick"]
    n = int(arguments[0]) if arguments else None
    print(json.dumps(run(quick="--quick" in sys.argv, connections=n), indent=2))
