"""``clusterman setup``: create what the main file's state and metrics backends need, idempotently.

DynamoDB: the state table (hash ``state``, range ``entity``) and the three metrics tables (hash
``key``, range ``timestamp``), each with its TTL; tables already there are checked, not changed
(but for a TTL that is off). SQLite: the files. Prometheus is read only: nothing to create. For
each cluster with a ``warning_queue_url``: that SQS queue and the EventBridge rules that feed it
(``clusterman/notices/setup.py``).
Run it once per AWS account and region before installing the pools, and again after an upgrade.
"""

from __future__ import annotations

import argparse

from clusterman.batch.arguments import add_timeout_argument
from clusterman.batch.arguments import load_main


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("setup", help="create the state and metrics tables the main file names")
    add_timeout_argument(
        parser, 120.0, "seconds each DynamoDB call may take, retries and the wait for a new table included"
    )
    parser.set_defaults(func=run_setup)


def run_setup(args: argparse.Namespace) -> int:
    from clusterman.aws.session import AwsSettings
    from clusterman.core.config import MetricsBackend
    from clusterman.notices.setup import set_up_notices
    from clusterman.wiring.metrics_store import open_store
    from clusterman.wiring.state_store import open_state_store

    main = load_main(args)
    state = open_state_store(main, args.timeout)
    print(f"state: {state!r}: {', '.join(state.set_up()) or 'in place'}")
    for cluster, config in sorted(main.clusters.items()):
        if config.warning_queue_url:
            settings = AwsSettings.from_config(main.aws, config.aws_region)
            done = set_up_notices(settings, cluster, config.warning_queue_url, args.timeout)
            print(f"notices of {cluster}: {', '.join(done)}")
    if main.metrics.backend is MetricsBackend.PROMETHEUS:
        print(f"metrics: Prometheus at {main.metrics.prometheus.url} is read only: nothing to create")
        return 0
    metrics = open_store(main, timeout_seconds=args.timeout)
    try:
        changed = metrics.create()
    finally:
        metrics.close()
    print(f"metrics: {metrics!r}: " + (f"created or updated {', '.join(changed)}" if changed else "in place"))
    return 0
