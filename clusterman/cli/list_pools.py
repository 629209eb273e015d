"""``clusterman list-pools [--cluster C]``: a cluster's pools from its pool files, by scheduler.

As Clusterman prints them: a heading per scheduler and one pool a line; ``--json`` gives
``{scheduler: [pool, ...]}`` with every scheduler present; ``--scheduler`` gives bare pool names.
"""

from __future__ import annotations

import argparse
import json
import os

from clusterman.batch.arguments import cluster_config_directory
from clusterman.batch.arguments import load_main
from clusterman.config.loader import list_clusters
from clusterman.config.loader import list_pools
from clusterman.config.loader import parse_scheduler
from clusterman.core.config import Scheduler
from clusterman.core.config_schema import ConfigError


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("list-pools", help="list a cluster's pools")
    parser.add_argument("--cluster", default=os.environ.get("CMAN_CLUSTER"), help="default: $CMAN_CLUSTER")
    parser.add_argument("--scheduler", help="only this scheduler's pools, one name a line")
    parser.add_argument("--json", action="store_true", help="{scheduler: [pool, ...]}")
    parser.set_defaults(func=run_list_pools)


def run_list_pools(args: argparse.Namespace) -> int:
    main = load_main(args)
    directory = cluster_config_directory(args, main)
    if not args.cluster:
        raise ConfigError("arguments", "", "--cluster is required (or $CMAN_CLUSTER)")
    known = list_clusters(main, directory)
    if args.cluster not in known:
        raise ConfigError("clusters", args.cluster, f"unknown cluster (known: {', '.join(known) or 'none'})")
    by_scheduler: dict[str, list[str]] = {s.value: [] for s in Scheduler}
    for identity in list_pools(directory, args.cluster):
        by_scheduler[identity.scheduler.value].append(identity.pool)
    if args.scheduler:
        print("\n".join(by_scheduler[parse_scheduler(args.scheduler).value]))
    elif args.json:
        print(json.dumps(by_scheduler))
    else:
        print("\n\n".join(f"{s.capitalize()} pools\n" + "\n".join(pools) for s, pools in by_scheduler.items() if pools))
    return 0
