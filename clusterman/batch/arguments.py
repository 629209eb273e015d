"""Arguments shared by clusterman's programs (the CLI, the autoscaler, its bootstrap, the metrics
collector), their one logging setup, and the lookups of the programs that act on one pool. Here,
below all of them, so that no program imports another.

Light on purpose: ``clusterman --help`` imports this module, so the config loader and the pool's
setup are imported only by the functions that read them.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from typing import TYPE_CHECKING

from clusterman.core.durations import parse_duration
from clusterman.core.timestamps import format_time
from clusterman.core.timestamps import parse_time

if TYPE_CHECKING:
    from clusterman.core.config import MainConfig
    from clusterman.wiring.setup import PoolSetup
    from clusterman.wiring.setup import PoolTarget

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def log_level(text: str) -> str:
    """``--log-level``: a level name in any case, upper-cased for ``logging``."""
    level = text.upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"expected DEBUG, INFO, WARNING or ERROR, got {text!r}")
    return level


def env_config_path(text: str) -> str:
    """``--env-config-path``: the path given, or (none or empty) the default, looked up only now."""
    if text:
        return text
    from clusterman.config.loader import default_env_config_path

    return default_env_config_path()


def time_argument(text: str) -> float:
    """An option that names a moment: Unix seconds or ISO 8601, read as every time is read."""
    try:
        return parse_time(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def timeout_argument(text: str) -> float:
    """``--timeout``: seconds, a number > 0."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not seconds > 0 or math.isinf(seconds):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return seconds


def duration_argument(text: str) -> float:
    """An option that is a length of time, in the one grammar (``core/durations.py``): ``2m``, ``90``."""
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def count_argument(text: str) -> int:
    """An option that counts things: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of at least 0, got {value}")
    return value


def add_timeout_argument(parser: argparse.ArgumentParser, default: float, bounds: str) -> None:
    """An operator command's ``--timeout`` (seconds): ``bounds`` says what it bounds."""
    parser.add_argument("--timeout", type=timeout_argument, default=default, help=f"{bounds} (default {default:g} s)")


def add_program_arguments(
    parser: argparse.ArgumentParser, *, log_level_default: str = "INFO", pool_files: bool = True
) -> None:
    """``--env-config-path`` and ``--log-level`` (and, with ``pool_files``, ``--cluster-config-directory``),
    declared once for every program; only the default log level differs (the CLI is quieter)."""
    parser.add_argument(
        "--env-config-path",
        type=env_config_path,
        default="",  # argparse runs a string default through ``type``: the lookup happens at parse time
        help="the main config file (default: $CMAN_ENV_CONFIG_PATH, /nail/srv/configs/clusterman.yaml, "
        "or the config/clusterman.yaml clusterman ships)",
    )
    if pool_files:
        parser.add_argument(
            "--cluster-config-directory",
            default=None,
            help="the directory of <cluster>/<pool>.<scheduler> files (default: from the main config)",
        )
    parser.add_argument(
        "--log-level",
        type=log_level,
        default=log_level_default,
        help=f"DEBUG, INFO, WARNING or ERROR (default: {log_level_default})",
    )


class UtcFormatter(logging.Formatter):
    """Log records stamped as every time is printed (ISO 8601 UTC, milliseconds), not in local time."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return format_time(record.created, digits=3)


def configure_logging(level: str, prefix: str = "") -> None:
    """The one logging setup of every program: records on stderr, stamped in UTC (after ``prefix``,
    which names the program where several share one stream)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(UtcFormatter(prefix + LOG_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])


def add_pool_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", default=os.environ.get("CMAN_CLUSTER"), help="default: $CMAN_CLUSTER")
    parser.add_argument("--pool", default=os.environ.get("CMAN_POOL"), help="default: $CMAN_POOL")
    parser.add_argument(
        "--scheduler",
        default=os.environ.get("CMAN_SCHEDULER"),
        help="kubernetes, mesos or simulated (default: $CMAN_SCHEDULER, or the only pool file of that name)",
    )


def load_main(args: argparse.Namespace) -> MainConfig:
    from clusterman.config.loader import load_main_config

    return load_main_config(args.env_config_path)


def cluster_config_directory(args: argparse.Namespace, main: MainConfig) -> str:
    return str(args.cluster_config_directory or main.cluster_config_directory)


def resolve_identity(args: argparse.Namespace) -> PoolTarget:
    """The main config and which pool the arguments name, without reading the pool's file: what
    needs only these (a pause, the state store, the event API) works while that file is broken."""
    from clusterman.config.loader import list_pools
    from clusterman.config.loader import parse_scheduler
    from clusterman.core.config import PoolIdentity
    from clusterman.core.config_schema import ConfigError
    from clusterman.wiring.setup import PoolTarget

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
    return PoolTarget(main, identity, directory)


def resolve_pool(args: argparse.Namespace) -> PoolSetup:
    """The main config, which pool the arguments name, and its validated config."""
    return resolve_identity(args).setup()


def reader_left() -> int:
    """stdout's reader went away (``| head``): what it did not read is nobody's loss, so the exit
    status is 0. Python's own flush at exit would fail on the same pipe: stdout goes to /dev/null."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0
