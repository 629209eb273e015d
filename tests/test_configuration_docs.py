"""docs/configuration.md documents every key of the main file (each leaf of ``MainConfig`` has a row),
the draining and node_migration blocks, and every Clusterman key accepted and ignored, with why."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

from clusterman.core.config import DrainingConfig
from clusterman.core.config import MainConfig
from clusterman.core.config import NodeMigrationConfig
from clusterman.core.config import PoolConfig
from clusterman.core.config import SignalConfig

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def main_file_keys(cls: type, prefix: str = "") -> list[str]:
    """Dotted keys of the leaves; a map of blocks is ``<name>``; a signal block is one key (its own
    table), and so is a value read by a parser (``strategy.rate``)."""
    keys = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key, kind = f"{prefix}{f.name}", hints[f.name]
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if typing.get_origin(kind) is dict and dataclasses.is_dataclass(args[1]):
            keys += main_file_keys(args[1], f"{key}.<name>.")
        elif dataclasses.is_dataclass(kind) and kind is not SignalConfig and not f.metadata.get("parser"):
            keys += main_file_keys(kind, f"{key}.")
        else:
            keys.append(key)
    return keys


def test_every_main_file_key_has_a_row() -> None:
    rows = set(re.findall(r"^\| `([^`]+)`", DOC.read_text(), re.MULTILINE))
    keys = main_file_keys(MainConfig)
    assert {"state.backend", "events.host", "metrics.dynamodb.ttl_attribute", "clusters.<name>.aws_region"} <= set(keys)
    assert [k for k in keys if k not in rows] == []


def ignored_keys(cls: type, prefix: str = "") -> list[str]:
    """Dotted paths of the keys each block accepts from Clusterman and ignores (``IGNORED_KEYS``)."""
    keys = [prefix + k for k in getattr(cls, "IGNORED_KEYS", {})]
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key, kind = f"{prefix}{f.name}", hints[f.name]
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if typing.get_origin(kind) is dict and dataclasses.is_dataclass(args[1]):
            keys += ignored_keys(args[1], f"{key}.<name>.")
        elif dataclasses.is_dataclass(kind):
            keys += ignored_keys(kind, f"{key}.")
    return keys


def test_every_draining_and_node_migration_key_has_a_row() -> None:
    rows = set(re.findall(r"^\| `([^`]+)`", DOC.read_text(), re.MULTILINE))
    keys = main_file_keys(DrainingConfig, "draining.") + main_file_keys(NodeMigrationConfig, "node_migration.")
    assert "node_migration.strategy.rate" in keys
    assert [k for k in keys if k not in rows] == []


def test_every_ignored_clusterman_key_has_a_row_with_its_reason() -> None:
    documented = set(re.findall(r"^\| (main|pool) \| `([^`]+)` \|", DOC.read_text(), re.MULTILINE))
    keys = [("main", k) for k in ignored_keys(MainConfig)] + [("pool", k) for k in ignored_keys(PoolConfig)]
    assert ("pool", "autoscaling.killable_nodes_prioritizing_v2") in keys
    assert [k for k in keys if k not in documented] == []
    assert [k for k in documented if k not in keys] == []
