"""One signal evaluation round trip, next to the floor of moving the same bytes.

For each payload size: the time of ``SignalClient.evaluate`` against a real runner process
(``clusterman.ConstantSignal``), and the floor measured in the same run: one JSON encode, the
same bytes over a bare abstract socket to another process that reads them all, decodes them
once and answers one byte. The ratio is what the protocol costs on top of the bytes.
"""

from __future__ import annotations

import functools
import json
import socket
import struct
import subprocess
import sys
import uuid
from typing import Any

from bench._timing import best_of
from clusterman.signals.client import SignalAddress
from clusterman.signals.client import SignalClient

SIZES = {"1KB": 1_000, "100KB": 100_000, "1MB": 1_000_000, "20MB": 20_000_000}

FLOOR_SERVER = r"""
import json, socket, struct, sys
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind("\0" + sys.argv[1])
server.listen(1)
print("ready", flush=True)
conn, _ = server.accept()
while True:
    header = b""
    while len(header) < 4:
        chunk = conn.recv(4 - len(header))
        if not chunk:
            sys.exit(0)
        header += chunk
    (n,) = struct.unpack(">I", header)
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        got += conn.recv_into(view[got:], n - got)
    json.loads(buf)
    conn.sendall(b"\x01")
"""


def make_metrics(target_bytes: int) -> dict[str, Any]:
    """One series whose JSON encoding is about ``target_bytes`` long."""

    def series(count: int) -> list[list[float]]:
        return [[1700000000 + i * 60, 12.345 + (i % 100)] for i in range(count)]

    per_point = len(json.dumps(series(1000), separators=(",", ":"))) / 1000
    return {"cpus_allocated": series(max(1, round(target_bytes / per_point)))}


def floor_round_trip(sock: socket.socket, metrics: dict[str, Any]) -> None:
    data = json.dumps({"metrics": metrics, "timestamp": 1}, separators=(",", ":")).encode()
    sock.sendall(struct.pack(">I", len(data)) + data)
    if sock.recv(1) != b"\x01":
        raise RuntimeError("floor server failed")


def run(quick: bool = False) -> dict[str, Any]:
    sizes = {k: v for k, v in SIZES.items() if not quick or v <= 1_000_000}
    tag = uuid.uuid4().hex[:8]
    address = SignalAddress("clusterman", "ConstantSignal", f"bench{tag}")
    runner = subprocess.Popen(
        [sys.executable, "-m", "clusterman_signals.run", address.namespace, address.name, address.app,
         "--log-level", "WARNING"],
    )  # fmt: skip
    floor_name = f"bench-floor-{tag}"
    procs: list[subprocess.Popen[Any]] = [runner]
    results: dict[str, Any] = {"sizes": {}}
    try:
        floor = subprocess.Popen([sys.executable, "-c", FLOOR_SERVER, floor_name], stdout=subprocess.PIPE, text=True)
        procs.append(floor)
        assert floor.stdout is not None
        floor.stdout.readline()
        floor_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        floor_sock.connect("\0" + floor_name)
        client = SignalClient(address, "bench", "bench", {"cpus": 1}, read_timeout=120, connect_timeout=15)
        client.connect()
        for label, size in sizes.items():
            metrics = make_metrics(size)
            repeat = 3 if size >= 10_000_000 else 15
            client.evaluate(metrics, 1)  # warm both paths once
            floor_round_trip(floor_sock, metrics)
            evaluate = best_of(functools.partial(client.evaluate, metrics, 1), repeat)
            bare = best_of(functools.partial(floor_round_trip, floor_sock, metrics), repeat)
            payload = len(json.dumps({"metrics": metrics, "timestamp": 1}, separators=(",", ":")))
            results["sizes"][label] = {
                "payload_bytes": payload,
                "round_trip_ms": round(evaluate * 1000, 3),
                "floor_ms": round(bare * 1000, 3),
                "ratio_to_floor": round(evaluate / bare, 3),
            }
        client.close()
        floor_sock.close()
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)
    results["goal"] = "ratio_to_floor <= 1.5 at 1MB and 20MB"
    return results
