"""``clusterman generate-data --design FILE --output FILE``: synthetic metrics for signals and the simulator."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from clusterman.datastore.datafile import count_points
from clusterman.datastore.datafile import write_metrics_file
from clusterman.datastore.generate import generate
from clusterman.datastore.generate import load_design
from clusterman.errors import reading_input


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "generate-data",
        help="write synthetic metrics from a YAML design",
        description="Shapes, design format and examples: docs/metrics.md and config/metrics-designs/.",
    )
    parser.add_argument("--design", required=True, type=Path, help="the YAML design")
    parser.add_argument("--output", required=True, type=Path, help="the metrics file to write (.json.gz)")
    parser.add_argument("--seed", type=int, default=None, help="override the design's seed")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with reading_input():  # the design file, checked as it is generated
        design = load_design(args.design)
        if args.seed is not None:
            design = dataclasses.replace(design, seed=args.seed)
        data = generate(design)
    write_metrics_file(args.output, data)
    series = sum(len(by_key) for by_key in data.values())
    print(f"wrote {count_points(data)} points in {series} series to {args.output}")
    return 0
