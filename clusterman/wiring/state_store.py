"""Open the configured state store."""

from __future__ import annotations

from pathlib import Path

from clusterman.aws.session import AwsSettings
from clusterman.aws.session import budget_config
from clusterman.aws.session import client
from clusterman.core.config import LeaseBackend
from clusterman.core.config import MainConfig
from clusterman.core.config import StateBackend
from clusterman.state.lease import AUTOSCALER_LEASE
from clusterman.state.lease import LEASE_REQUEST
from clusterman.state.store import DynamoStateStore
from clusterman.state.store import SplitStore
from clusterman.state.store import SqliteStateStore
from clusterman.state.store import StateStore


def open_state_store(main: MainConfig, timeout_seconds: float | None = None) -> StateStore:
    """``timeout_seconds`` bounds each DynamoDB call, its retries included (``budget_config``;
    botocore alone: 60 s per attempt, 5 attempts): a stopped endpoint must not hold a lease claim
    longer than the run's budget."""
    store: StateStore
    if main.state.backend is StateBackend.DYNAMODB:
        dynamodb = client(AwsSettings.from_config(main.aws), "dynamodb", **budget_config(timeout_seconds))
        store = DynamoStateStore(dynamodb, main.aws.state_table)
    else:
        store = SqliteStateStore(Path(main.state_directory) / main.state.path)
    if main.state.lease is LeaseBackend.KUBERNETES:
        from clusterman.cluster.kubernetes import ATTEMPTS
        from clusterman.cluster.kubernetes import api_client
        from clusterman.state.kubernetes_lease import KubernetesLeaseStore

        # The cluster the process runs in (in-cluster, or an operator's $KUBECONFIG). A call makes up
        # to ATTEMPTS attempts: each gets a share of the budget.
        attempt = 10.0 if timeout_seconds is None else max(0.5, timeout_seconds / ATTEMPTS)
        leases = KubernetesLeaseStore(lambda: api_client(None), main.state.lease_namespace, attempt)
        store = SplitStore(store, leases, frozenset({AUTOSCALER_LEASE, LEASE_REQUEST}))
    return store
