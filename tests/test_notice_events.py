"""EventBridge events in AWS's own shapes read as notices (clusterman/notices/events.py)."""

from __future__ import annotations

import json

import pytest

from clusterman.core.notices import LeaveReason
from clusterman.notices.events import Rebalance
from clusterman.notices.events import Unreadable
from clusterman.notices.events import notices_of

T = 1_796_589_600.0  # 2026-12-06T20:40:00Z


def event(kind: str, detail: dict, source: str = "aws.ec2", time: str = "2026-12-06T20:40:00Z") -> str:
    return json.dumps({
        "version": "0", "id": "7bf73129-1428-4cd3-a780-95db273d1602", "detail-type": kind, "source": source,
        "account": "123456789012", "time": time, "region": "us-west-2",
        "resources": ["arn:aws:ec2:us-west-2:123456789012:instance/i-0abc"], "detail": detail,
    })  # fmt: skip


def test_a_spot_warning_gives_two_minutes():
    body = event("EC2 Spot Instance Interruption Warning", {"instance-id": "i-0abc", "instance-action": "terminate"})
    (notice,) = notices_of(body, "m-1")
    assert (notice.reason, notice.instance_id, notice.noticed_at, notice.deadline, notice.key) == (
        LeaveReason.SPOT_INTERRUPTION, "i-0abc", T, T + 120, "m-1",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("policy", "expected"),
    [(Rebalance.IGNORE, None), (Rebalance.REPLACE_AHEAD, False), (Rebalance.DRAIN, True)],
)
def test_a_rebalance_recommendation_does_what_the_policy_says(policy, expected):
    notices = notices_of(event("EC2 Instance Rebalance Recommendation", {"instance-id": "i-0abc"}), "m", policy)
    assert [n.drain for n in notices] == ([] if expected is None else [expected])


def test_a_scheduled_retirement_names_each_instance_with_its_start():
    detail = {
        "eventArn": "arn:aws:health:us-west-2::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/x",
        "service": "EC2", "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
        "eventTypeCategory": "scheduledChange", "startTime": "Mon, 07 Dec 2026 20:40:00 GMT",
        "affectedEntities": [{"entityValue": "i-0abc"}, {"entityValue": "i-0def"}],
    }  # fmt: skip
    notices = notices_of(event("AWS Health Event", detail, source="aws.health"), "m")
    assert [(n.reason, n.instance_id, n.deadline) for n in notices] == [
        (LeaveReason.SCHEDULED_CHANGE, "i-0abc", T + 86400), (LeaveReason.SCHEDULED_CHANGE, "i-0def", T + 86400),
    ]  # fmt: skip
    other = {**detail, "service": "RDS"}
    assert notices_of(event("AWS Health Event", other, source="aws.health"), "m") == ()


@pytest.mark.parametrize(("state", "leaving"), [("stopping", True), ("terminated", True), ("running", False)])
def test_a_state_change_is_a_notice_only_when_the_instance_goes(state, leaving):
    notices = notices_of(
        event("EC2 Instance State-change Notification", {"instance-id": "i-0abc", "state": state}), "m"
    )
    assert [(n.reason, n.deadline) for n in notices] == ([(LeaveReason.INSTANCE_STOPPING, T)] if leaving else [])


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("{not json", "not JSON"),
        ("[1]", "not an event: list"),
        (json.dumps({"detail-type": "Something Else", "detail": {}}), "detail-type 'Something Else' is none of"),
        (event("EC2 Spot Instance Interruption Warning", {}), "detail.instance-id is missing"),
        (event("EC2 Spot Instance Interruption Warning", {"instance-id": "i-1"}, time="yesterday"), "time:"),
    ],
)
def test_what_is_not_such_an_event_is_unreadable_and_says_why(body, why):
    with pytest.raises(Unreadable, match=why):
        notices_of(body, "m")
