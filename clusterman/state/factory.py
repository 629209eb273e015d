"""Open the configured state store."""

from __future__ import annotations

from pathlib import Path

from clusterman.aws.session import AwsSettings
from clusterman.aws.session import client
from clusterman.core.config import MainConfig
from clusterman.core.config import StateBackend
from clusterman.state.store import DynamoStateStore
from clusterman.state.store import SqliteStateStore
from clusterman.state.store import StateStore


def open_state_store(main: MainConfig, timeout_seconds: float | None = None) -> StateStore:
    """``timeout_seconds`` bounds each DynamoDB call, its retries included (botocore's default is 60 s
    per attempt, 5 attempts): a stopped endpoint must not hold a lease claim longer than the run's
    budget. Each attempt gets a third of it, as for the cloud (``cloud/clients.py``)."""
    if main.state.backend is StateBackend.DYNAMODB:
        attempt = None if timeout_seconds is None else min(60.0, max(1.0, timeout_seconds / 3))
        waits = (
            {}
            if timeout_seconds is None
            else {"connect_timeout": attempt, "read_timeout": attempt, "call_budget_seconds": timeout_seconds}
        )
        dynamodb = client(AwsSettings.from_config(main.aws), "dynamodb", **waits)
        return DynamoStateStore(dynamodb, main.aws.state_table)
    return SqliteStateStore(Path(main.state_directory) / main.state.path)
