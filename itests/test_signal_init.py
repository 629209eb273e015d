"""A new signal author's first hour: ``clusterman signal init`` makes a repository that works as
it is, a failing signal's traceback names the author's file, and a mistyped namespace is one line.

Before: a fresh repository needed the SDK, which two errors in a row taught (no
``clusterman_signals/__init__.py``, then no ``base_signal.py, run.py, ...``); a failing signal's
traceback pointed into the temporary virtualenv's copy; a mistyped namespace printed importlib's
own traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def clusterman(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CMAN_SIGNAL_SOCKET_PREFIX": f"init-{uuid.uuid4().hex[:8]}-"}  # sockets of its own
    return subprocess.run(
        [sys.executable, "-m", "clusterman", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def evaluate(repo: Path, namespace: str, name: str) -> subprocess.CompletedProcess[str]:
    return clusterman(repo, "signal", "evaluate", "--start", "--namespace", namespace, "--name", name,
                      "--metrics", "metrics.json")  # fmt: skip


def test_init_makes_a_repository_that_answers_and_says_where_it_broke(tmp_path):
    done = clusterman(tmp_path, "signal", "init", "signals", "--namespace", "web", "--name", "Queue")
    assert done.returncode == 0, done.stderr
    repo = tmp_path / "signals"
    assert "python -m pytest tests" in done.stdout and "--namespace web --name Queue" in done.stdout
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=repo,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert tests.returncode == 0, tests.stdout + tests.stderr
    answered = evaluate(repo, "web", "Queue")
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.strip() == '{"cpus": 1.0, "mem": null, "disk": null, "gpus": null}'

    module = repo / "clusterman_signals" / "web" / "__init__.py"
    module.write_text(module.read_text().replace("points[-1][1] * per_item", "points[-1][1] / 0"))
    broken = evaluate(repo, "web", "Queue")
    assert broken.returncode == 1
    assert f'File "{module.resolve()}", line ' in broken.stderr, broken.stderr  # the author's file
    assert "site-packages" not in broken.stderr, broken.stderr

    typo = evaluate(repo, "wbe", "Queue")
    assert typo.returncode == 1 and "Traceback" not in typo.stderr, typo.stderr
    assert "no namespace clusterman_signals.wbe (namespaces here: clusterman, web)" in typo.stderr
    name = evaluate(repo, "web", "Queu")
    assert "clusterman_signals.web has no signal named Queu (signals there: Queue)" in name.stderr

    again = clusterman(tmp_path, "signal", "init", "signals")
    assert again.returncode == 1 and again.stderr.endswith("exists already: init makes a new repository\n")
    bad = clusterman(tmp_path, "signal", "init", "other", "--namespace", "my-signals")
    assert bad.returncode == 1 and "--namespace 'my-signals' is not a Python identifier" in bad.stderr
