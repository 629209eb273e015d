"""Start-up of the ``clusterman`` command, next to ``python -c pass`` measured in the same run.

Each figure is the best of a few whole-process runs (a fresh interpreter each time):
  help          ``python -m clusterman --help``
  command_help  ``python -m clusterman signal evaluate --help``
  evaluate      ``python -m clusterman signal evaluate`` of a three-point metrics file against a
                runner already listening (the whole command, as a signal author runs it)
and, for the last two, the same arguments through a parser with every subcommand imported (how
the command line was built before subcommands were imported lazily), so the gain is measured
on this machine in this run, not remembered.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench._timing import best_of
from clusterman.signals.client import SignalAddress

EAGER = (
    "import sys\n"
    "from clusterman.cli.main import build_parser\n"
    "args = build_parser().parse_args(sys.argv[1:])\n"
    "sys.exit(args.func(args))\n"
)
ROOT = Path(__file__).resolve().parents[1]


def _run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)


def _timed(argv: list[str], repeat: int) -> float:
    return best_of(lambda: _run(argv), repeat)


def _wait_for(address: SignalAddress, runner: subprocess.Popen[bytes], deadline: float) -> None:
    while time.monotonic() < deadline:
        if runner.poll() is not None:
            raise RuntimeError(f"the signal runner exited with status {runner.returncode}")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(address.socket_name)
                return
            except OSError:
                time.sleep(0.05)
    raise RuntimeError(f"the signal runner did not listen on {address.socket_name[1:]!r}")


def run(quick: bool) -> dict[str, Any]:
    repeat = 3 if quick else 7
    py = sys.executable
    env_note = {"python": py}
    baseline = _timed([py, "-c", "pass"], repeat)
    result: dict[str, Any] = {"baseline_python_c_pass_seconds": round(baseline, 3), **env_note}

    def figure(lazy: list[str], eager: list[str] | None = None) -> dict[str, Any]:
        seconds = _timed(lazy, repeat)
        out = {"seconds": round(seconds, 3), "ratio_to_baseline": round(seconds / baseline, 2)}
        if eager is not None:
            before = _timed(eager, repeat)
            out["eager_parser_seconds"] = round(before, 3)
            out["eager_ratio_to_baseline"] = round(before / baseline, 2)
            out["speed_up"] = round(before / seconds, 2)
        return out

    result["help"] = figure([py, "-m", "clusterman", "--help"])
    command = ["signal", "evaluate", "--help"]
    result["command_help"] = figure([py, "-m", "clusterman", *command], [py, "-c", EAGER, *command])
    address = SignalAddress("clusterman", "MostRecentResources", f"bench-{uuid.uuid4().hex[:12]}")
    runner = subprocess.Popen(
        [py, "-m", "clusterman_signals.run", address.namespace, address.name, address.app],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(address, runner, time.monotonic() + 60)
        with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
            metrics = Path(tmp) / "metrics.json"
            points = [[1700000000 + 60 * i, 4.0] for i in range(3)]
            metrics.write_text(json.dumps({"metrics": {"cpus_allocated": points}}))
            command = ["signal", "evaluate", "--namespace", address.namespace, "--name", address.name]
            command += ["--app", address.app, "--metrics", str(metrics)]
            result["evaluate"] = figure([py, "-m", "clusterman", *command], [py, "-c", EAGER, *command])
    finally:
        runner.terminate()
        try:
            runner.wait(timeout=10)
        except subprocess.TimeoutExpired:
            runner.kill()
            runner.wait()
    return result
