"""``clusterman collect-metrics``: the metrics collector batch, from the command line."""

from __future__ import annotations

import argparse

from clusterman.batch import metrics_collector


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "collect-metrics",
        help="write the pools' system metrics to the metrics store (once, or every run_interval_seconds)",
    )
    metrics_collector.add_arguments(parser)
    parser.set_defaults(func=metrics_collector.run)
