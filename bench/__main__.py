"""``python -m bench [NAME ...] [--quick]``: run benchmarks and print one JSON document.

Each benchmark runs in a process of its own: one that builds 3 million pods leaves its process
holding GB that the next one's figures would count (peak memory, and the memory left for the
10,000-node re-list, which is skipped when the machine has too little), and a large heap slows
the garbage collector of whatever runs after it."""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import bench


def discover() -> list[str]:
    return sorted(
        m.name for m in pkgutil.iter_modules([str(Path(bench.__file__).parent)]) if not m.name.startswith("_")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("names", nargs="*", help=f"benchmarks to run (default: all of {', '.join(discover())})")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--output", type=Path, default=None, help="also write the JSON here")
    parser.add_argument("--here", action="store_true", help=argparse.SUPPRESS)  # one, in this process
    args = parser.parse_args(argv)
    if args.here:
        (name,) = args.names
        print(json.dumps(importlib.import_module(f"bench.{name}").run(quick=args.quick)))
        return 0
    results: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": _cpus()},
        "benchmarks": {},
    }
    for name in args.names or discover():
        started = time.perf_counter()
        print(f"bench: running {name}...", file=sys.stderr)
        results["benchmarks"][name] = _in_own_process(name, args.quick)
        results["benchmarks"][name]["wall_seconds"] = round(time.perf_counter() - started, 2)
    text = json.dumps(results, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")
    return 0


def _in_own_process(name: str, quick: bool) -> Any:
    """``name``'s results, run by a fresh interpreter; what else it prints goes to stderr, so that
    stdout stays one JSON document."""
    command = [sys.executable, "-m", "bench", "--here", name, *(["--quick"] if quick else [])]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench: {name} failed (exit {done.returncode}); its output is above")
    *said, last = done.stdout.strip().splitlines() or [""]
    if said:
        print("\n".join(said), file=sys.stderr)
    return json.loads(last)


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    sys.exit(main())
