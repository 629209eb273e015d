"""Find and load srv-configs files (YAML), and validate them into typed objects.

Layout (as Clusterman lays it out):
  <env-config-path>                                    the main file, clusterman.yaml
  <cluster_config_directory>/<cluster>/<pool>.<scheduler>   one file per pool
A relative ``cluster_config_directory`` or ``state_directory`` is taken relative to the main file,
and a relative ``simulation.trace.file`` relative to the pool file. All three are made absolute
here, so no reader resolves them against its working directory.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from clusterman.config.files import read_regular_file
from clusterman.core.config import ClusterConfig
from clusterman.core.config import MainConfig
from clusterman.core.config import PoolConfig
from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.core.config import split_scheduler
from clusterman.core.config_schema import ConfigError
from clusterman.core.config_schema import parse
from clusterman.data import default_main_config

DEFAULT_ENV_CONFIG_PATH = "/nail/srv/configs/clusterman.yaml"
MAX_CONFIG_BYTES = 16 << 20  # a srv-configs file is kilobytes; a device in its place never ends

_MERGE_TAG = "tag:yaml.org,2002:merge"
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when available


_INT_TAG = "tag:yaml.org,2002:int"


class YamlValueError(Exception):
    """A value YAML would load wrongly or not at all: the key path and what is wrong with it."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key, self.problem = key, problem


def _strict_yaml(filename: str) -> Any:
    """PyYAML's safe load, refusing what it would resolve silently or fail on without a key."""
    loader = _Loader(read_regular_file(filename, MAX_CONFIG_BYTES).decode("utf-8"))
    try:
        node = loader.get_single_node()
        if node is None:
            return {}
        _check_document(loader, node, "", set())
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_document(loader: Any, node: yaml.Node, path: str, visited: set[int]) -> None:
    """Walk the composed document: a key written twice in one mapping (YAML keeps the last without
    a word), and an integer Python will not read (over 4,300 digits), are refused with their path.
    Keys merged in with ``<<: *anchor`` may be overridden by the mapping's own keys, as YAML intends."""
    if id(node) in visited:  # an alias to a node already checked (or a recursive structure)
        return
    visited.add(id(node))
    where = path or "(top level)"
    if isinstance(node, yaml.ScalarNode) and node.tag == _INT_TAG:
        try:
            loader.construct_yaml_int(node)
        except ValueError:
            line = node.start_mark.line + 1
            digits = sum(c.isdigit() for c in node.value)
            raise YamlValueError(where, f"line {line}: a number of {digits} digits is too long") from None
    elif isinstance(node, yaml.MappingNode):
        seen: dict[tuple[str, str], int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                _check_document(loader, value_node, path, visited)
                continue
            name = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
            key_path = f"{path}.{name}" if path else name
            if isinstance(key_node, yaml.ScalarNode):
                identity = (key_node.tag, key_node.value)
                line = key_node.start_mark.line + 1
                first = seen.get(identity)
                if first is not None:
                    lines = f"twice on line {line}" if line == first else f"twice, at lines {first} and {line}"
                    raise YamlValueError(key_path, f"given {lines}: YAML would silently keep the last; remove one")
                seen[identity] = line
            _check_document(loader, value_node, key_path, visited)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_document(loader, item, f"{path}[{i}]", visited)


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
        data = _strict_yaml(source)
    except YamlValueError as e:
        raise ConfigError(source, e.key, e.problem) from e
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
    if main.clusters:
        cluster_config(main, identity.cluster)
    return load_pool_file(pool_config_path(cluster_config_directory or main.cluster_config_directory, identity), main)


def load_pool_file(path: str | os.PathLike[str], main: MainConfig | None = None) -> PoolConfig:
    """One pool file, validated, with its paths made absolute (``read_pool_file``). With the main
    file, what the pool file leaves out of ``draining`` takes the main file's global value."""
    raw = read_pool_file(path)
    pool = parse(PoolConfig, raw, str(path), ignored=PoolConfig.IGNORED_KEYS)
    draining = raw.get("draining") or {}
    if main is not None and "redraining_delay_seconds" not in draining:
        delay = main.global_redraining_delay_seconds
        pool = replace(pool, draining=replace(pool.draining, redraining_delay_seconds=delay))
    return pool


def read_pool_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A pool file's data, not yet validated, with a relative ``simulation.trace.file`` made
    absolute: it is relative to the pool file, wherever the reader runs or copies it."""
    raw = read_yaml(path)
    simulation = raw.get("simulation")
    trace = simulation.get("trace") if isinstance(simulation, dict) else None
    if isinstance(trace, dict) and isinstance(trace.get("file"), str):
        trace["file"] = str(Path(path).absolute().parent / trace["file"])  # an absolute path stays as it is
    return raw


def cluster_config(main: MainConfig, cluster: str) -> ClusterConfig:
    """The cluster's block of the main file; a ConfigError naming the known ones when it has none."""
    found = main.clusters.get(cluster)
    if found is None:
        raise ConfigError("clusters", cluster, f"unknown cluster (known: {', '.join(sorted(main.clusters))})")
    return found


def list_pools(cluster_config_directory: str, cluster: str) -> list[PoolIdentity]:
    """Every pool file of a cluster, sorted; files with other suffixes are not pools."""
    directory = Path(cluster_config_directory) / cluster
    pools = []
    if directory.is_dir():
        for entry in sorted(directory.iterdir()):
            pool, scheduler = split_scheduler(entry.name)
            if entry.is_file() and scheduler is not None:
                pools.append(PoolIdentity(cluster, pool, scheduler))
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
