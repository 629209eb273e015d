"""``clusterman migrate`` / ``clusterman migrate-stop``: ask a pool to replace its nodes, or stop asking.

Clusterman's commands, with its arguments: ``migrate --cluster C --pool P TRAIT OPERATOR TARGET
[--label-selector S ...]`` creates a ``NodeMigration`` resource (pending), which the pool's
autoscaler picks up in its own run (docs/node_lifecycle.md, "Node migration"); ``migrate-stop
--cluster C --pool P`` marks the pool's pending and running ones ``stop``. Both talk to the
cluster's API server with the kubeconfig the main file names for the cluster (else
``$KUBECONFIG``), as the person running them: the ``clusterman-migrate`` ClusterRole
(``deploy/kubernetes/shared/rbac.yaml``) is what they need.

The condition and the selectors are checked before anything is created: a typo is one line, and
no resource.
"""

from __future__ import annotations

import argparse
import sys
import time

from clusterman.batch.arguments import add_pool_arguments
from clusterman.batch.arguments import add_timeout_argument
from clusterman.batch.arguments import resolve_identity
from clusterman.cluster.node_migrations import NameTaken
from clusterman.cluster.node_migrations import NodeMigrations
from clusterman.core import label_selectors
from clusterman.core.config import Scheduler
from clusterman.core.config_schema import ConfigError
from clusterman.decision import migration_request
from clusterman.decision.migration_condition import Condition
from clusterman.decision.migration_condition import Operator
from clusterman.decision.migration_condition import Trait
from clusterman.decision.migration_request import Status
from clusterman.errors import reading_input
from clusterman.wiring.connectors import kubeconfig_path
from clusterman.wiring.setup import PoolTarget


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    start = subparsers.add_parser("migrate", help="replace a pool's nodes that do not meet a condition")
    add_pool_arguments(start)
    condition = start.add_argument_group("migration condition", "what every node of the pool must meet at the end")
    condition.add_argument("condition_trait", choices=[t.value for t in Trait], help="what is compared")
    condition.add_argument("condition_operator", choices=[o.value for o in Operator], help="how")
    condition.add_argument(
        "condition_target", help="a version, an instance type or a duration; a comma-separated list for in, notin"
    )
    start.add_argument(
        "--label-selector",
        action="append",
        default=[],
        help="only nodes with these labels (a Kubernetes label selector; may be given more than once)",
    )
    start.set_defaults(func=run_migrate)
    stop = subparsers.add_parser("migrate-stop", help="stop a pool's pending and running node migrations")
    add_pool_arguments(stop)
    stop.set_defaults(func=run_migrate_stop)
    for parser in (start, stop):
        add_timeout_argument(parser, 15.0, "seconds each call to the Kubernetes API may take")


def _kubernetes_pool(args: argparse.Namespace) -> PoolTarget:
    target = resolve_identity(args)
    if target.identity.scheduler is not Scheduler.KUBERNETES:
        raise ConfigError(
            "arguments",
            "",
            f"node migration is for Kubernetes pools; {target.identity} is {target.identity.scheduler.value}",
        )
    return target


def _migrations(target: PoolTarget, timeout: float) -> NodeMigrations:
    return NodeMigrations(kubeconfig_path(target.main, target.identity), timeout_seconds=timeout, watch=False)


def run_migrate(args: argparse.Namespace) -> int:
    target = _kubernetes_pool(args)
    with reading_input():
        condition = Condition.parse(args.condition_trait, args.condition_operator, args.condition_target)
        selectors = tuple(str(label_selectors.parse(s)) for s in args.label_selector if s.strip())
    pool = target.setup().pool
    identity = target.identity
    migrations = _migrations(target, args.timeout)
    try:
        name = _create(migrations, target, condition, selectors, pool.pool_label_key)
    finally:
        migrations.close()
    selected = f" on nodes {', '.join(selectors)}" if selectors else ""
    print(f"{identity}: created {migration_request.PLURAL}/{name} ({Status.PENDING.value}): {condition}{selected}")
    if not pool.node_migration.trigger.event:
        print(
            f"{identity}: warning: its pool file does not set node_migration.trigger.event: true, "
            "so its autoscaler will mark the migration skipped",
            file=sys.stderr,
        )
    return 0


def _create(
    migrations: NodeMigrations, target: PoolTarget, condition: Condition, selectors: tuple[str, ...], label_key: str
) -> str:
    """Create the resource under Clusterman's name; a second one in the same second gets ``-2``, ``-3``."""
    identity = target.identity
    base = migration_request.resource_name(identity.cluster, identity.pool, time.time())
    for n in range(1, 10):
        name = base if n == 1 else f"{base}-{n}"
        try:
            migrations.create(
                migration_request.body(name, identity.cluster, identity.pool, condition, selectors, label_key)
            )
        except NameTaken:
            continue
        return name
    raise NameTaken(f"{migration_request.PLURAL}/{base}: taken, and {base}-2 to -9 too")


def run_migrate_stop(args: argparse.Namespace) -> int:
    target = _kubernetes_pool(args)
    identity = target.identity
    migrations = _migrations(target, args.timeout)
    try:
        mine = [
            r
            for r in migrations.requests()
            if r.cluster == identity.cluster and r.pool == identity.pool and r.status is not None and r.status.open
        ]
        for request in mine:
            migrations.mark(request.name, Status.STOP)
            print(f"{identity}: {migration_request.PLURAL}/{request.name} ({request.spec_line()}): marked stop")
    finally:
        migrations.close()
    if not mine:
        print(f"{identity}: no pending or running node migration to stop")
    return 0
