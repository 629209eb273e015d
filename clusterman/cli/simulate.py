"""``clusterman simulate``: replay a pool's history through the real autoscaler, with cost and shortfall.

    clusterman simulate --pool-config FILE [--metrics-data-files FILE...] [--start T --end T]
        [--join-delay MEAN STDEV] [--seed N] [--output-prefix P] [--compare RUN.json]

Writes P.json (the summary; the same inputs and seed give the same bytes) and, with matplotlib
installed (the ``simulator`` extra), P.png (capacity against demand); prints the summary, and with
``--compare`` the two runs side by side. docs/simulator.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from clusterman.batch.arguments import load_main
from clusterman.data import shipped_instead
from clusterman.simulator.compare import load_summary
from clusterman.simulator.compare import side_by_side
from clusterman.simulator.inputs import Request
from clusterman.simulator.inputs import SimulationInputError
from clusterman.simulator.inputs import load_scenario
from clusterman.simulator.plot import NoPlotter
from clusterman.simulator.plot import write_plot
from clusterman.simulator.progress import ProgressBar
from clusterman.simulator.report import summary
from clusterman.simulator.report import text
from clusterman.simulator.report import to_json
from clusterman.simulator.signals import SignalMode
from clusterman.simulator.simulation import simulate

LONG_RUN_MINUTES = 1440  # "auto" shows a progress bar from one simulated day, on a terminal


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="replay a pool's metrics through the real autoscaler: cost, shortfall, scaling actions",
        description="Inputs, outputs and how to read the plot: docs/simulator.md.",
    )
    parser.add_argument("--metrics-data-files", nargs="+", default=[], type=Path, metavar="FILE",
                        help="metrics files: generate-data output, or Clusterman's simulator files (default: "
                             "the pool file's simulation.trace)")  # fmt: skip
    parser.add_argument("--pool-config", required=True, type=Path, metavar="FILE",
                        help="the pool's srv-configs file (its simulation block describes the instances)")  # fmt: skip
    parser.add_argument("--cluster", help="default: the pool the metrics files describe")
    parser.add_argument("--pool", help="default: the pool file's name (<pool>.<scheduler>), else the files'")
    parser.add_argument("--scheduler", help="default: the pool file's suffix, else the files'")
    parser.add_argument("--start", help="Unix seconds or ISO 8601 (default: the first demand point)")
    parser.add_argument("--end", help="Unix seconds or ISO 8601 (default: a minute after the last demand point)")
    parser.add_argument("--join-delay", nargs=2, type=float, metavar=("MEAN", "STDEV"),
                        help="seconds from launch to joining (default: the simulation block's)")  # fmt: skip
    parser.add_argument("--seed", type=int, help="default: the simulation block's seed")
    parser.add_argument("--signals", choices=[m.value for m in SignalMode], default=SignalMode.IN_PROCESS.value,
                        help="evaluate signals in this process (fast) or in real runner processes")  # fmt: skip
    parser.add_argument("--output-prefix", default="simulation", help="write P.json and P.png (default: simulation)")
    parser.add_argument("--compare", type=Path, metavar="RUN.json", help="print this run beside an earlier one")
    parser.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                        help="a progress bar on stderr (auto: a simulated day or more, on a terminal)")  # fmt: skip
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    other = load_summary(args.compare) if args.compare else None  # a bad file fails before the run
    request = Request(
        pool_config=_shipped(args.pool_config),
        metrics_files=[_shipped(path) for path in args.metrics_data_files],
        cluster=args.cluster,
        pool=args.pool,
        scheduler=args.scheduler,
        start=args.start,
        end=args.end,
        join_delay=tuple(args.join_delay) if args.join_delay else None,
        seed=args.seed,
        signals=SignalMode(args.signals),
    )
    scenario = load_scenario(load_main(args), request)
    for note in scenario.notes:
        print(f"clusterman simulate: {note}", file=sys.stderr)
    json_path, png_path = Path(f"{args.output_prefix}.json"), Path(f"{args.output_prefix}.png")
    try:
        json_path.parent.mkdir(parents=True, exist_ok=True)  # a path that cannot be written fails before the run
    except OSError as e:
        raise _unwritable(args.output_prefix, e) from e
    minutes = len(scenario.steps)
    show = args.progress == "always" or (
        args.progress == "auto" and minutes >= LONG_RUN_MINUTES and sys.stderr.isatty()
    )
    started = time.monotonic()
    result = simulate(scenario, progress=ProgressBar(sys.stderr, "simulating") if show else None)
    document = summary(result, str(args.pool_config), [str(p) for p in args.metrics_data_files])
    try:
        json_path.write_text(to_json(document))
        print(text(document), end="")
        try:
            write_plot(png_path, result.timeline, text(document).splitlines()[0])
            wrote = f"{json_path} and {png_path}"
        except NoPlotter as e:  # the summary and the JSON are the run's answer; the picture is extra
            wrote = f"{json_path} (no {png_path}: {e})"
    except OSError as e:
        raise _unwritable(args.output_prefix, e) from e
    print(f"wrote {wrote} ({time.monotonic() - started:.1f} s)")
    if other is not None:
        print()
        print(side_by_side(document, other, str(args.compare)), end="")
    return 0


def _shipped(path: Path) -> Path:
    """``config/...`` not found here: the copy clusterman ships (the docs' examples, run anywhere)."""
    packaged = shipped_instead(path)
    if packaged is None:
        return path
    print(f"clusterman simulate: {path} is not here: reading the copy clusterman ships, {packaged}", file=sys.stderr)
    return packaged


def _unwritable(prefix: str, error: OSError) -> SimulationInputError:
    return SimulationInputError(f"--output-prefix {prefix}: cannot write: {error.strerror or error}")
