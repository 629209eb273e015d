"""The warning queue and the EventBridge rules that feed it, created idempotently (``clusterman setup``).

For each cluster with a ``warning_queue_url``: the SQS queue its URL names (messages kept 5 minutes:
a notice older than that is past its deadline or handled by the next event), a queue policy that
lets EventBridge send to it, and one rule per kind of event on the default event bus, each with the
queue as its target. Rules and targets already there are written again as they should be.
"""

from __future__ import annotations

import json
from typing import Any

from clusterman.aws.session import AwsSettings
from clusterman.aws.session import client
from clusterman.notices.events import HEALTH
from clusterman.notices.events import LEAVING_STATES
from clusterman.notices.events import REBALANCE
from clusterman.notices.events import SPOT_WARNING
from clusterman.notices.events import STATE_CHANGE

RETENTION_SECONDS = 300
TARGET_ID = "clusterman-warning-queue"

PATTERNS: dict[str, dict[str, Any]] = {
    "spot-interruption": {"source": ["aws.ec2"], "detail-type": [SPOT_WARNING]},
    "rebalance": {"source": ["aws.ec2"], "detail-type": [REBALANCE]},
    "scheduled-change": {
        "source": ["aws.health"],
        "detail-type": [HEALTH],
        "detail": {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]},
    },
    "state-change": {
        "source": ["aws.ec2"],
        "detail-type": [STATE_CHANGE],
        "detail": {"state": sorted(LEAVING_STATES)},
    },
}


def rule_names(cluster: str) -> list[str]:
    return [f"clusterman-{cluster}-{kind}" for kind in PATTERNS]


def set_up_notices(
    settings: AwsSettings, cluster: str, url: str, timeout_seconds: float = 60.0, clients: tuple[Any, Any] | None = None
) -> list[str]:
    """Create or correct the queue and the rules; what was done, for people. ``clients``: SQS and
    EventBridge clients to use instead of ones built from ``settings``."""
    timeouts = {"connect_timeout": min(timeout_seconds, 10.0), "read_timeout": timeout_seconds}
    sqs, events = clients or (client(settings, "sqs", **timeouts), client(settings, "events", **timeouts))
    name = url.rstrip("/").rpartition("/")[2]
    made = sqs.create_queue(QueueName=name, Attributes={"MessageRetentionPeriod": str(RETENTION_SECONDS)})
    queue = made["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "EventBridgeSendsNotices",
                "Effect": "Allow",
                "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]},
                "Action": "sqs:SendMessage",
                "Resource": arn,
            }
        ],
    }
    sqs.set_queue_attributes(QueueUrl=queue, Attributes={"Policy": json.dumps(policy)})
    done = [f"queue {name} ({arn})"]
    for kind, pattern in PATTERNS.items():
        rule = f"clusterman-{cluster}-{kind}"
        events.put_rule(
            Name=rule,
            EventPattern=json.dumps(pattern),
            State="ENABLED",
            Description=f"clusterman: {kind} notices for cluster {cluster}",
        )
        events.put_targets(Rule=rule, Targets=[{"Id": TARGET_ID, "Arn": arn}])
        done.append(f"rule {rule}")
    return done
