"""``python -m bench [NAME ...] [--quick]``: run benchmarks and print one JSON document."""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import platform
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
    args = parser.parse_args(argv)
    results: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": _cpus()},
        "benchmarks": {},
    }
    for name in args.names or discover():
        module = importlib.import_module(f"bench.{name}")
        started = time.perf_counter()
        print(f"bench: running {name}...", file=sys.stderr)
        results["benchmarks"][name] = module.run(quick=args.quick)
        results["benchmarks"][name]["wall_seconds"] = round(time.perf_counter() - started, 2)
    text = json.dumps(results, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")
    return 0


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    sys.exit(main())
