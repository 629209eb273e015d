"""One supervisord process, driven over its XML-RPC control socket with supervisor's own client.

supervisord runs in the foreground as our child, in its own session (a Ctrl-C reaches only the
bootstrap, which stops the tree in order) and with a parent-death signal, so it stops its
programs even when the bootstrap is killed outright. Every call waits at most the start timeout
for an answer: supervisor's client has no timeout, so a stopped (SIGSTOP) or hung supervisord
held the bootstrap, its watch and even its SIGTERM, for good.
"""

from __future__ import annotations

import http.client
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import xmlrpc.client
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from supervisor.xmlrpc import Faults
from supervisor.xmlrpc import SupervisorTransport
from supervisor.xmlrpc import UnixStreamHTTPConnection

from clusterman.errors import UserError
from clusterman.tree.parent_death import die_with_parent

log = logging.getLogger(__name__)

RPC_ERRORS = (OSError, xmlrpc.client.Error, http.client.HTTPException)
RUNNING_STATE = "RUNNING"
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes, the last a NUL
BIND_SUFFIX = len(".4194304")  # supervisord binds "<socket>.<its pid>" first, then links the socket's name


class SupervisorError(UserError):
    """supervisord did not start, or stopped answering."""


@dataclass(frozen=True)
class ProcessStatus:
    """One program process as supervisord reports it (``statename``: RUNNING, EXITED, FATAL, ...)."""

    group: str
    name: str
    state: str
    pid: int
    exitstatus: int
    spawnerr: str
    start: float = 0.0  # unix seconds of the last start

    @property
    def full_name(self) -> str:
        return f"{self.group}:{self.name}"

    @staticmethod
    def from_rpc(info: Mapping[str, Any]) -> ProcessStatus:
        return ProcessStatus(
            str(info["group"]),
            str(info["name"]),
            str(info["statename"]),
            int(info["pid"]),
            int(info["exitstatus"]),
            str(info.get("spawnerr") or ""),
            float(info.get("start") or 0),
        )


class _TimedConnection(UnixStreamHTTPConnection):
    """supervisor's Unix-socket connection, with the timeout ``http.client`` keeps but it ignores."""

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socketfile)


class _TimedTransport(SupervisorTransport):
    def __init__(self, socket_path: Path, timeout: float) -> None:
        super().__init__(None, None, f"unix://{socket_path}")

        def timed_connection() -> _TimedConnection:
            connection = _TimedConnection("localhost", timeout=timeout)
            connection.socketfile = str(socket_path)
            return connection

        self._get_connection = timed_connection


class Supervisor:
    def __init__(self, config: Path, private_dir: Path, env: Mapping[str, str], silent: bool = False) -> None:
        self.config = config
        self.silent = silent  # its log goes to its log file only (the bootstrap follows that file)
        self.private_dir = private_dir
        self.socket_path = self.socket_in(private_dir)
        self.env = {**env, "CMAN_SUPERVISOR_DIR": str(private_dir)}
        # Every process of the tree inherits this entry: it finds them if supervisord dies.
        self.marker = f"CMAN_SUPERVISOR_DIR={private_dir}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._rpc: Any = None
        self._transport: Any = None
        self._timeout = 0.0
        self.unresponsive = False  # a call went unanswered: stopped or hung, it is killed, not asked

    @staticmethod
    def socket_in(private_dir: Path) -> Path:
        """Where supervisord.conf puts the control socket."""
        return private_dir / "supervisor.sock"

    @staticmethod
    def socket_fits(private_dir: Path) -> bool:
        """Whether supervisord can bind its control socket in ``private_dir``: its name, and the
        temporary name supervisord binds first, fit in a Unix socket address."""
        return len(os.fsencode(Supervisor.socket_in(private_dir))) + BIND_SUFFIX <= MAX_SOCKET_PATH

    def start(self, timeout: float) -> None:
        """Start supervisord and wait until its control socket answers; every later call waits at
        most ``timeout`` for its answer."""
        parent = os.getpid()
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "supervisor.supervisord",
                "-c",
                str(self.config),
                *(["--silent"] if self.silent else []),
            ],
            env=self.env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            # SIGTERM when the bootstrap's thread ends: supervisord then stops its programs in order.
            preexec_fn=lambda: die_with_parent(parent),
        )
        self._timeout = timeout
        self._transport = _TimedTransport(self.socket_path, timeout)
        self._rpc = xmlrpc.client.ServerProxy("http://127.0.0.1", transport=self._transport)
        deadline = time.monotonic() + timeout
        while True:
            code = self._proc.poll()
            if code is not None:
                raise SupervisorError(f"supervisord exited with status {code} while starting (see its output above)")
            try:
                if self._call("getState")["statename"] == RUNNING_STATE:
                    return
            except SupervisorError:
                pass
            if time.monotonic() > deadline:
                raise SupervisorError(f"supervisord did not answer on {self.socket_path} within {timeout:g} s")
            time.sleep(0.05)

    def exit_status(self) -> int | None:
        """None while supervisord runs."""
        return self._proc.poll() if self._proc is not None else None

    def _call(self, method: str, *args: Any) -> Any:
        try:
            answer = getattr(self._rpc.supervisor, method)(*args)
        except TimeoutError as e:
            self._transport.close()  # the kept-alive connection is unusable after a failure
            self.unresponsive = True
            pid = self._proc.pid if self._proc is not None else "?"
            raise SupervisorError(
                f"supervisord (pid {pid}) did not answer {method} within {self._timeout:g} s: stopped or hung"
            ) from e
        except RPC_ERRORS as e:
            self._transport.close()
            raise SupervisorError(f"supervisord: {method} failed: {e}") from e
        self.unresponsive = False
        return answer

    def processes(self, group: str | None = None) -> list[ProcessStatus]:
        infos = [ProcessStatus.from_rpc(i) for i in self._call("getAllProcessInfo")]
        return [p for p in infos if group is None or p.group == group]

    def start_group(self, group: str) -> None:
        """SupervisorError naming each process supervisord could not start at all (a command it
        cannot find): those are answered in the result, not raised, and leave no log line."""
        refused = [r for r in self._call("startProcessGroup", group, False) if r.get("status") != Faults.SUCCESS]
        if refused:
            why = "; ".join(f"{r.get('group')}:{r.get('name')}: {r.get('description')}" for r in refused)
            raise SupervisorError(f"supervisord cannot start {why}")

    def start_process(self, full_name: str) -> None:
        self._call("startProcess", full_name, False)

    def log_tail(self, full_name: str, length: int = 2000) -> str:
        try:
            text, _offset, _overflow = self._call("tailProcessStdoutLog", full_name, 0, length)
            return str(text)
        except SupervisorError:
            return ""

    def stop(self, timeout: float) -> None:
        """Ask supervisord to stop every program and exit; kill what is left after ``timeout``, or at
        once when supervisord does not answer (a stopped process would not act on SIGTERM either)."""
        if self._proc is None:
            return
        clean = False
        if self._proc.poll() is None:
            if not self.unresponsive:
                try:
                    self._call("shutdown")
                except SupervisorError:
                    if not self.unresponsive:  # refused (dying): SIGTERM does the same
                        self._proc.terminate()
            if self.unresponsive:
                log.warning("supervisord does not answer: killing it and its programs")
                self._proc.kill()
                self._proc.wait()
            else:
                try:
                    self._proc.wait(timeout)
                    clean = True
                except subprocess.TimeoutExpired:
                    log.error("supervisord did not stop within %g s; killing it and its programs", timeout)
                    self._proc.kill()
                    self._proc.wait()
        if not clean:  # supervisord died or was killed: its programs may live on as orphans
            for pid in processes_with_env(self.marker):
                log.warning("killing pid %d left over from the tree", pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self._proc = None


def processes_with_env(entry: str) -> list[int]:
    """Pids of our processes whose environment holds ``entry`` (``NAME=value``), read from /proc."""
    needle = entry.encode()
    found = []
    for proc_dir in Path("/proc").iterdir():
        if not proc_dir.name.isdigit() or int(proc_dir.name) == os.getpid():
            continue
        try:
            if needle in (proc_dir / "environ").read_bytes().split(b"\0"):
                found.append(int(proc_dir.name))
        except OSError:
            continue  # gone, or not ours to read
    return found
