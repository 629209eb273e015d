"""Fetch a tree's signal versions and check its signals exist, before touching the running tree.

The bootstrap runs one ``fetch_clusterman_signal N`` per version as its own children (each
dying with it), so a configuration change is fetched beside the running tree and the old tree is
only stopped once the new one has everything it needs. A version installed and verified already
is not waited for: the tree starts on it, and ``VersionCheck`` asks S3 afterwards. Each fetcher's output goes to
``fetch_signals_N.log``, rewritten by every fetch, so a failure shows this fetch's lines only.
Then each signal's class is looked up with its own version's interpreter: a name the version
does not have is refused here, in one line naming the file and key, instead of a signal that
answers every run with an error.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from collections.abc import Collection
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from clusterman.data import supervisor_config
from clusterman.tree.environment import SignalProcess
from clusterman.tree.environment import TreePlan
from clusterman.tree.environment import runner_environment
from clusterman.tree.process_tree import Stopped
from clusterman.tree.process_tree import TreeError

HELPERS = supervisor_config().parent  # the helper scripts sit beside supervisord.conf (package data)
FETCHER = HELPERS / "fetch_clusterman_signal"
POLL_SECONDS = 0.05
EXIT_INSTALLED_COPY = 3  # a fetch's exit: S3 gave no verified copy, the installed one is used
LOOKUP_SECONDS = 60.0

# Run by each version's own interpreter (-I): the same lookup as clusterman_signals.run.
LOOKUP = """
import importlib, sys
from clusterman_signals.base_signal import BaseSignal
namespace, name = sys.argv[1:3]
try:
    module = importlib.import_module("clusterman_signals." + namespace)
except Exception as e:
    sys.exit(f"cannot import namespace clusterman_signals.{namespace}: {type(e).__name__}: {e}")
cls = getattr(module, name, None)
if cls is None:
    sys.exit(f"clusterman_signals.{namespace} has no signal named {name}")
if not (isinstance(cls, type) and issubclass(cls, BaseSignal)):
    sys.exit(f"clusterman_signals.{namespace}.{name} is not a BaseSignal subclass")
"""


@dataclass(frozen=True)
class FetchReport:
    fallbacks: dict[str, str]  # version -> why its installed copy is used
    seconds: float


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


Fetcher = tuple[str, Path, "subprocess.Popen[bytes]"]  # the version, its log, the process


def _start_fetchers(plan: TreePlan, env: Mapping[str, str], log_dir: Path, versions: Collection[str]) -> list[Fetcher]:
    """One ``fetch_clusterman_signal N`` per version of ``versions`` (N: its place in the plan)."""
    procs: list[Fetcher] = []
    try:
        for n, version in enumerate(plan.versions):
            if version not in versions:
                continue
            log_path = log_dir / f"fetch_signals_{n}.log"
            with log_path.open("wb") as out:  # rewritten: this fetch's lines only
                command = [str(FETCHER), str(n)]
                proc = subprocess.Popen(command, env=dict(env), stdin=subprocess.DEVNULL, stdout=out, stderr=out)
            procs.append((version, log_path, proc))
    except BaseException:
        _end(procs)
        raise
    return procs


def _end(procs: list[Fetcher]) -> None:
    for _, _, proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def fetch_versions(
    plan: TreePlan,
    env: Mapping[str, str],
    log_dir: Path,
    timeout: float,
    stop: threading.Event,
    meanwhile: Callable[[], None] = lambda: None,
    every: float = 1.0,
    versions: Collection[str] | None = None,
) -> FetchReport:
    """Run every fetcher at once (of ``versions``, default all the plan's); raise TreeError naming the
    first version that failed. While they run, ``meanwhile`` is called every ``every`` seconds: a
    fetch from an S3 that hangs lasts up to ``timeout``, and the bootstrap goes on watching the tree
    it runs."""
    started = time.monotonic()
    look = _at_most_every(every, meanwhile)
    procs = _start_fetchers(plan, env, log_dir, plan.versions if versions is None else versions)
    try:
        deadline = started + timeout
        while any(p.poll() is None for _, _, p in procs):
            for version, log_path, proc in procs:
                if proc.poll() not in (None, 0, EXIT_INSTALLED_COPY):
                    raise _failed(version, log_path, proc.returncode)
            if time.monotonic() > deadline:
                pending = [v for v, _, p in procs if p.poll() is None]
                raise TreeError(f"signal version(s) {', '.join(pending)} not fetched within {timeout:g} s")
            look()
            if stop.wait(POLL_SECONDS):
                raise Stopped()
        fallbacks = {}
        for version, log_path, proc in procs:
            if proc.returncode == EXIT_INSTALLED_COPY:
                fallbacks[version] = last_line(log_path.read_text(errors="replace"))
            elif proc.returncode != 0:
                raise _failed(version, log_path, proc.returncode)
        return FetchReport(fallbacks, time.monotonic() - started)
    finally:
        _end(procs)


class VersionCheck:
    """Ask S3 about the versions a tree started from their installed copies, beside that tree.

    A verified install starts at once: a start must not wait for an S3 that hangs. The check runs
    the same fetchers afterwards, for at most ``timeout``: S3's copy confirmed, a moved branch
    installed (the caller restarts the tree on it), or the reason the installed copy stays.
    """

    def __init__(
        self, plan: TreePlan, env: Mapping[str, str], log_dir: Path, versions: Collection[str], timeout: float
    ) -> None:
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.procs = _start_fetchers(plan, env, log_dir, versions)

    def poll(self) -> dict[str, str] | None:
        """None while a fetcher runs within the time; then version -> why its installed copy stays
        (empty when S3 gave a verified copy of each)."""
        if any(p.poll() is None for _, _, p in self.procs) and time.monotonic() < self.deadline:
            return None
        fallbacks = {}
        for version, log_path, proc in self.procs:
            if proc.poll() is None:
                fallbacks[version] = f"S3 gave no answer within {self.timeout:g} s"
            elif proc.returncode != 0:
                fallbacks[version] = last_line(log_path.read_text(errors="replace"))
        self.stop()
        return fallbacks

    def stop(self) -> None:
        _end(self.procs)


def _at_most_every(seconds: float, call: Callable[[], None]) -> Callable[[], None]:
    """``call``, made once ``seconds`` have passed since the start or since it was last made, however
    often the function returned is called (a polling loop's ``meanwhile``)."""
    due = time.monotonic() + seconds

    def maybe() -> None:
        nonlocal due
        if time.monotonic() >= due:
            call()
            due = time.monotonic() + seconds

    return maybe


def _failed(version: str, log_path: Path, code: int) -> TreeError:
    line = last_line(log_path.read_text(errors="replace"))
    return TreeError(f"signal version {version} could not be fetched (exit status {code}: {line})")


def check_signals(
    plan: TreePlan,
    signals_dir: Path,
    env: Mapping[str, str],
    stop: threading.Event,
    meanwhile: Callable[[], None] = lambda: None,
    every: float = 1.0,
    installs: Mapping[str, str] = MappingProxyType({}),
) -> None:
    """Look every signal's class up in its fetched version (in ``installs[version]``, default the
    version's link), all at once, within ``LOOKUP_SECONDS``; raise TreeError for the first missing.
    ``meanwhile`` as for ``fetch_versions``: a signal whose import hangs (a service it calls at
    import) must not stop the watch of the running tree."""
    runner_env = runner_environment(env)
    procs: list[tuple[SignalProcess, subprocess.Popen[str]]] = []
    try:
        for process in plan.signals:
            version_dir = signals_dir / installs.get(process.version, process.version)
            python = version_dir / "venv" / "bin" / "python"
            command = [str(python), "-I", "-c", LOOKUP, process.namespace, process.name]
            proc = subprocess.Popen(
                command, cwd=version_dir, env=runner_env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            procs.append((process, proc))
        started = time.monotonic()
        look = _at_most_every(every, meanwhile)
        while (
            any(p.poll() is None for _, p in procs)
            and not any(p.poll() for _, p in procs)  # one failed: it is the answer
            and time.monotonic() < started + LOOKUP_SECONDS
        ):
            look()
            if stop.wait(POLL_SECONDS):
                raise Stopped()
        failed = [(process, proc) for process, proc in procs if proc.poll()]
        for process, proc in failed or procs:
            if proc.poll() is None:
                err = f"looking the class up took over {LOOKUP_SECONDS:g} s"
            else:
                _, err = proc.communicate()
            if proc.returncode != 0:
                where = process.where or f"signal for {process.app}"
                raise TreeError(f"{where}: {last_line(err)} (version {process.version})")
    finally:
        for _, proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
