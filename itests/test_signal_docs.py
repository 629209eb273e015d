"""The example in docs/signals.md ("Trying a signal") runs as written and prints what the page shows."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_the_trying_a_signal_example_answers_as_documented() -> None:
    page = (REPO / "docs" / "signals.md").read_text()
    block = re.search(r"## Trying a signal\n\n```sh\n(.*?)```", page, re.S)
    assert block is not None
    command, _, shown = block.group(1).replace("\\\n", " ").partition("\n# ")
    argv = shlex.split(command)
    assert argv[0] == ".venv/bin/clusterman"
    env = {**os.environ, "CMAN_SIGNAL_SOCKET_PREFIX": f"docs-{uuid.uuid4().hex[:8]}-"}  # its own socket
    ran = subprocess.run(
        [sys.executable, "-m", "clusterman", *argv[1:]], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    answer, documented = json.loads(ran.stdout), json.loads(shown)
    assert answer.keys() == documented.keys()
    for key, value in documented.items():
        assert answer[key] == (value if value is None else pytest.approx(value, abs=0.01)), key
