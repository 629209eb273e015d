"""``python -m clusterman.batch.parent_death NAME COMMAND...``: run COMMAND so that it dies with
its parent (supervisord), noting each start of NAME for the bootstrap's crash-loop count
(``clusterman/tree/parent_death.py`` says why).
"""

from __future__ import annotations

import os
import signal
import sys

from clusterman.tree.parent_death import die_with_parent
from clusterman.tree.parent_death import note_start

PROG = "parent_death"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print(f"usage: python -m clusterman.batch.{PROG} NAME COMMAND [ARG...]", file=sys.stderr)
        return 2
    name, command = args[0], args[1:]
    parent = os.getppid()
    die_with_parent(parent, signal.SIGKILL)  # supervisord is gone: nothing is left to stop us in order
    try:
        note_start(os.environ.get("CMAN_SUPERVISOR_DIR"), name)
    except OSError as e:  # a full disk must not stop the program: the crash-loop count misses a start
        print(f"{PROG}: cannot note this start of {name}: {e.strerror or e}", file=sys.stderr, flush=True)
    try:
        os.execvp(command[0], command)
    except OSError as e:
        print(f"{PROG}: cannot run {command[0]}: {e.strerror}", file=sys.stderr)
        return 127
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
