"""Hostile peers of a signal runner, for ``bench/wire_trickle.py``: standard library only, so that
they also run as another uid with the system's Python (``python3 bench/_hostile_peers.py``)."""

from __future__ import annotations

import json
import random
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

INIT = json.dumps({"parameters": {"cpus": 1, "cluster": "fuzz", "pool": "fuzz"}}).encode()
KINDS = ("trickle", "trickle", "stalled", "silent", "slow-init")


def peer(name: str, kind: str, rng: random.Random, end: float, dropped: list[int]) -> None:
    """One peer of ``kind`` on the abstract socket ``name`` until ``end`` (monotonic), connecting
    again whenever the runner drops it (counted in ``dropped``)."""
    while time.monotonic() < end:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(5)
            s.connect("\0" + name)
            if kind == "trickle":  # the init and a length, then one byte of payload at a time
                s.sendall(INIT + struct.pack(">I", 100_000))
                s.recv(1)
                every = rng.uniform(0.1, 2.0)
                while time.monotonic() < end:
                    s.sendall(b" ")
                    time.sleep(every)
            elif kind == "slow-init":
                for byte in INIT:
                    s.sendall(bytes([byte]))
                    time.sleep(0.5)
            elif kind == "stalled":  # part of a length, then nothing
                s.sendall(INIT + struct.pack(">I", 100)[: rng.randint(1, 3)])
            s.settimeout(max(0.01, end - time.monotonic()))
            if s.recv(1) == b"":  # the silent and the stalled wait to be dropped
                raise ConnectionResetError
        except OSError:
            dropped[0] += 1
            time.sleep(0.05)
        finally:
            s.close()


class Peers:
    """``count`` peers as threads of this process, or in a child process running as ``uid``."""

    def __init__(self, name: str, count: int, seed: int, seconds: float, uid: int | None = None) -> None:
        self.threads: list[threading.Thread] = []
        self.dropped = [0]
        self.child: subprocess.Popen[str] | None = None
        if uid is not None:
            argv = ["/usr/bin/python3", str(Path(__file__)), name, str(count), str(seed), str(seconds)]
            self.child = subprocess.Popen(argv, user=uid, cwd="/", stdout=subprocess.PIPE, text=True)
            return
        rng = random.Random(seed)
        end = time.monotonic() + seconds
        for _ in range(count):
            args = (name, rng.choice(KINDS), random.Random(rng.random()), end, self.dropped)
            self.threads.append(threading.Thread(target=peer, args=args, daemon=True))
        for t in self.threads:
            t.start()

    def wait(self) -> int:
        """Once they are done: how many times the runner dropped one."""
        if self.child is not None:
            out, _ = self.child.communicate(timeout=60)
            return int(out.strip() or 0)
        for t in self.threads:
            t.join(60)
        return self.dropped[0]


if __name__ == "__main__":  # as another uid: peers for the given name, count, seed and seconds
    peers = Peers(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    print(peers.wait())
