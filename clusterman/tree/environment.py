"""The CMAN_* environment: how the bootstrap tells supervisord's programs what to fetch and run.

The bootstrap turns the validated configs into a ``TreePlan`` and exports it as space-separated
lists (Clusterman's variable names, so existing tooling keeps working). Each fetcher and each
signal runner is one process of a homogeneous supervisord group and picks its entry from those
lists by its process number. Names end up in lists, socket names, S3 keys and directory names,
so they are checked here, before anything starts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING

from clusterman.errors import UserError
from clusterman.signals.specs import check_version

if TYPE_CHECKING:  # the config modules load YAML and the config schema: run_clusterman_signal,
    # which supervisord starts at every signal restart, reads the lists only and stays light
    from clusterman.core.config import MainConfig
    from clusterman.core.config import PoolConfig
    from clusterman.core.config import PoolIdentity
    from clusterman.signals.specs import SignalSpec

APP_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,127}")


class TreeEnvironmentError(UserError, ValueError):
    """The CMAN_* variables a helper program received do not describe its task."""


@dataclass(frozen=True)
class SignalProcess:
    """One process of the ``run_signals`` group: which signal, from which version, for which app."""

    version: str
    namespace: str
    name: str
    app: str
    where: str = field(default="", compare=False)  # the file and key that set it ("" when read from the lists)


@dataclass(frozen=True)
class TreePlan:
    """Everything supervisord's programs need to know, derived from the configs alone."""

    identity: PoolIdentity
    signals: tuple[SignalProcess, ...]
    bucket: str
    args: str = ""
    drainer: bool = False  # the cluster has a queue of notices: the tree runs a drainer beside the autoscaler

    @property
    def versions(self) -> tuple[str, ...]:
        """Each version once, in the order the signals first use it (the default signal's first)."""
        return tuple(dict.fromkeys(s.version for s in self.signals))

    def to_env(self) -> dict[str, str]:
        return {
            "CMAN_CLUSTER": self.identity.cluster,
            "CMAN_POOL": self.identity.pool,
            "CMAN_SCHEDULER": self.identity.scheduler.value,
            "CMAN_ARGS": self.args,
            "CMAN_VERSIONS_TO_FETCH": " ".join(self.versions),
            "CMAN_SIGNAL_VERSIONS": " ".join(s.version for s in self.signals),
            "CMAN_SIGNAL_NAMESPACES": " ".join(s.namespace for s in self.signals),
            "CMAN_SIGNAL_NAMES": " ".join(s.name for s in self.signals),
            "CMAN_SIGNAL_APPS": " ".join(s.app for s in self.signals),
            "CMAN_NUM_VERSIONS": str(len(self.versions)),
            "CMAN_NUM_SIGNALS": str(len(self.signals)),
            "CMAN_SIGNALS_BUCKET": self.bucket,
        }

    def describe(self) -> str:
        signals = ", ".join(f"{s.namespace}.{s.name}@{s.version} for {s.app}" for s in self.signals)
        return f"{self.identity}: {len(self.signals)} signal(s) in {len(self.versions)} version(s): {signals}"


def plan_tree(
    main: MainConfig, main_source: str, pool: PoolConfig, pool_source: str, identity: PoolIdentity, args: str = ""
) -> TreePlan:
    """The default signal first, then the pool's own signal and its ``app_signals``, each checked."""
    from clusterman.core.config_schema import ConfigError
    from clusterman.signals.specs import app_signal_specs
    from clusterman.signals.specs import default_signal_spec

    try:
        default = default_signal_spec(main)
    except ConfigError as e:
        raise ConfigError(main_source, e.key, e.problem) from e
    entries: list[tuple[SignalSpec, str, str]] = [(default, main_source, "autoscale_signal")]
    for spec in app_signal_specs(pool, identity):
        key = "autoscale_signal" if spec.config is pool.autoscale_signal else f"app_signals.{spec.app}"
        entries.append((spec, pool_source, key))
    processes = []
    seen_apps: dict[str, str] = {}
    for spec, source, key in entries:
        if spec.app in seen_apps:
            raise ConfigError(source, key, f"app {spec.app!r} already has a signal ({seen_apps[spec.app]})")
        seen_apps[spec.app] = key
        processes.append(_checked(spec, source, key))
    drainer = main.runs_drainer(identity.cluster)
    return TreePlan(identity, tuple(processes), main.aws.signals_bucket, args, drainer)


def _checked(spec: SignalSpec, source: str, key: str) -> SignalProcess:
    from clusterman.core.config_schema import ConfigError

    for field_name, value in (("namespace", spec.namespace), ("name", spec.name)):
        if not value.isidentifier():
            raise ConfigError(source, f"{key}.{field_name}", f"{value!r} is not a Python identifier")
    if not APP_PATTERN.fullmatch(spec.app):
        raise ConfigError(source, key, f"app name {spec.app!r} may only use letters, digits and . _ + -")
    try:
        check_version(spec.version)
    except ValueError as e:
        raise ConfigError(source, f"{key}.branch_or_tag", str(e)) from e
    return SignalProcess(spec.version, spec.namespace, spec.name, spec.app, f"{source}: {key}")


def _entry(env: Mapping[str, str], list_var: str, count_var: str, n: int) -> str:
    count_text = env.get(count_var)
    if count_text is None or not count_text.isdigit():
        raise TreeEnvironmentError(f"${count_var} must be a number, got {count_text!r}")
    count = int(count_text)
    items = env.get(list_var, "").split()
    if len(items) != count:
        raise TreeEnvironmentError(f"${list_var} has {len(items)} entries but ${count_var} is {count}")
    if not 0 <= n < count:
        raise TreeEnvironmentError(f"process number {n} is out of range (${count_var} is {count})")
    return items[n]


def version_to_fetch(env: Mapping[str, str], n: int) -> str:
    """The version fetcher number ``n`` downloads."""
    version = _entry(env, "CMAN_VERSIONS_TO_FETCH", "CMAN_NUM_VERSIONS", n)
    try:
        return check_version(version)
    except ValueError as e:
        raise TreeEnvironmentError(str(e)) from e


def signal_process(env: Mapping[str, str], n: int) -> SignalProcess:
    """The signal runner number ``n`` serves."""
    version, namespace, name, app = (
        _entry(env, var, "CMAN_NUM_SIGNALS", n)
        for var in ("CMAN_SIGNAL_VERSIONS", "CMAN_SIGNAL_NAMESPACES", "CMAN_SIGNAL_NAMES", "CMAN_SIGNAL_APPS")
    )
    try:
        check_version(version)
    except ValueError as e:
        raise TreeEnvironmentError(str(e)) from e
    return SignalProcess(version, namespace, name, app)


INSTALLS_ENV = "CMAN_SIGNAL_INSTALLS"


def signal_install(env: Mapping[str, str], n: int, version: str) -> str:
    """The directory (under ``$CMAN_SIGNALS_DIR``) signal number ``n`` runs from: the install the
    bootstrap checked for this tree (``$CMAN_SIGNAL_INSTALLS``), not whatever the version's link
    points to when supervisord restarts it (a later fetch may have moved it); else the link."""
    if not env.get(INSTALLS_ENV):
        return version
    install = _entry(env, INSTALLS_ENV, "CMAN_NUM_SIGNALS", n)
    if not install.startswith(f".{version}-") or "/" in install:
        raise TreeEnvironmentError(f"${INSTALLS_ENV}: {install!r} is not an install of version {version}")
    return install


def signal_processes(env: Mapping[str, str]) -> list[SignalProcess]:
    """Every signal of the tree, as the autoscaler program reads them."""
    count = env.get("CMAN_NUM_SIGNALS", "")
    if not count.isdigit():
        raise TreeEnvironmentError(f"$CMAN_NUM_SIGNALS must be a number, got {count!r}")
    return [signal_process(env, n) for n in range(int(count))]


def runner_environment(env: Mapping[str, str]) -> dict[str, str]:
    """A signal runner's environment: this one, without what would let it import this checkout."""
    return {k: v for k, v in env.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
