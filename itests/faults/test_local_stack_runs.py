"""Two local stacks on one host (issue 11 item 10, issue 12): a second `make run` must not destroy
the first, must not share its signal sockets, and a failing bootstrap says why in one line.

Real stacks (moto's server, the bootstrap, supervisord) in a temporary base directory, and real
processes holding a run's lock, killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterman.local import rundir

REPO = Path(__file__).resolve().parents[2]


def stack(base: Path, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "clusterman.local.stack", "--base-dir", str(base), *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def read_until(proc: subprocess.Popen[str], text: str, timeout: float = 120.0) -> str:
    assert proc.stdout is not None
    seen = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        seen += line
        if text in line:
            return seen
    raise AssertionError(f"{text!r} never came:\n{seen}")


def holder(path: Path) -> subprocess.Popen[str]:
    """A process owning ``path`` as a live stack would."""
    code = (
        "import sys, time; from clusterman.local import rundir; rundir.claim(__import__('pathlib').Path(sys.argv[1]));"
    )
    code += " print('held', flush=True); time.sleep(600)"
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_dead_owners_directory_is_taken_over_and_a_live_ones_never(tmp_path):
    run = tmp_path / "20260101-000000-1"
    owner = holder(run)
    try:
        (run / "logs").mkdir()
        assert rundir.owner(run) == owner.pid
        with pytest.raises(rundir.StackBusy, match=rf"belongs to a running local stack \(pid {owner.pid}\)"):
            rundir.claim(run)
        assert rundir.clean_finished(tmp_path, keep=0, current="none") == []
        assert (run / "logs").is_dir(), "a live run's files are left alone"
    finally:
        owner.kill()  # SIGKILL: no clean-up of its own; the kernel drops the lock
        owner.wait()
    assert rundir.owner(run) is None
    taken = rundir.claim(run)
    try:
        assert not (run / "logs").exists(), "the dead run's leftovers are cleared for the new owner"
        assert (run / rundir.LOCK_NAME).read_text().strip() == str(os.getpid())
    finally:
        taken.release()
    (tmp_path / "not-a-run").mkdir()
    (tmp_path / "not-a-run" / "precious.txt").write_text("x")
    with pytest.raises(rundir.StackBusy, match="not empty and not a local stack's directory"):
        rundir.claim(tmp_path / "not-a-run")


def test_a_second_stack_leaves_the_first_alone_and_says_why_its_bootstrap_failed(tmp_path):
    base = tmp_path / "stacks"
    broken = tmp_path / "config"
    subprocess.run(["cp", "-r", str(REPO / "config"), str(broken)], check=True)
    pool_file = broken / "clusterman-clusters" / "local-dev" / "default.simulated"
    pool_file.write_text(pool_file.read_text() + "\nscaling_limit: {}\n")  # a typo'd key

    first = stack(base, "--duration", "300")
    try:
        read_until(first, "bootstrap started")
        (first_dir,) = [p for p in base.iterdir() if p.name != "latest"]
        bootstrap_pid = int(
            subprocess.run(
                ["pgrep", "-P", str(first.pid), "-f", "autoscaler_bootstrap"], capture_output=True, text=True
            ).stdout
        )
        environ = Path(f"/proc/{bootstrap_pid}/environ").read_bytes().split(b"\0")
        assert f"CMAN_SIGNAL_SOCKET_PREFIX=cman-{first_dir.name}-".encode() in environ
        # its output (and supervisord's) reaches bootstrap.log through the stack, which drops what a
        # full disk refuses: given the file itself, supervisord died of a line it could not write
        assert os.readlink(f"/proc/{bootstrap_pid}/fd/1").startswith("pipe:")

        refused = subprocess.run(
            [sys.executable, "-m", "clusterman.local.stack", "--run-dir", str(first_dir)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert refused.returncode == 1
        assert f"belongs to a running local stack (pid {first.pid})" in refused.stderr

        second = stack(base, "--duration", "120", "--config-dir", str(broken))
        out, _ = second.communicate(timeout=180)
        assert second.returncode == 1, out
        assert "the bootstrap exited with status 1: " in out and "scaling_limit" in out, out
        assert "no process of the stack is left" in out
        (second_dir,) = [p for p in base.iterdir() if p.name not in ("latest", first_dir.name)]
        assert (base / "latest").resolve() == second_dir.resolve()
        assert f"cman-{second_dir.name}-" in (second_dir / "env.sh").read_text()

        assert first.poll() is None, first.communicate()[0]
        assert (first_dir / "srv-configs" / "clusterman.yaml").exists() and (first_dir / "state").is_dir()
        assert rundir.owner(first_dir) == first.pid
    finally:
        first.send_signal(signal.SIGINT)
        out, _ = first.communicate(timeout=120)
    assert "no process of the stack is left" in out
    assert rundir.owner(first_dir) is None
