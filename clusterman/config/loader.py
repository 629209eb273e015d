"""Find and load srv-configs files (YAML), and validate them into typed objects.

Layout (as Clusterman lays it out):
  <env-config-path>                                    the main file, clusterman.yaml
  <cluster_config_directory>/<cluster>/<pool>.<scheduler>   one file per pool
A relative ``cluster_config_directory`` or ``state_directory`` is taken relative to the main file.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from clusterman.config.model import MainConfig
from clusterman.config.model import PoolConfig
from clusterman.config.model import PoolIdentity
from clusterman.config.model import Scheduler
from clusterman.config.schema import ConfigError
from clusterman.config.schema import parse
from clusterman.data import default_main_config

DEFAULT_ENV_CONFIG_PATH = "/nail/srv/configs/clusterman.yaml"


def default_env_config_path() -> str:
    """$CMAN_ENV_CONFIG_PATH, else Clusterman's standard path, else the default config clusterman ships."""
    from_env = os.environ.get("CMAN_ENV_CONFIG_PATH")
    if from_env:
        return from_env
    if os.path.exists(DEFAULT_ENV_CONFIG_PATH):
        return DEFAULT_ENV_CONFIG_PATH
    return str(default_main_config())


def read_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load one YAML file and return its data, or a ConfigError (docs/configuration.md: why not staticconf)."""
    source = str(path)
    if not os.path.exists(source):
        raise ConfigError(source, "", "file not found")
    try:
        with open(source, encoding="utf-8") as f:
            data = yaml.safe_load(f)
        data = {} if data is None else data  # an empty file is an empty mapping, as before
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(source, "", f"malformed YAML: {where}{problem}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(source, "", f"not UTF-8 text: byte {e.start}") from e
    except OSError as e:
        raise ConfigError(source, "", f"cannot read: {e.strerror}") from e
    if not isinstance(data, dict):
        raise ConfigError(source, "", "the top level must be a mapping")
    return data


def load_main_config(path: str | os.PathLike[str]) -> MainConfig:
    raw = read_yaml(path)
    main = parse(MainConfig, raw, str(path), ignored=MainConfig.IGNORED_KEYS)
    base = Path(path).resolve().parent
    return replace(
        main,
        cluster_config_directory=str(base / main.cluster_config_directory),
        state_directory=str(base / main.state_directory),
    )


def pool_config_path(cluster_config_directory: str, identity: PoolIdentity) -> Path:
    return Path(cluster_config_directory) / identity.cluster / f"{identity.pool}.{identity.scheduler.value}"


def load_pool_config(
    main: MainConfig, identity: PoolIdentity, cluster_config_directory: str | None = None
) -> PoolConfig:
    if main.clusters and identity.cluster not in main.clusters:
        raise ConfigError("clusters", identity.cluster, f"unknown cluster (known: {', '.join(sorted(main.clusters))})")
    path = pool_config_path(cluster_config_directory or main.cluster_config_directory, identity)
    raw = read_yaml(path)
    return parse(PoolConfig, raw, str(path), ignored=PoolConfig.IGNORED_KEYS)


def list_pools(cluster_config_directory: str, cluster: str) -> list[PoolIdentity]:
    """Every pool file of a cluster, sorted; files with other suffixes are not pools."""
    directory = Path(cluster_config_directory) / cluster
    schedulers = {s.value: s for s in Scheduler}
    pools = []
    if directory.is_dir():
        for entry in sorted(directory.iterdir()):
            pool, _, suffix = entry.name.rpartition(".")
            if entry.is_file() and pool and suffix in schedulers:
                pools.append(PoolIdentity(cluster, pool, schedulers[suffix]))
    return pools


def list_clusters(main: MainConfig, cluster_config_directory: str | None = None) -> list[str]:
    """The clusters of the main config's ``clusters`` block; without one, the directories of pool files."""
    if main.clusters:
        return sorted(main.clusters)
    directory = Path(cluster_config_directory or main.cluster_config_directory)
    return sorted(d.name for d in directory.iterdir() if d.is_dir()) if directory.is_dir() else []


def parse_scheduler(value: str) -> Scheduler:
    try:
        return Scheduler(value)
    except ValueError:
        known = ", ".join(s.value for s in Scheduler)
        raise ConfigError("scheduler", "", f"unknown scheduler {value!r} (known: {known})") from None
