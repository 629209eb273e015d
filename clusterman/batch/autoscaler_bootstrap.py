"""``python -m clusterman.batch.autoscaler_bootstrap``: run one pool's process tree and keep it current.

1. Read ``CMAN_CLUSTER``, ``CMAN_POOL`` and ``CMAN_SCHEDULER`` (default ``mesos``, as Clusterman),
   load and validate the main and the pool config. A configuration that fails before its
   autoscaler finished a run (a bad file; a version or signal that cannot be fetched or found;
   a tree that does not come up; a crash loop) stops here, exit 1, unless a configuration the
   autoscaler finished a run under was kept (``--last-good-dir``): then that one runs, with one
   ERROR line and a ``config_rejected`` outcome, never silently.
2. Work out the signals (the default signal, the pool's own, its ``app_signals``) and export them
   as the CMAN_* lists (``clusterman.tree.environment``).
3. Copy the validated files to a snapshot the programs read (``clusterman.tree.snapshot``): a
   program restarted later gets the last configuration we accepted, not a later bad edit.
4. Fetch every version (our own children) and look each signal's class up in it
   (``clusterman.tree.fetching``); a version S3 cannot give but that is installed runs from there.
5. Start supervisord with ``supervisord/supervisord.conf``, its control socket in a private
   directory, dying with us; start the signals, wait until each accepts a connection, start the
   autoscaler (``clusterman.tree.process_tree``).
6. Watch: supervisord, the autoscaler's starts and heartbeat (a stalled autoscaler is restarted),
   and the main config, the pool config and the AWS key file. A crash loop after a change rolls
   back to the last configuration the autoscaler finished a run under, in memory or kept (one
   ERROR line, a ``config_rejected`` outcome), and the rejected files are tried again once
   edited; a crash loop with no earlier good configuration (or under it) stops the tree, exit 1.
   A change is validated and fetched beside the running tree, which is only stopped once that
   succeeded (if the new tree's signals then fail, the previous tree comes back). Each outcome
   goes to ``$CMAN_TREE_STATUS_FILE`` for the autoscaler's events. SIGTERM or SIGINT stops the
   tree and exits 0.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import shlex
import shutil
import sys
import threading
import time
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from pathlib import Path

import yaml

from clusterman.aws.session import AwsCredentialsError
from clusterman.aws.session import read_access_key_file
from clusterman.batch.arguments import add_program_arguments
from clusterman.batch.arguments import configure_logging
from clusterman.batch.stopping import stop_on_signals
from clusterman.config.loader import load_main_config
from clusterman.config.loader import load_pool_config
from clusterman.config.loader import parse_scheduler
from clusterman.config.loader import pool_config_path
from clusterman.core.config import MainConfig
from clusterman.core.config import PoolIdentity
from clusterman.core.config_schema import ConfigError
from clusterman.core.timestamps import format_time
from clusterman.data import supervisor_config
from clusterman.signals.artifacts import default_codename
from clusterman.signals.artifacts import installed_copy
from clusterman.signals.client import parse_uids
from clusterman.tree.environment import INSTALLS_ENV
from clusterman.tree.environment import TreePlan
from clusterman.tree.environment import plan_tree
from clusterman.tree.fetching import VersionCheck
from clusterman.tree.fetching import check_signals
from clusterman.tree.fetching import fetch_versions
from clusterman.tree.liveness import WATCH_ENV
from clusterman.tree.liveness import LivenessRules
from clusterman.tree.liveness import Unwritable
from clusterman.tree.liveness import write_watch
from clusterman.tree.log_follow import start_following
from clusterman.tree.log_follow import write_to
from clusterman.tree.private_dir import make_private_dir
from clusterman.tree.private_dir import remove_orphans
from clusterman.tree.process_tree import CrashLoop
from clusterman.tree.process_tree import ProcessTree
from clusterman.tree.process_tree import Stopped
from clusterman.tree.process_tree import Timeouts
from clusterman.tree.process_tree import TreeError
from clusterman.tree.signal_dir import disk_bytes
from clusterman.tree.signal_dir import prune
from clusterman.tree.snapshot import LastGoodError
from clusterman.tree.snapshot import keep_last_good
from clusterman.tree.snapshot import last_good_home
from clusterman.tree.snapshot import read_last_good
from clusterman.tree.snapshot import take_snapshot
from clusterman.tree.status_file import StatusWriter
from clusterman.tree.supervisor import Supervisor
from clusterman.tree.supervisor import SupervisorError
from clusterman.tree.watch import Fingerprint
from clusterman.tree.watch import changed
from clusterman.tree.watch import fingerprint

log = logging.getLogger("autoscaler_bootstrap")

SUPERVISOR_CONFIG = supervisor_config()  # package data: found in a checkout and in an installed wheel alike
SETUP_ERRORS = (ConfigError, AwsCredentialsError, ValueError)


@dataclass(frozen=True)
class BootstrapSettings:
    identity: PoolIdentity
    env_config_path: Path
    cman_args: str
    supervisor_config: Path
    private_parent: Path | None  # where the private directory is made (default: $TMPDIR)
    log_dir: Path | None  # default: <private directory>/logs
    signals_dir: Path | None  # default: <private directory>/signals
    codename: str
    allowed_uids: str  # space-separated, validated
    autoscaler_command: str
    timeouts: Timeouts
    poll_interval: float
    fetch_retry_seconds: float  # a change refused because a version could not be fetched is tried again
    liveness: LivenessRules
    last_good_dir: Path  # where the last good configuration is kept across restarts (per pool and main file)
    log_stdout: bool = False  # the programs' logs are followed to stdout: supervisord does not echo its own

    @staticmethod
    def from_args(args: argparse.Namespace, env: Mapping[str, str]) -> BootstrapSettings:
        missing = [v for v in ("CMAN_CLUSTER", "CMAN_POOL") if not env.get(v)]
        if missing:
            raise ValueError(f"{' and '.join('$' + v for v in missing)} must name the pool to autoscale")
        scheduler = parse_scheduler(env.get("CMAN_SCHEDULER", "mesos"))
        identity = PoolIdentity(env["CMAN_CLUSTER"], env["CMAN_POOL"], scheduler)
        uids = " ".join(str(u) for u in sorted(parse_uids(args.allowed_uids or "", "--allowed-uids")))
        default_command = shlex.join([sys.executable, "-m", "clusterman.batch.autoscaler"])
        return BootstrapSettings(
            identity=identity,
            env_config_path=Path(args.env_config_path).resolve(),
            cman_args=env.get("CMAN_ARGS", ""),
            supervisor_config=Path(args.supervisor_config).resolve(),
            private_parent=args.private_dir_parent,
            log_dir=args.log_dir,
            signals_dir=args.signals_dir,
            codename=args.codename or default_codename(),
            allowed_uids=uids,
            autoscaler_command=args.autoscaler_command or default_command,
            timeouts=Timeouts(
                supervisor=args.supervisor_timeout,
                fetch=args.fetch_timeout,
                s3_check=args.s3_check_timeout,
                signals=args.signal_timeout,
                stop=args.stop_timeout,
            ),
            poll_interval=args.poll_interval,
            fetch_retry_seconds=args.fetch_retry,
            liveness=LivenessRules(
                stale_periods=args.stale_periods,
                start_grace_seconds=args.start_grace,
                crash_starts=args.crash_starts,
                crash_window_seconds=args.crash_window,
            ),
            last_good_dir=args.last_good_dir.resolve(),
            log_stdout=args.log_stdout,
        )


@dataclass(frozen=True)
class LoadedConfig:
    plan: TreePlan
    watched: tuple[Path, ...]  # the files whose change restarts the tree
    main: MainConfig
    pool_path: Path


def load(settings: BootstrapSettings) -> LoadedConfig:
    """Validate everything the tree will read; raise a ConfigError naming the file and key."""
    main = load_main_config(settings.env_config_path)
    pool_path = pool_config_path(main.cluster_config_directory, settings.identity)
    pool = load_pool_config(main, settings.identity)
    plan = plan_tree(main, str(settings.env_config_path), pool, str(pool_path), settings.identity, settings.cman_args)
    watched = [settings.env_config_path, pool_path]
    if main.aws.access_key_file:
        read_access_key_file(main.aws.access_key_file)  # readable and well-formed, or an error now
        watched.append(Path(main.aws.access_key_file))
    return LoadedConfig(plan, tuple(watched), main, pool_path)


@dataclass(frozen=True)
class Prepared:
    """A configuration ready to run: validated, copied to a snapshot, its versions fetched and checked."""

    loaded: LoadedConfig
    baseline: Fingerprint  # of the live files, as they were when validated
    snapshot: Path  # the copy of the main file the programs read
    fallbacks: Mapping[str, str] = field(default_factory=dict)  # version -> why its installed copy is used
    installs: Mapping[str, str] = field(default_factory=dict)  # version -> the install directory it runs from
    unchecked: tuple[str, ...] = ()  # versions started from their installed copy, S3 not asked yet


@dataclass(frozen=True)
class Paths:
    private: Path
    log_dir: Path
    signals_dir: Path

    @property
    def heartbeat(self) -> Path:
        return self.private / "heartbeat.json"

    @property
    def status(self) -> Path:
        return self.private / "tree-status.json"

    @property
    def watch(self) -> Path:
        return self.private / "watch.json"


def tree_environment(settings: BootstrapSettings, prepared: Prepared, paths: Paths) -> dict[str, str]:
    """What the fetchers, supervisord and its programs inherit: our environment, the plan, and where things live."""
    return {
        **os.environ,
        **prepared.loaded.plan.to_env(),
        "CMAN_ENV_CONFIG_PATH": str(prepared.snapshot),
        "CMAN_PYTHON": sys.executable,
        "CMAN_LOG_DIR": str(paths.log_dir),
        "CMAN_SIGNALS_DIR": str(paths.signals_dir),
        "CMAN_SIGNALS_CODENAME": settings.codename,
        "CMAN_SIGNAL_ALLOWED_UIDS": settings.allowed_uids,
        "CMAN_AUTOSCALER_COMMAND": settings.autoscaler_command,
        "CMAN_HEARTBEAT_FILE": str(paths.heartbeat),
        "CMAN_TREE_STATUS_FILE": str(paths.status),
        WATCH_ENV: str(paths.watch),
        INSTALLS_ENV: " ".join(prepared.installs.get(s.version, "") for s in prepared.loaded.plan.signals).strip(),
    }


def log_fallbacks(fallbacks: Mapping[str, str]) -> None:
    for version, why in fallbacks.items():
        log.error("SIGNAL VERSION %s RUNS FROM ITS INSTALLED COPY: %s", version, why)


class Bootstrap:
    def __init__(self, settings: BootstrapSettings, stop_event: threading.Event) -> None:
        self.settings = settings
        self.stop_event = stop_event
        self.generation = 0
        self.good: Prepared | None = None  # the last configuration the autoscaler finished a run under
        self.good_since = 0.0  # unix seconds it was found good
        self.kept_home = last_good_home(settings.last_good_dir, settings.env_config_path, settings.identity)
        self.unwritable = Unwritable("the bootstrap")  # its files it could not write, for the autoscaler to show
        self.stays: Prepared | None = None  # runs on although it cannot act: nothing to go back to

    def run(self) -> int:
        try:
            validated: tuple[LoadedConfig, Fingerprint] | Exception = self._validate()
        except SETUP_ERRORS as e:
            if not (self.kept_home / "current").is_symlink():  # nothing to fall back on: stop before anything runs
                log.error("%s", e)
                return 1
            validated = e
        remove_orphans(self.settings.private_parent)
        private, lock = make_private_dir(self.settings.private_parent)
        paths = Paths(
            private, self.settings.log_dir or private / "logs", self.settings.signals_dir or private / "signals"
        )
        try:
            if not Supervisor.socket_fits(private):
                log.error("%s is too long a path for a Unix socket: use a shorter --private-dir-parent", private)
                return 1
            paths.log_dir.mkdir(parents=True, exist_ok=True)
            paths.signals_dir.mkdir(parents=True, exist_ok=True)
            log.info("private directory %s, program logs in %s", private, paths.log_dir)
            return self._supervise(paths, validated)
        finally:
            shutil.rmtree(private, ignore_errors=True)
            os.close(lock)

    def _validate(self) -> tuple[LoadedConfig, Fingerprint]:
        """Load until the files hold still: the fingerprint is of what was validated."""
        while True:
            before = fingerprint(self._watched_now())
            loaded = load(self.settings)
            after = fingerprint(loaded.watched)
            if before == after:
                return loaded, after

    def _watched_now(self) -> list[Path]:
        try:
            return list(load(self.settings).watched)
        except SETUP_ERRORS:
            return [self.settings.env_config_path]

    def _fall_back(
        self, paths: Paths, status: StatusWriter, error: Exception, failed: Fingerprint
    ) -> tuple[Prepared, Fingerprint]:
        """A new configuration failed before its autoscaler finished a run (at start, or a crash
        loop with nothing better in memory): start from the kept one instead; say so, never silently.

        ``failed``: the files the failing configuration was read from. Re-raises ``error`` when
        nothing is kept, or the kept configuration is that one. Returns the kept configuration,
        already the one to roll back to, and the live files as they are now: not tried again until
        they change.
        """
        try:
            kept = read_last_good(self.kept_home)
        except LastGoodError as why:
            raise TreeError(f"{error} (and {why})") from error
        if kept is None or kept.baseline == failed:
            raise error
        live = fingerprint([Path(p) for p, _ in kept.baseline])
        try:
            loaded = load(replace(self.settings, env_config_path=kept.main_path))
            current = self._prepare(paths, (loaded, live), kept.main_path)
        except (*SETUP_ERRORS, TreeError) as e:
            raise TreeError(
                f"{error} (and the kept configuration in {self.kept_home} cannot be used either: {e})"
            ) from e
        what = ", ".join(changed(kept.baseline, live)) or str(self.settings.env_config_path)
        message = (
            f"CONFIGURATION ROLLED BACK: {error}; the bootstrap starts with the last configuration the "
            f"autoscaler finished runs under (accepted {format_time(kept.accepted_at)}, kept in {self.kept_home}); "
            "a newer edit of the file is tried again"
        )
        log.error("%s", message)
        status.record(False, what, message, rolled_back=True)
        self.good, self.good_since = current, kept.accepted_at
        return current, live

    def _first_tree(
        self, paths: Paths, status: StatusWriter, validated: tuple[LoadedConfig, Fingerprint] | Exception
    ) -> tuple[ProcessTree, Prepared, Refused]:
        """The tree of the live files (``validated``: loaded already, or why they could not be) or,
        when they fail before a tree runs, of the kept configuration."""
        try:
            if isinstance(validated, Exception):
                raise validated
            current = self._prepare(paths, validated)
        except (*SETUP_ERRORS, TreeError) as e:
            current, rejected = self._fall_back(paths, status, e, fingerprint(self._watched_now()))
            retry = self._retry_at(e)
            return self._start(current, paths), current, Refused(rejected, retry)
        try:
            return self._start(current, paths), current, Refused()
        except (TreeError, SupervisorError) as e:
            self._forget(current)
            kept, rejected = self._fall_back(paths, status, e, current.baseline)
            return self._start(kept, paths), kept, Refused(rejected)

    def _retry_at(self, error: Exception) -> float:
        """When refused files are tried again without an edit: a fetch or a lookup may succeed
        later (S3 back, a version published); an invalid file needs an edit."""
        transient = isinstance(error, TreeError)
        return time.monotonic() + self.settings.fetch_retry_seconds if transient else math.inf

    def _prepare(
        self,
        paths: Paths,
        validated: tuple[LoadedConfig, Fingerprint] | None = None,
        source: Path | None = None,
        meanwhile: Callable[[], None] = lambda: None,
    ) -> Prepared:
        """Validate, snapshot and fetch the configuration on disk: nothing running is touched.

        ``validated`` and ``source``: a configuration loaded already from the main file ``source``
        (the kept copy), in place of the live files. ``meanwhile``: called every poll while the
        versions are fetched and their signals looked up (the running tree is still watched)."""
        loaded, baseline = validated or self._validate()
        self.generation += 1
        dest = paths.private / f"config-{self.generation}"
        identity = self.settings.identity
        try:
            try:
                main_path = source or self.settings.env_config_path
                snapshot = take_snapshot(loaded.main, main_path, loaded.pool_path, identity, dest)
            except (OSError, yaml.YAMLError) as e:
                raise TreeError(f"cannot copy the configuration to {dest}: {e}") from e
            env = tree_environment(self.settings, Prepared(loaded, baseline, snapshot), paths)
            versions = loaded.plan.versions
            held = [v for v in versions if installed_copy(paths.signals_dir, v) is not None]  # S3 is asked later
            fetched = fetch_versions(
                loaded.plan, env, paths.log_dir, self.settings.timeouts.fetch, self.stop_event,
                meanwhile, self.settings.poll_interval, [v for v in versions if v not in held],
            )  # fmt: skip
            log_fallbacks(fetched.fallbacks)
            log.info(
                "fetched %d signal version(s) in %.2f s; %d installed already (checked with S3 once the tree runs)",
                len(versions) - len(held), fetched.seconds, len(held),
            )  # fmt: skip
            installs = {}
            for version in versions:
                install = installed_copy(paths.signals_dir, version)
                if install is None:
                    raise TreeError(f"signal version {version} is not installed in {paths.signals_dir} after its fetch")
                installs[version] = install[0].name
            check_signals(
                loaded.plan, paths.signals_dir, env, self.stop_event, meanwhile, self.settings.poll_interval, installs
            )
        except BaseException:
            shutil.rmtree(dest, ignore_errors=True)
            raise
        return Prepared(loaded, baseline, snapshot, fetched.fallbacks, installs, tuple(held))

    def _start(self, prepared: Prepared, paths: Paths) -> ProcessTree:
        env = tree_environment(self.settings, prepared, paths)
        supervisor = Supervisor(self.settings.supervisor_config, paths.private, env, silent=self.settings.log_stdout)
        tree = ProcessTree(
            supervisor, prepared.loaded.plan, self.settings.timeouts, self.stop_event,
            heartbeat=paths.heartbeat, rules=self.settings.liveness,
        )  # fmt: skip
        log.info("starting the tree for %s", prepared.loaded.plan.describe())
        try:
            tree.start()
        except BaseException:
            tree.stop()
            raise
        return tree

    def _supervise(self, paths: Paths, validated: tuple[LoadedConfig, Fingerprint] | Exception) -> int:
        status = StatusWriter(paths.status, lambda why: self.unwritable.note("tree status", why))
        tree: ProcessTree | None = None
        try:
            tree, current, refused = self._first_tree(paths, status, validated)
            while True:
                try:
                    new = self._watch(tree, current, paths, status, refused)
                except CrashLoop as e:
                    tree.stop()
                    tree = None
                    failed, (current, rejected) = current, self._roll_back(paths, status, e, current)
                    self._forget(failed)
                    refused = Refused(rejected)
                    tree = self._start(current, paths)
                    continue
                except CannotAct as e:  # the earlier configuration is made ready beside the running tree
                    try:
                        back, rejected = self._roll_back(paths, status, e, current)
                    except (*SETUP_ERRORS, TreeError) as why:
                        log.error("%s; nothing to go back to (%s): the tree runs on under it", e, why)
                        self.stays = current
                        continue
                    tree.stop()
                    tree = None
                    self._forget(current)
                    current, refused = back, Refused(rejected)
                    tree = self._start(current, paths)
                    continue
                if new is None:
                    return 0
                refused = Refused()
                tree.stop()
                tree = None
                try:
                    tree = self._start(new, paths)
                except (TreeError, SupervisorError) as e:
                    log.error("%s; going back to the last working configuration", e)
                    status.record(False, self._changed(current, new), str(e))
                    refused = Refused(new.baseline)  # not tried again, tree restart and all, until edited
                    self._forget(new)
                    tree = self._start(current, paths)
                    continue
                status.record(True, self._changed(current, new), new.loaded.plan.describe())
                if current is not self.good:  # the last good one is kept for a rollback
                    self._forget(current)
                current = new
        except (*SETUP_ERRORS, TreeError, SupervisorError) as e:
            log.error("%s", e)
            return 1
        except Stopped:
            return 0
        finally:
            if tree is not None:
                tree.stop()
            log.info("stopped the tree")

    def _roll_back(
        self, paths: Paths, status: StatusWriter, error: TreeError, current: Prepared
    ) -> tuple[Prepared, Fingerprint]:
        """``current``'s autoscaler keeps exiting, or cannot act under it: go back to the last
        configuration it finished runs under, this bootstrap's or the kept one; re-raise when
        ``current`` is that one. ``current`` is left for the caller to forget once its tree stopped."""
        good = self.good
        if good is current:
            raise error
        if good is None:
            return self._fall_back(paths, status, error, current.baseline)
        what = self._changed(good, current)
        message = (
            f"CONFIGURATION ROLLED BACK: the change to {what} is rejected ({error}); "
            f"running the last configuration the autoscaler finished runs under again "
            f"(accepted {format_time(self.good_since)}); "
            "a newer edit of the file is tried again"
        )
        log.error("%s", message)
        status.record(False, what, message, rolled_back=True)
        return good, current.baseline

    @staticmethod
    def _changed(old: Prepared, new: Prepared) -> str:
        return ", ".join(changed(old.baseline, new.baseline)) or str(old.loaded.watched[0])

    @staticmethod
    def _forget(old: Prepared) -> None:
        shutil.rmtree(old.snapshot.parent, ignore_errors=True)

    def _note_health(self, tree: ProcessTree, current: Prepared) -> None:
        """``current`` becomes the configuration to roll back to once its autoscaler finished a run
        it could act in; one whose runs find it cannot work is rolled back (``CannotAct``)."""
        cause = tree.unworkable()
        if cause:
            self._cannot_act(current, cause)
            return
        if self.good is current or not tree.has_finished_a_run():
            return
        previous, self.good, self.good_since = self.good, current, time.time()
        if previous is not None:
            self._forget(previous)
        log.info("the autoscaler finished a run under this configuration: a crash loop after a change goes back to it")
        try:
            snapshot_main = load_main_config(current.snapshot)
            pool_copy = pool_config_path(snapshot_main.cluster_config_directory, self.settings.identity)
            keep_last_good(
                snapshot_main, current.snapshot, pool_copy, self.settings.identity,
                current.baseline, self.good_since, self.kept_home,
            )  # fmt: skip
        except (OSError, yaml.YAMLError, LastGoodError, *SETUP_ERRORS) as e:
            log.warning(
                "cannot keep the last good configuration for a restart (%s): a restart facing a bad file exits 1", e
            )

    def _cannot_act(self, current: Prepared, cause: str) -> None:
        """The autoscaler's runs find ``current`` cannot work: raise ``CannotAct`` when there is an
        earlier configuration to go back to; else say so once, and the tree runs on (a later edit,
        or the missing table created, mends it)."""
        if current is self.stays:
            return
        if self.good is not None and self.good is not current:
            raise CannotAct(cause)
        if self.good is None:
            try:
                kept = read_last_good(self.kept_home)
            except LastGoodError:
                kept = None
            if kept is not None and kept.baseline != current.baseline:
                raise CannotAct(cause)
        log.error(
            "the autoscaler cannot act under this configuration: %s; there is no other configuration it "
            "finished runs under to go back to: the tree runs on, and a newer edit is tried", cause,
        )  # fmt: skip
        self.stays = current

    def _watch(
        self,
        tree: ProcessTree,
        current: Prepared,
        paths: Paths,
        status: StatusWriter,
        refused: Refused,
    ) -> Prepared | None:
        """Return the next configuration, validated and fetched beside the running tree; None on SIGTERM/SIGINT.

        ``refused``: files refused (or rolled back) already: not tried again until they change, or
        until ``refused.retry_at``.
        """
        rejected, retry_at = refused.files, refused.retry_at
        baseline = current.baseline
        watched = [Path(p) for p, _ in baseline]
        status.set_fallbacks(current.fallbacks)
        check = self._check_versions(current, paths)
        moved: list[str] = []  # versions the check found moved in S3 (and installed)
        pruned_for: Prepared | None = None  # the last good configuration when the signals dir was last pruned

        def look(preparing: bool = False) -> None:
            nonlocal check, pruned_for
            tree.check()
            self._write_watch(paths)
            self._note_health(tree, current)
            if check is not None and (fallbacks := check.poll()) is not None:
                check = None
                moved.extend(self._checked(current, paths, status, fallbacks))
            if not preparing and check is None and self.good is not None and pruned_for is not self.good:
                pruned_for = self.good
                self._prune(paths, status, current, self.good)

        def look_while_preparing() -> None:  # a change's fetchers run: the signals dir is not pruned
            try:
                look(preparing=True)
            except Exception as e:  # the running tree's failure, not the change's
                raise _TreeFailed(e) from e

        self._write_watch(paths)
        try:
            while not self.stop_event.wait(self.settings.poll_interval):
                look()
                if moved:
                    again = self._again(current, paths, moved, look_while_preparing)
                    moved.clear()
                    if again is not None:
                        return again
                now = fingerprint(watched)
                if now == baseline or (now == rejected and time.monotonic() < retry_at):
                    continue
                what = ", ".join(changed(baseline, now))
                try:
                    new = self._prepare(paths, meanwhile=look_while_preparing)
                except _TreeFailed as e:
                    raise e.error from None
                except (*SETUP_ERRORS, TreeError) as e:
                    retry_at = self._retry_at(e)
                    retry = f"; trying again in {self.settings.fetch_retry_seconds:g} s" if retry_at < math.inf else ""
                    log.error("%s (the running tree keeps its previous configuration%s)", e, retry)
                    if now != rejected:
                        status.record(False, what, str(e))
                    rejected = now
                    continue
                log.info("%s changed: restarting the tree", what)
                return new
            return None
        finally:
            if check is not None:
                check.stop()

    def _write_watch(self, paths: Paths) -> None:
        why = write_watch(paths.watch, time.time(), self.settings.poll_interval, time.monotonic(), self.unwritable.now)
        self.unwritable.note("watch file", why)

    @staticmethod
    def _prune(paths: Paths, status: StatusWriter, current: Prepared, good: Prepared) -> None:
        """Keep the signals directory to the running and the last good configurations' installs."""
        versions = {*current.loaded.plan.versions, *good.loaded.plan.versions}
        try:
            prune(paths.signals_dir, versions, {*current.installs.values(), *good.installs.values()})
            status.set_signals_disk(disk_bytes(paths.signals_dir))
        except OSError as e:
            log.warning("cannot prune %s: %s", paths.signals_dir, e)

    def _check_versions(self, current: Prepared, paths: Paths) -> VersionCheck | None:
        """Ask S3, beside the running tree, about the versions it started from their installed copies."""
        if not current.unchecked:
            return None
        env = tree_environment(self.settings, current, paths)
        plan = current.loaded.plan
        return VersionCheck(plan, env, paths.log_dir, current.unchecked, self.settings.timeouts.s3_check)

    @staticmethod
    def _checked(current: Prepared, paths: Paths, status: StatusWriter, fallbacks: Mapping[str, str]) -> list[str]:
        """Report what the check of ``current``'s installed versions found; return those it found
        moved in S3 (a branch pushed since: installed now, and the tree is to run on it)."""
        log_fallbacks(fallbacks)
        status.set_fallbacks({**current.fallbacks, **fallbacks})
        moved = []
        for version in current.unchecked:
            install = installed_copy(paths.signals_dir, version)
            if version not in fallbacks and install is not None and install[0].name != current.installs[version]:
                moved.append(version)
        if not fallbacks:
            log.info("S3 has the installed copies of signal version(s) %s", " ".join(current.unchecked))
        return moved

    def _again(
        self, current: Prepared, paths: Paths, moved: list[str], meanwhile: Callable[[], None]
    ) -> Prepared | None:
        """``current`` once more, on the new installs of the ``moved`` versions; None when that fails
        (said in one line: the running tree keeps the installs it has)."""
        log.info("signal version(s) %s moved in S3: restarting the tree on the new install", " ".join(moved))
        try:
            loaded = load(replace(self.settings, env_config_path=current.snapshot))
            return self._prepare(paths, (loaded, current.baseline), current.snapshot, meanwhile)
        except _TreeFailed as e:
            raise e.error from None
        except (*SETUP_ERRORS, TreeError) as e:
            log.error("%s (the running tree keeps the installs it runs from)", e)
            return None


@dataclass(frozen=True)
class Refused:
    """Files a configuration was refused (or rolled back) from: not tried again until they change,
    or until ``retry_at`` (monotonic)."""

    files: Fingerprint | None = None
    retry_at: float = math.inf


class CannotAct(TreeError):
    """The autoscaler's runs find that its configuration cannot work (its state or metrics store
    unusable, no usable kubeconfig): the bootstrap goes back to the last good one."""

    def __init__(self, cause: str) -> None:
        super().__init__(f"the autoscaler cannot act under this configuration: {cause}")


class _TreeFailed(Exception):
    """A look at the running tree failed while a change was being prepared: the tree's error (a
    crash loop, supervisord gone), to be handled as such, not as a change that could not be fetched."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m clusterman.batch.autoscaler_bootstrap",
        description="Run the process tree (signal fetchers, signals, autoscaler) of the pool named by "
        "$CMAN_CLUSTER, $CMAN_POOL and $CMAN_SCHEDULER; docs/deployment.md describes it.",
    )
    env = os.environ
    add_program_arguments(parser, pool_files=False)
    parser.add_argument("--supervisor-config", default=str(SUPERVISOR_CONFIG), help="supervisord's config file")
    parser.add_argument("--private-dir-parent", type=Path, default=None, help="where to make the private directory")
    parser.add_argument("--log-dir", type=Path, default=_env_path("CMAN_LOG_DIR"), help="program logs ($CMAN_LOG_DIR)")
    parser.add_argument(
        "--log-stdout",
        action="store_true",
        default=env.get("CMAN_LOG_STDOUT", "") not in ("", "0", "false"),
        help="copy every program's log lines to stdout, each prefixed with its program, and prefix ours with "
        "'bootstrap' (for kubectl logs; needs --log-dir) ($CMAN_LOG_STDOUT=1)",
    )
    parser.add_argument(
        "--signals-dir", type=Path, default=_env_path("CMAN_SIGNALS_DIR"), help="fetched versions ($CMAN_SIGNALS_DIR)"
    )
    parser.add_argument("--codename", default=None, help="S3 prefix of the signal tarballs (default: OS codename)")
    parser.add_argument(
        "--allowed-uids",
        default=env.get("CMAN_SIGNAL_ALLOWED_UIDS", ""),
        help="uids, besides our own, that signals and the autoscaler accept as peers ($CMAN_SIGNAL_ALLOWED_UIDS)",
    )
    parser.add_argument(
        "--autoscaler-command",
        default=env.get("CMAN_AUTOSCALER_COMMAND"),
        help="the autoscaler program, before $CMAN_ARGS (default: this Python -m clusterman.batch.autoscaler)",
    )
    parser.add_argument("--fetch-timeout", type=float, default=300.0, help="seconds for all versions to be fetched")
    parser.add_argument(
        "--s3-check-timeout", type=float, default=60.0,
        help="seconds for S3 to confirm a version the tree started from its installed copy (asked beside the tree)",
    )  # fmt: skip
    parser.add_argument("--signal-timeout", type=float, default=60.0, help="seconds for all signals to answer")
    parser.add_argument("--stop-timeout", type=float, default=60.0, help="seconds for the tree to stop")
    parser.add_argument(
        "--supervisor-timeout", type=float, default=15.0,
        help="seconds for supervisord to start and to answer each call; one that does not answer (stopped or hung) "
        "is killed with its programs and the bootstrap exits 1",
    )  # fmt: skip
    parser.add_argument("--poll-interval", type=float, default=10.0, help="seconds between config checks")
    parser.add_argument(
        "--fetch-retry", type=float, default=60.0,
        help="seconds before a change refused because a signal version could not be fetched is tried again",
    )  # fmt: skip
    parser.add_argument(
        "--stale-periods", type=float, default=3.0,
        help="restart an autoscaler that finished no run for this many of its periods (heartbeat file)",
    )  # fmt: skip
    parser.add_argument(
        "--start-grace", type=float, default=60.0, help="seconds a started autoscaler gets on top, for its first run"
    )
    parser.add_argument(
        "--crash-starts", type=int, default=5, help="this many autoscaler starts within --crash-window: a crash loop"
    )
    parser.add_argument("--crash-window", type=float, default=300.0, help="seconds (see --crash-starts)")
    parser.add_argument(
        "--last-good-dir", type=Path, default=_env_path("CMAN_LAST_GOOD_DIR") or _state_home() / "clusterman/last-good",
        help="where the last configuration the autoscaler ran under is kept, so a restart facing a bad file "
        "runs it ($CMAN_LAST_GOOD_DIR; default $XDG_STATE_HOME/clusterman/last-good); keep it across restarts",
    )  # fmt: skip
    return parser


def _state_home() -> Path:
    return _env_path("XDG_STATE_HOME") or Path.home() / ".local" / "state"


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level, prefix="bootstrap | " if args.log_stdout else "")
    try:
        settings = BootstrapSettings.from_args(args, os.environ)
        if settings.log_stdout and settings.log_dir is None:
            raise ValueError(
                "--log-stdout ($CMAN_LOG_STDOUT) follows the programs' logs in --log-dir: set $CMAN_LOG_DIR"
            )
    except SETUP_ERRORS as e:
        log.error("%s", e)
        return 1
    stop_following = (
        start_following(settings.log_dir, write_to(1)) if settings.log_dir and settings.log_stdout else None
    )
    try:
        return Bootstrap(settings, stop_on_signals(log, "stopping the tree")).run()
    finally:
        if stop_following is not None:
            stop_following()


if __name__ == "__main__":
    sys.exit(main())
