"""Open the configured state store."""

from __future__ import annotations

from pathlib import Path

from clusterman.aws.session import AwsSettings
from clusterman.aws.session import budget_config
from clusterman.aws.session import client
from clusterman.core.config import MainConfig
from clusterman.core.config import StateBackend
from clusterman.state.store import DynamoStateStore
from clusterman.state.store import SqliteStateStore
from clusterman.state.store import StateStore


def open_state_store(main: MainConfig, timeout_seconds: float | None = None) -> StateStore:
    """``timeout_seconds`` bounds each DynamoDB call, its retries included (``budget_config``;
    botocore alone: 60 s per attempt, 5 attempts): a stopped endpoint must not hold a lease claim
    longer than the run's budget."""
    if main.state.backend is StateBackend.DYNAMODB:
        dynamodb = client(AwsSettings.from_config(main.aws), "dynamodb", **budget_config(timeout_seconds))
        return DynamoStateStore(dynamodb, main.aws.state_table)
    return SqliteStateStore(Path(main.state_directory) / main.state.path)
