"""Arguments and lookups shared by the programs that act on one pool: the CLI's subcommands and the
autoscaler batch (here, below both, so that neither program imports the other)."""

from __future__ import annotations

import argparse
import os

from clusterman.config.loader import list_pools
from clusterman.config.loader import load_main_config
from clusterman.config.loader import load_pool_config
from clusterman.config.loader import parse_scheduler
from clusterman.core.config import MainConfig
from clusterman.core.config import PoolIdentity
from clusterman.core.config_schema import ConfigError
from clusterman.manager.setup import PoolSetup


def add_pool_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", default=os.environ.get("CMAN_CLUSTER"), help="default: $CMAN_CLUSTER")
    parser.add_argument("--pool", default=os.environ.get("CMAN_POOL"), help="default: $CMAN_POOL")
    parser.add_argument(
        "--scheduler",
        default=os.environ.get("CMAN_SCHEDULER"),
        help="kubernetes, mesos or simulated (default: $CMAN_SCHEDULER, or the only pool file of that name)",
    )


def load_main(args: argparse.Namespace) -> MainConfig:
    return load_main_config(args.env_config_path)


def cluster_config_directory(args: argparse.Namespace, main: MainConfig) -> str:
    return str(args.cluster_config_directory or main.cluster_config_directory)


def resolve_pool(args: argparse.Namespace) -> PoolSetup:
    """The main config, which pool the arguments name, and its validated config."""
    if not args.cluster or not args.pool:
        raise ConfigError("arguments", "", "--cluster and --pool are required (or $CMAN_CLUSTER and $CMAN_POOL)")
    main = load_main(args)
    directory = cluster_config_directory(args, main)
    if args.scheduler:
        identity = PoolIdentity(args.cluster, args.pool, parse_scheduler(args.scheduler))
    else:
        found = [p for p in list_pools(directory, args.cluster) if p.pool == args.pool]
        if len(found) != 1:
            where = f"{directory}/{args.cluster}"
            problem = "no pool file" if not found else "several pool files (give --scheduler)"
            raise ConfigError(where, args.pool, f"{problem} for pool {args.pool}")
        identity = found[0]
    return PoolSetup(main, identity, load_pool_config(main, identity, directory))
