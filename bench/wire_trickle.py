"""Fuzz a real runner with trickling and stalled peers: the autoscaler's worst answer time.

Seeded peers, four times the runner's ``--max-clients``, each one of: a trickler (the init and a
length, then one byte of payload every 0.1-2 s), a stalled message (part of a length, then
nothing), a silent connection (nothing at all), a slow init (one byte of it every 0.5 s). Each
connects again as soon as the runner drops it. With root, a quarter of them run as another
allowed uid (``nobody``). Meanwhile a well-behaved client, as the autoscaler, evaluates every
0.5 s on a kept connection (reconnecting quietly, as ours does). The baseline is the same client
against the same runner before the peers start. Reported: the peers, the client's worst and
median answer times (and their ratio to the baseline's), its failed evaluations, the peers the
runner dropped, and the runner's exits (each one a restart its supervisor would have to make).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench._hostile_peers import Peers
from clusterman.signals.client import SignalAddress
from clusterman.signals.client import SignalClient

METRICS = {"cpus_allocated": [[1, 1.0]]}
NOBODY = 65534
MAX_CLIENTS = 16


def answers(client: SignalClient, until: float, every: float) -> tuple[list[float], int]:
    """Evaluate every ``every`` s until ``until``: the answer times, and the evaluations that failed."""
    times, failed = [], 0
    while time.monotonic() < until:
        asked = time.monotonic()
        try:
            client.evaluate(METRICS, 1)
            times.append(time.monotonic() - asked)
        except Exception:
            failed += 1
        time.sleep(max(0.0, every - (time.monotonic() - asked)))
    return times, failed


def run(quick: bool = False, seed: int = 1) -> dict[str, Any]:
    seconds = 20.0 if quick else 60.0
    message_seconds = 5.0 if quick else 30.0  # the default is 30: long enough runs see drops
    count = 4 * MAX_CLIENTS
    others = count // 4 if os.geteuid() == 0 else 0
    app = f"trickle{uuid.uuid4().hex[:8]}"
    address = SignalAddress("clusterman", "ConstantSignal", app)
    checkout = str(Path(__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([checkout, os.environ.get("PYTHONPATH", "")])}
    command = [
        sys.executable, "-m", "clusterman_signals.run", "clusterman", "ConstantSignal", app,
        "--max-clients", str(MAX_CLIENTS), "--message-seconds", str(message_seconds),
        "--allowed-uids", str(NOBODY), "--log-level", "CRITICAL",
    ]  # fmt: skip
    runner = subprocess.Popen(command, env=env)
    exits = 0
    try:
        client = SignalClient(address, "fuzz", "fuzz", {"cpus": 1}, read_timeout=10, connect_timeout=30)
        client.connect()
        baseline, _ = answers(client, time.monotonic() + 3, 0.1)
        name = address.socket_name[1:]  # abstract: the NUL is put back by each peer
        ours = Peers(name, count - others, seed, seconds)
        theirs = Peers(name, others, seed + 1, seconds, NOBODY) if others else None
        times, failed = answers(client, time.monotonic() + seconds, 0.5)
        client.close()
        exits = int(runner.poll() is not None)
        dropped = ours.wait() + (theirs.wait() if theirs is not None else 0)
    finally:
        runner.kill()
        runner.wait()
    worst_base, median_base = max(baseline), statistics.median(baseline)
    return {
        "seed": seed,
        "seconds": seconds,
        "max_clients": MAX_CLIENTS,
        "message_seconds": message_seconds,
        "peers": count,
        "peers_of_another_uid": others,
        "peer_connections_closed_by_the_runner": dropped,
        "autoscaler_evaluations": len(times) + failed,
        "autoscaler_failed_evaluations": failed,
        "autoscaler_worst_answer_ms": round(max(times, default=float("nan")) * 1000, 1),
        "autoscaler_median_answer_ms": round(statistics.median(times) * 1000, 2) if times else None,
        "baseline_worst_answer_ms": round(worst_base * 1000, 1),
        "baseline_median_answer_ms": round(median_base * 1000, 2),
        "worst_answer_vs_baseline_worst": round(max(times, default=float("nan")) / worst_base, 2),
        "median_answer_vs_baseline_median": round(statistics.median(times) / median_base, 2) if times else None,
        "runner_exits": exits,
    }


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
