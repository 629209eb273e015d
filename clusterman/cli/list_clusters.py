"""``clusterman list-clusters``: the clusters the srv-configs know, one a line (``--json``: a list)."""

from __future__ import annotations

import argparse
import json

from clusterman.batch.arguments import cluster_config_directory
from clusterman.batch.arguments import load_main
from clusterman.config.loader import list_clusters


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("list-clusters", help="list the clusters in the srv-configs")
    parser.add_argument("--json", action="store_true", help="a JSON list")
    parser.set_defaults(func=run_list_clusters)


def run_list_clusters(args: argparse.Namespace) -> int:
    main = load_main(args)
    clusters = list_clusters(main, cluster_config_directory(args, main))
    print(json.dumps(clusters) if args.json else "\n".join(clusters))
    return 0
