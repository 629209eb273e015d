"""``clusterman <subcommand>``: the operator's and the signal author's command line.

Errors a person can fix (bad config, unreachable signal, bad input file) print one line on
stderr and exit with status 1; a traceback means a bug in clusterman.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from types import ModuleType

from clusterman.cli import generate_data as generate_data_cmd
from clusterman.cli import metrics as metrics_cmd
from clusterman.cli import signal as signal_cmd
from clusterman.config.loader import default_env_config_path
from clusterman.config.schema import ConfigError
from clusterman.metrics.store import MetricsError
from clusterman.signals.protocol import SignalError

# Each module defines add_parser(subparsers) and sets `func` (args -> exit status) on its parser.
SUBCOMMANDS: list[ModuleType] = [signal_cmd, metrics_cmd, generate_data_cmd]

USER_ERRORS: tuple[type[Exception], ...] = (ConfigError, SignalError, MetricsError, FileNotFoundError, ValueError)


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
    for module in SUBCOMMANDS:
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
