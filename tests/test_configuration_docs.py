"""docs/configuration.md documents every key of the main file: each leaf of ``MainConfig`` has a row."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

from clusterman.core.config import MainConfig
from clusterman.core.config import SignalConfig

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def main_file_keys(cls: type, prefix: str = "") -> list[str]:
    """Dotted keys of the leaves; a map of blocks is ``<name>``; a signal block is one key (its own table)."""
    keys = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key, kind = f"{prefix}{f.name}", hints[f.name]
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if typing.get_origin(kind) is dict and dataclasses.is_dataclass(args[1]):
            keys += main_file_keys(args[1], f"{key}.<name>.")
        elif dataclasses.is_dataclass(kind) and kind is not SignalConfig:
            keys += main_file_keys(kind, f"{key}.")
        else:
            keys.append(key)
    return keys


def test_every_main_file_key_has_a_row() -> None:
    rows = set(re.findall(r"^\| `([^`]+)`", DOC.read_text(), re.MULTILINE))
    keys = main_file_keys(MainConfig)
    assert {"state.backend", "events.host", "metrics.dynamodb.ttl_attribute", "clusters.<name>.aws_region"} <= set(keys)
    assert [k for k in keys if k not in rows] == []
