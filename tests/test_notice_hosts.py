"""Clusterman's host messages (its drain and termination queues) read as notices
(clusterman/notices/hosts.py)."""

from __future__ import annotations

import json

import pytest

from clusterman.core.model import NO_TIME
from clusterman.core.notices import LeaveReason
from clusterman.notices.events import Unreadable
from clusterman.notices.hosts import Host
from clusterman.notices.hosts import HostQueue
from clusterman.notices.hosts import read_host

T = 1_796_589_600.0  # 2026-12-06T20:40:00Z


def host(**fields) -> str:
    """A body as Clusterman's DrainingClient writes it (arrow's for_json: ISO 8601 with an offset)."""
    return json.dumps({
        "agent_id": "ip-10-0-1-7.us-west-2.compute.internal", "attempt": 1,
        "draining_start_time": "2026-12-06T12:40:00-08:00", "group_id": "asg-web", "hostname": "web-7",
        "instance_id": "i-0abc", "ip": "10.0.1.7", "pool": "web", "scheduler": "kubernetes",
        "termination_reason": "scaling down", **fields,
    })  # fmt: skip


@pytest.mark.parametrize(
    ("said", "reason", "replaced"),
    [
        ("scaling down", LeaveReason.SCALING_DOWN, False),
        ("node migration", LeaveReason.NODE_MIGRATION, True),
        ("spot interruption", LeaveReason.SPOT_INTERRUPTION, True),
    ],
)
def test_clustermans_three_reasons_are_its_drain_reasons(said, reason, replaced):
    read = read_host(host(termination_reason=said), "asg")
    assert read == Host("i-0abc", reason, T, "web", "asg")
    notice = read.notice(HostQueue.DRAIN, T + 5, "m-1")
    assert (notice.reason, notice.instance_id, notice.replace, notice.key) == (reason, "i-0abc", replaced, "m-1")
    assert notice.noticed_at == T + 5  # kept in the inbox from when it was read


def test_on_the_drain_queue_only_a_spot_interruption_has_a_deadline():
    assert read_host(host()).notice(HostQueue.DRAIN, T + 5, "m").deadline == NO_TIME
    spot = read_host(host(termination_reason="spot interruption"))
    assert spot.notice(HostQueue.DRAIN, T + 5, "m").deadline == T + 120  # two minutes from its start
    undated = read_host(host(termination_reason="spot interruption", draining_start_time=None))
    assert undated.notice(HostQueue.DRAIN, T + 5, "m").deadline == T + 125


def test_on_the_termination_queue_the_host_goes_when_read():
    notice = read_host(host()).notice(HostQueue.TERMINATION, T + 90, "m")
    assert (notice.deadline, notice.drain, notice.replace) == (T + 90, True, False)


def test_a_message_without_reason_or_sender_is_clustermans_default():
    body = json.loads(host())
    del body["termination_reason"], body["draining_start_time"]
    read = read_host(json.dumps({**body, "sender": "sfr"}))
    assert (read.reason, read.started, read.sender) == (LeaveReason.SCALING_DOWN, NO_TIME, "sfr")


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("{not json", "not JSON"),
        ("[1]", "not a host: list"),
        (host(instance_id=""), "instance_id is missing"),
        (host(termination_reason="meteor"), "termination_reason 'meteor' is none of 'scaling down'"),
        (host(draining_start_time="yesterday"), "draining_start_time: must be Unix seconds"),
    ],
)
def test_what_is_not_a_host_says_why(body, says):
    with pytest.raises(Unreadable, match=says):
        read_host(body)
