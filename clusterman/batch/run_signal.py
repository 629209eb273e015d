"""``run_clusterman_signal N``: become signal number N of the tree, served from its fetched version.

One process of supervisord's ``run_signals`` group. It picks version, namespace, name and app
from the ``CMAN_SIGNAL_*`` lists and replaces itself (exec, same pid, so supervisord's signals
and restarts reach the runner) with ``{install}/venv/bin/python -I -m clusterman_signals.run``
(the install the bootstrap checked for this tree, ``$CMAN_SIGNAL_INSTALLS``, else the version's
link), after asking for SIGKILL when supervisord dies (kept across exec).
``-I`` and the version directory as working directory keep this checkout's own
``clusterman_signals`` (or a $PYTHONPATH) from shadowing the fetched one.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from clusterman.tree.environment import SignalProcess
from clusterman.tree.environment import TreeEnvironmentError
from clusterman.tree.environment import runner_environment
from clusterman.tree.environment import signal_install
from clusterman.tree.environment import signal_process
from clusterman.tree.parent_death import die_with_parent

PROG = "run_clusterman_signal"


def runner_command(version_dir: Path, process: SignalProcess) -> list[str]:
    python = version_dir / "venv" / "bin" / "python"
    return [str(python), "-I", "-m", "clusterman_signals.run", process.namespace, process.name, process.app]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    die_with_parent(os.getppid(), signal.SIGKILL)  # kept across exec: the runner dies with supervisord
    if len(args) != 1 or not args[0].isdigit():
        print(f"usage: {PROG} PROCESS_NUMBER", file=sys.stderr)
        return 2
    try:
        process = signal_process(os.environ, int(args[0]))
        signals_dir = os.environ.get("CMAN_SIGNALS_DIR")
        if not signals_dir:
            raise TreeEnvironmentError("$CMAN_SIGNALS_DIR is not set")
        version_dir = Path(signals_dir) / signal_install(os.environ, int(args[0]), process.version)
    except TreeEnvironmentError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    command = runner_command(version_dir, process)
    if not os.access(command[0], os.X_OK):
        print(f"{PROG}: signal version {process.version} is not fetched: {command[0]} is missing", file=sys.stderr)
        return 1
    os.chdir(version_dir)
    os.execve(command[0], command, runner_environment(os.environ))
    return 1  # not reached: execve replaced this process


if __name__ == "__main__":
    sys.exit(main())
