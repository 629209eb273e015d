"""``clusterman config check``: a main file and its pool files, checked before they are applied.

As ``promtool check config`` does for Prometheus: offline (no AWS, no cluster, no signal is
reached), with the loader the autoscaler and its bootstrap load them with, so every key they know
is checked as they check it. The main file (``--env-config-path``) and every pool file under its
``cluster_config_directory`` (``<cluster>/<pool>.<scheduler>``), or only the pool files given.
For each pool, what the bootstrap works out before it starts anything: the file against the
schema, its cluster in the main file, its limits as the autoscaler reads them, its signals (the
default one, its own, its ``app_signals``: names and versions). One line per problem on stdout,
naming the file and the key; then one line of summary. Status 0 when nothing is wrong, 1 otherwise.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

from clusterman.batch.arguments import cluster_config_directory
from clusterman.config.loader import list_clusters
from clusterman.config.loader import list_pools
from clusterman.config.loader import load_main_config
from clusterman.config.loader import load_pool_file
from clusterman.config.loader import pool_config_path
from clusterman.core.config import MainConfig
from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.core.config import split_scheduler
from clusterman.errors import Reported


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("config", help="check srv-configs files before applying them")
    actions = parser.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    check = actions.add_parser(
        "check",
        help="check the main file and its pool files offline, as the autoscaler loads them: one line per problem",
    )
    check.add_argument(
        "pool_files",
        nargs="*",
        type=Path,
        metavar="POOL_FILE",
        help="only these pool files, each at <cluster>/<pool>.<scheduler> (default: every one of the main file's)",
    )
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    main_path = str(args.env_config_path)
    checked = 0
    problems = []
    try:
        main = load_main_config(main_path)
    except Reported as e:
        print(e)
        print(f"{main_path}: 1 problem, pool files not checked")
        return 1
    problems += main_problems(main, main_path)
    if args.pool_files:
        files = [(path, identity_of(path)) for path in args.pool_files]
    else:
        directory = cluster_config_directory(args, main)
        problems += unknown_clusters(main, directory)
        files = [
            (pool_config_path(directory, i), i)
            for c in list_clusters(main, directory)
            for i in list_pools(directory, c)
        ]
    for path, identity in files:
        checked += 1
        problems += pool_problems(main, main_path, path, identity)
    problems = list(dict.fromkeys(problems))  # one of the main file's, met at each pool, is said once
    for problem in problems:
        print(problem)
    verdict = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}" if problems else "ok"
    print(f"{main_path} and {checked} pool file{'s' if checked != 1 else ''}: {verdict}")
    return 1 if problems else 0


def identity_of(path: Path) -> PoolIdentity | str:
    """The pool a file is, by its place (``<cluster>/<pool>.<scheduler>``), or why it is none."""
    pool, scheduler = split_scheduler(path.name)
    if scheduler is None:
        known = ", ".join(s.value for s in Scheduler)
        return f"{path}: not a pool file: its name must be <pool>.<scheduler> ({known})"
    return PoolIdentity(path.resolve().parent.name, pool, scheduler)


def main_problems(main: MainConfig, main_path: str) -> list[str]:
    """What the main file names that the bootstrap reads before any pool: its AWS key file."""
    from clusterman.aws.session import read_access_key_file

    if not main.aws.access_key_file:
        return []
    try:
        read_access_key_file(main.aws.access_key_file)
    except Reported as e:
        return [f"{main_path}: aws.access_key_file: {e}"]
    return []


def unknown_clusters(main: MainConfig, directory: str) -> Iterator[str]:
    """Pool files under a cluster the main file does not name: no autoscaler reads them."""
    if not main.clusters or not Path(directory).is_dir():
        return
    for entry in sorted(Path(directory).iterdir()):
        if entry.is_dir() and entry.name not in main.clusters and list_pools(directory, entry.name):
            yield f"{entry}: pool files of cluster {entry.name}, which the main file's clusters do not name"


def pool_problems(main: MainConfig, main_path: str, path: Path, identity: PoolIdentity | str) -> list[str]:
    """The problem the bootstrap would stop at for this pool (it stops at the first), if any."""
    from clusterman.tree.environment import plan_tree
    from clusterman.wiring.setup import PoolSetup

    if isinstance(identity, str):
        return [identity]
    if main.clusters and identity.cluster not in main.clusters:
        known = ", ".join(sorted(main.clusters))
        return [f"{path}: cluster {identity.cluster} is not in the main file's clusters (known: {known})"]
    try:
        pool = load_pool_file(path, main)
        PoolSetup(main, identity, pool).policy  # noqa: B018 - the limits, as the autoscaler reads them
        plan_tree(main, main_path, pool, str(path), identity)
    except Reported as e:
        return [str(e)]
    return []
