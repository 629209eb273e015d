"""Open the configured state store."""

from __future__ import annotations

from pathlib import Path

from clusterman.aws.session import AwsSettings
from clusterman.aws.session import client
from clusterman.config.model import MainConfig
from clusterman.config.model import StateBackend
from clusterman.state.store import DynamoStateStore
from clusterman.state.store import SqliteStateStore
from clusterman.state.store import StateStore


def open_state_store(main: MainConfig) -> StateStore:
    if main.state.backend is StateBackend.DYNAMODB:
        return DynamoStateStore(client(AwsSettings.from_config(main.aws), "dynamodb"), main.aws.state_table)
    return SqliteStateStore(Path(main.state_directory) / main.state.path)
