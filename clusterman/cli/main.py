"""``clusterman <subcommand>``: the operator's and the signal author's command line.

Errors a person can fix (bad config, unreachable signal, bad input file) print one line on
stderr and exit with status 1; a traceback means a bug in clusterman.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
from collections.abc import Callable
from types import ModuleType

import clusterman.cli
from clusterman.config.loader import default_env_config_path
from clusterman.errors import UserError


def subcommands() -> list[ModuleType]:
    """Every module of clusterman.cli with ``add_parser(subparsers)``, which sets ``func`` on its parser."""
    modules = []
    for info in sorted(pkgutil.iter_modules(clusterman.cli.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"clusterman.cli.{info.name}")
        if hasattr(module, "add_parser"):
            modules.append(module)
    return modules


USER_ERRORS: tuple[type[Exception], ...] = (UserError, FileNotFoundError, ValueError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="clusterman", description="An autoscaler for one pool of cloud machines.")
    parser.add_argument(
        "--env-config-path",
        default=default_env_config_path(),
        help="the main config file (default: $CMAN_ENV_CONFIG_PATH, /nail/srv/configs/clusterman.yaml, "
        "or this checkout's config/clusterman.yaml)",
    )
    parser.add_argument(
        "--cluster-config-directory",
        default=None,
        help="the directory of <cluster>/<pool>.<scheduler> files (default: from the main config)",
    )
    parser.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING or ERROR")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in subcommands():
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except USER_ERRORS as e:
        print(f"clusterman {args.command}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
