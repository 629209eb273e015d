"""`make run` from a checkout whose path has a space in it.

Before, supervisord split its programs' commands at the space: no signal ever started, the
bootstrap waited 60 s to say `not answering after 60 s: signal ... (STOPPED)`, and with a shorter
`DURATION` the stack printed no decision and exited 0. No spawn error was logged anywhere:
supervisord answers it in the result of starting a group, which nothing read. Now every path in
supervisord.conf is quoted, and a program supervisord cannot start stops the tree with one ERROR
line naming it (`supervisord cannot start run_signals:run_signals_0: NO_FILE: can't find
command ...`).

The checkout is a copy of this one's files (its `.venv` linked, not rebuilt: `python -m` imports
the copy's `clusterman`, run from its directory); the run is short.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DECISION = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ demand .*\| target \d+ -> \d+ \|")


def copy_checkout(dest: Path) -> None:
    """This checkout's files (tracked, and new ones not ignored), with their times and links."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    for name in filter(None, listed.decode().split("\0")):
        source = REPO / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the work tree
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            (dest / name).symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, dest / name)
    (dest / ".venv").symlink_to(REPO / ".venv")


@pytest.mark.timeout(240)
def test_make_run_from_a_path_with_a_space(tmp_path):
    checkout = tmp_path / "my projects" / "clusterman"
    copy_checkout(checkout)
    # -o: the linked .venv is this checkout's; the copy must never install itself into it
    done = subprocess.run(
        ["make", "-s", "-o", ".venv/.installed", "run", "DURATION=20"],
        cwd=checkout, capture_output=True, text=True, timeout=200, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert any(DECISION.match(line) for line in done.stdout.splitlines()), out[-3000:]
    assert "stopped: no process of the stack is left" in done.stdout
    log = next((checkout / ".local-stack").glob("*/bootstrap.log")).read_text()
    assert " ERROR " not in log, log[-3000:]
    leftovers = subprocess.run(["pgrep", "-f", str(checkout)], capture_output=True, text=True)
    assert leftovers.stdout == "", leftovers.stdout
