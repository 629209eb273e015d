"""The boto3 clients resource groups use, built on first use from the ``aws`` settings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clusterman.aws.session import AwsSettings
from clusterman.aws.session import budget_config
from clusterman.aws.session import client

DEFAULT_RETRIES: Mapping[str, Any] = {"max_attempts": 5, "mode": "standard"}


class AwsClients:
    """One client per service, shared by every group of a pool; nothing is built until asked for."""

    def __init__(
        self, settings: AwsSettings, retries: Mapping[str, Any] = DEFAULT_RETRIES, timeout_seconds: float | None = None
    ) -> None:
        """``timeout_seconds``: what one call may take with all its retries (the autoscaler's run
        budget; ``budget_config``)."""
        self.settings = settings
        self.retries = dict(retries)
        self.timeouts = budget_config(timeout_seconds)
        self._clients: dict[str, Any] = {}

    def get(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = client(self.settings, service, retries=dict(self.retries), **self.timeouts)
        return self._clients[service]

    @property
    def autoscaling(self) -> Any:
        return self.get("autoscaling")

    @property
    def ec2(self) -> Any:
        return self.get("ec2")

    @property
    def s3(self) -> Any:
        return self.get("s3")
