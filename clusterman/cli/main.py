"""``clusterman <subcommand>``: the operator's and the signal author's command line.

Subcommands are imported lazily: ``COMMANDS`` names each one's module and help line, so listing
them (``clusterman --help``) imports none, and running one imports only its own module (the
Kubernetes client, boto3 and the simulator load only for the commands that use them). A module of
``clusterman.cli`` missing from the table still works, imported every time (a unit test keeps the
table complete and equal to what the modules register).

Errors: a ``clusterman.errors.Reported`` error (bad input, config or surroundings) or a missing
file prints one line on stderr and exits with status 1; anything else is a bug in clusterman and
keeps its traceback (exit status 1 too, from Python). A reader of stdout that leaves early
(``| head``) ends the command quietly, with status 0. Ctrl-C ends it with status 130 and no
traceback, whenever it comes: this module imports only the standard library at its top, ``main``
imports the rest inside its handler (a command's imports take most of a start-up), and from this
module's import on, a Ctrl-C that reaches the top (before ``main``'s handler) is not printed.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
import sys
from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Final

import clusterman.cli
from clusterman.errors import Reported


@dataclass(frozen=True)
class Command:
    """One subcommand as listed by ``clusterman --help``, and the module that registers it."""

    name: str
    module: str  # under clusterman.cli; its add_parser(subparsers) registers the command
    help: str
    aliases: tuple[str, ...] = ()


COMMANDS: Final = (
    Command(
        "collect-metrics",
        "collect_metrics",
        "write the pools' system metrics to the metrics store (once, or every run_interval_seconds)",
    ),
    Command("config", "config", "check srv-configs files before applying them"),
    Command("events", "events", "show what the autoscaler did and why"),
    Command("generate-data", "generate_data", "write synthetic metrics from a YAML design"),
    Command("interrupt", "interrupt", "send a Spot interruption warning for one of a pool's instances"),
    Command("list-clusters", "list_clusters", "list the clusters in the srv-configs"),
    Command("list-pools", "list_pools", "list a cluster's pools"),
    Command("manage", "manage", "set a pool's target capacity by hand (limited as the autoscaler)"),
    Command("metrics", "metrics", "read and write the metrics datastore"),
    Command("migrate", "migrate", "replace a pool's nodes that do not meet a condition"),
    Command("migrate-stop", "migrate", "stop a pool's pending and running node migrations"),
    Command("plan", "plan", "print what a pool's next run would decide (read live, or from a snapshot), and why"),
    Command("setup", "setup", "create the state and metrics tables the main file names"),
    Command("signal", "signal", "work with signals", ("signals",)),
    Command(
        "simulate",
        "simulate",
        "replay a pool's metrics through the real autoscaler: cost, shortfall, scaling actions",
    ),
    Command("status", "status", "show a pool's groups, nodes, utilisation and last decisions"),
    Command("disable", "toggle", "pause a pool's autoscaler"),
    Command("enable", "toggle", "resume a paused pool's autoscaler"),
)
NOT_COMMANDS: Final = frozenset({"main", "plan_input"})


def _quiet_ctrl_c(kind: type[BaseException], error: BaseException, traceback: TracebackType | None) -> None:
    """``sys.excepthook`` for the moment between this module's import and ``main``'s handler."""
    if not issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, error, traceback)


def _quiet_unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    """``sys.unraisablehook``: a Ctrl-C that lands in a callback of an import's machinery (a
    module lock's) is printed as "Exception ignored in: ..." with a traceback otherwise."""
    if not isinstance(unraisable.exc_value, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)


if sys.excepthook is sys.__excepthook__:
    sys.excepthook = _quiet_ctrl_c
if sys.unraisablehook is sys.__unraisablehook__:
    sys.unraisablehook = _quiet_unraisable  # modules of clusterman.cli that register nothing

# One line, exit status 1: errors a person can act on (a path given that is missing, a directory,
# or not ours to read). ValueError is not here: from a library or our own code it is a bug, and
# its traceback is what finds it.
USER_ERRORS: Final[tuple[type[Exception], ...]] = (
    Reported,
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)


def unlisted_modules() -> list[str]:
    """Modules of clusterman.cli that ``COMMANDS`` does not name (imported eagerly, to be listed)."""
    listed = {c.module for c in COMMANDS} | NOT_COMMANDS
    return sorted(m.name for m in pkgutil.iter_modules(clusterman.cli.__path__) if m.name not in listed)


def _register(module_name: str, subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    module = importlib.import_module(f"clusterman.cli.{module_name}")
    add_parser = getattr(module, "add_parser", None)
    if add_parser is not None:
        add_parser(subparsers)


def build_parser(load: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The parser with the commands of the modules in ``load`` complete (None: every module).

    The other commands are listed with their help line only, enough to choose one.
    """
    from clusterman.batch.arguments import add_program_arguments

    parser = argparse.ArgumentParser(prog="clusterman", description="An autoscaler for one pool of cloud machines.")
    parser.add_argument("--version", action="version", version=f"clusterman {clusterman.__version__}")
    add_program_arguments(parser, log_level_default="WARNING")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    loaded = {c.module for c in COMMANDS} if load is None else set(load)
    registered: set[str] = set()
    for command in COMMANDS:
        if command.module not in loaded:
            subparsers.add_parser(command.name, aliases=list(command.aliases), help=command.help, add_help=False)
        elif command.module not in registered:  # the module registers all of its commands at once
            registered.add(command.module)
            _register(command.module, subparsers)
    for module_name in unlisted_modules():
        _register(module_name, subparsers)
    _values_may_start_with_a_dash(parser)
    return parser


def _values_may_start_with_a_dash(parser: argparse.ArgumentParser) -> None:
    """``--until -10m`` gives ``-10m`` to the option, whose check says what is wrong with it (a
    pause ends in the future): argparse took it for an option and said only "expected one
    argument". No option of clusterman starts with a dash and a digit."""
    parser._negative_number_matcher = re.compile(r"^-\d")  # argparse's own test, widened from -5 and -.5
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _values_may_start_with_a_dash(sub)


def chosen_module(argv: list[str] | None) -> str | None:
    """The module of the command ``argv`` names, found without importing any command module.

    Exits like argparse (usage on stderr, status 2) when no known command is given, and prints
    the list of commands for ``clusterman --help``.
    """
    args, _ = build_parser(load=()).parse_known_args(argv)
    for command in COMMANDS:
        if args.command == command.name or args.command in command.aliases:
            return command.module
    return None  # registered by an unlisted module, already complete


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C: at start-up (the command's imports) as while it runs
        return 130


def _main(argv: list[str] | None) -> int:
    from clusterman.batch.arguments import configure_logging
    from clusterman.batch.arguments import reader_left

    module = chosen_module(argv)
    parser = build_parser(load=() if module is None else (module,))
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        status = func(args)
        sys.stdout.flush()  # a pipe is block-buffered: its last write happens here, not at exit
        return status
    except USER_ERRORS as e:
        print(f"clusterman {command_words(args)}: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return reader_left()


def command_words(args: argparse.Namespace) -> str:
    """``signal publish``, not ``signal``: a command's action is named with it (``<command>_command``)."""
    actions = [value for name, value in vars(args).items() if name.endswith("_command") and isinstance(value, str)]
    return " ".join([args.command, *actions])


if __name__ == "__main__":
    sys.exit(main())
