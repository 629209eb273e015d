"""``python -m clusterman.batch.autoscaler_bootstrap``: run one pool's process tree and keep it current.

1. Read ``CMAN_CLUSTER``, ``CMAN_POOL`` and ``CMAN_SCHEDULER`` (default ``mesos``, as Clusterman),
   load and validate the main and the pool config: a bad config stops here, before anything runs.
2. Work out the signals (the default signal, the pool's own, its ``app_signals``) and export them
   as the CMAN_* lists (``clusterman.tree.environment``).
3. Start supervisord with ``supervisord/supervisord.conf``, its control socket in a private
   directory, dying with us.
4. Wait for every fetcher to exit 0, start the signals, wait until each accepts a connection,
   start the autoscaler (``clusterman.tree.process_tree``).
5. Poll the main config, the pool config and the AWS key file; when they change and still
   validate, restart the whole tree (if the new tree cannot come up, the last working
   configuration comes back); SIGTERM or SIGINT stops the tree and exits 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import shutil
import sys
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from clusterman.aws.session import AwsCredentialsError
from clusterman.aws.session import read_access_key_file
from clusterman.batch.stopping import stop_on_signals
from clusterman.config.loader import default_env_config_path
from clusterman.config.loader import load_main_config
from clusterman.config.loader import load_pool_config
from clusterman.config.loader import parse_scheduler
from clusterman.config.loader import pool_config_path
from clusterman.config.model import PoolIdentity
from clusterman.config.schema import ConfigError
from clusterman.data import supervisor_config
from clusterman.signals.artifacts import default_codename
from clusterman.signals.client import parse_uids
from clusterman.tree.environment import TreePlan
from clusterman.tree.environment import plan_tree
from clusterman.tree.process_tree import ProcessTree
from clusterman.tree.process_tree import Stopped
from clusterman.tree.process_tree import Timeouts
from clusterman.tree.process_tree import TreeError
from clusterman.tree.supervisor import Supervisor
from clusterman.tree.supervisor import SupervisorError
from clusterman.tree.watch import Fingerprint
from clusterman.tree.watch import changed
from clusterman.tree.watch import fingerprint

log = logging.getLogger("autoscaler_bootstrap")

SUPERVISOR_CONFIG = supervisor_config()  # package data: found in a checkout and in an installed wheel alike
SETUP_ERRORS = (ConfigError, AwsCredentialsError, ValueError)
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes, the last a NUL


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
            timeouts=Timeouts(fetch=args.fetch_timeout, signals=args.signal_timeout, stop=args.stop_timeout),
            poll_interval=args.poll_interval,
        )


@dataclass(frozen=True)
class LoadedConfig:
    plan: TreePlan
    watched: tuple[Path, ...]  # the files whose change restarts the tree


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
    return LoadedConfig(plan, tuple(watched))


def tree_environment(settings: BootstrapSettings, plan: TreePlan, log_dir: Path, signals_dir: Path) -> dict[str, str]:
    """What supervisord and its programs inherit: our environment, the plan, and where things live."""
    return {
        **os.environ,
        **plan.to_env(),
        "CMAN_ENV_CONFIG_PATH": str(settings.env_config_path),
        "CMAN_PYTHON": sys.executable,
        "CMAN_LOG_DIR": str(log_dir),
        "CMAN_SIGNALS_DIR": str(signals_dir),
        "CMAN_SIGNALS_CODENAME": settings.codename,
        "CMAN_SIGNAL_ALLOWED_UIDS": settings.allowed_uids,
        "CMAN_AUTOSCALER_COMMAND": settings.autoscaler_command,
    }


class Bootstrap:
    def __init__(self, settings: BootstrapSettings, stop_event: threading.Event) -> None:
        self.settings = settings
        self.stop_event = stop_event

    def run(self) -> int:
        try:
            loaded = load(self.settings)
        except SETUP_ERRORS as e:
            log.error("%s", e)
            return 1
        private = Path(tempfile.mkdtemp(prefix="clusterman-tree-", dir=self.settings.private_parent))
        log_dir = self.settings.log_dir or private / "logs"
        signals_dir = self.settings.signals_dir or private / "signals"
        try:
            if len(str(Supervisor.socket_in(private))) > MAX_SOCKET_PATH:
                log.error("%s is too long a path for a Unix socket: use a shorter --private-dir-parent", private)
                return 1
            log_dir.mkdir(parents=True, exist_ok=True)
            signals_dir.mkdir(parents=True, exist_ok=True)
            log.info("private directory %s, program logs in %s", private, log_dir)
            return self._supervise(loaded, private, log_dir, signals_dir)
        finally:
            shutil.rmtree(private, ignore_errors=True)

    def _supervise(self, loaded: LoadedConfig, private: Path, log_dir: Path, signals_dir: Path) -> int:
        baseline = fingerprint(loaded.watched)
        last_good: LoadedConfig | None = None
        while True:
            env = tree_environment(self.settings, loaded.plan, log_dir, signals_dir)
            supervisor = Supervisor(self.settings.supervisor_config, private, env)
            tree = ProcessTree(supervisor, loaded.plan, self.settings.timeouts, self.stop_event)
            log.info("starting the tree for %s", loaded.plan.describe())
            try:
                try:
                    tree.start()
                except (TreeError, SupervisorError) as e:
                    if last_good is None:
                        log.error("%s", e)
                        return 1
                    log.error("%s; going back to the last working configuration", e)
                    # The failing files stay the baseline: nothing restarts until they change again.
                    loaded, last_good = last_good, None
                    continue
                last_good = loaded
                new = self._watch(tree, baseline)
            except Stopped:
                new = None
            except (TreeError, SupervisorError) as e:
                log.error("%s", e)
                return 1
            finally:
                tree.stop()
            if new is None:
                log.info("stopped the tree")
                return 0
            loaded, baseline = new

    def _watch(self, tree: ProcessTree, baseline: Fingerprint) -> tuple[LoadedConfig, Fingerprint] | None:
        """Return the new config when the watched files change and validate; None on SIGTERM/SIGINT."""
        rejected: Fingerprint | None = None
        paths = [Path(p) for p, _ in baseline]
        while not self.stop_event.wait(self.settings.poll_interval):
            tree.check()
            now = fingerprint(paths)
            if now in (baseline, rejected):
                continue
            try:
                new = load(self.settings)
            except SETUP_ERRORS as e:
                log.error("%s (the running tree keeps its previous configuration)", e)
                rejected = now
                continue
            log.info("%s changed: restarting the tree", ", ".join(changed(baseline, now)))
            return new, fingerprint(new.watched)
        return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m clusterman.batch.autoscaler_bootstrap",
        description="Run the process tree (signal fetchers, signals, autoscaler) of the pool named by "
        "$CMAN_CLUSTER, $CMAN_POOL and $CMAN_SCHEDULER; docs/deployment.md describes it.",
    )
    env = os.environ
    parser.add_argument("--env-config-path", default=default_env_config_path(), help="the main config file")
    parser.add_argument("--supervisor-config", default=str(SUPERVISOR_CONFIG), help="supervisord's config file")
    parser.add_argument("--private-dir-parent", type=Path, default=None, help="where to make the private directory")
    parser.add_argument("--log-dir", type=Path, default=_env_path("CMAN_LOG_DIR"), help="program logs ($CMAN_LOG_DIR)")
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
    parser.add_argument("--signal-timeout", type=float, default=60.0, help="seconds for all signals to answer")
    parser.add_argument("--stop-timeout", type=float, default=60.0, help="seconds for the tree to stop")
    parser.add_argument("--poll-interval", type=float, default=10.0, help="seconds between config checks")
    parser.add_argument("--log-level", default="INFO")
    return parser


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    try:
        settings = BootstrapSettings.from_args(args, os.environ)
    except SETUP_ERRORS as e:
        log.error("%s", e)
        return 1
    return Bootstrap(settings, stop_on_signals(log, "stopping the tree")).run()


if __name__ == "__main__":
    sys.exit(main())
