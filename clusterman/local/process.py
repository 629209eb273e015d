"""Starting a local server process and waiting until it answers; stopping it for good."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request


def wait_ready(proc: subprocess.Popen[bytes], url: str, what: str, timeout: float) -> None:
    """Poll ``url`` until it answers (any 2xx), or raise naming ``what`` when the process exits or
    the time is up (the process is then stopped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    stop(proc)
    raise RuntimeError(f"{what} did not answer on {url} within {timeout:g} s")


def stop(proc: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout``; always reaped."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
