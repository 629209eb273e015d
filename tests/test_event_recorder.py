import itertools

import pytest

from clusterman.core.model import NodeState
from clusterman.core.resources import NO_OPINION
from clusterman.core.resources import ResourceRequest
from clusterman.core.resources import Resources
from clusterman.events.event import ChangeDetail
from clusterman.events.event import ChangeType
from clusterman.events.event import EventType
from clusterman.events.exporter import AutoscalerMetrics
from clusterman.events.exporter import ErrorSource
from clusterman.events.exporter import NodeAction
from clusterman.events.publisher import EventPublisher
from clusterman.events.recorder import Recorder
from clusterman.events.ring import EventRing

POOL = "web.kubernetes"
NODE_SIZE = Resources(cpus=4, mem=16000, disk=100000, gpus=0)


@pytest.fixture
def rec():
    publisher = EventPublisher(EventRing(1000))
    metrics = AutoscalerMetrics("norcal", POOL, publisher)
    ticks = itertools.count(1_000)
    return Recorder(publisher, metrics, POOL, clock_ns=lambda: next(ticks))


def events(rec):
    rec.publisher.drain()
    return [r.event for r in rec.publisher.ring.read(None, 1000).records]


def sample(rec, name, **labels):
    return rec.metrics.registry.get_sample_value(name, {"cluster": "norcal", "pool": POOL, **labels})


def test_signal_answer_records_the_request_without_silent_resources(rec):
    rec.signal_evaluated("batch", "clusterman.Sig@v2", ResourceRequest(cpus=3.5, mem=NO_OPINION), 0.0123)
    (e,) = events(rec)
    assert (e.type, e.change, e.detail) == (EventType.SIGNAL, ChangeType.SET, ChangeDetail.SIGNAL_REQUEST)
    assert (e.object_id, e.reference_id, e.resource) == ("batch", "clusterman.Sig@v2", (("cpus", 3.5),))
    assert e.message == "answered in 12 ms"
    assert e.timestamp_ns == 1000
    assert sample(rec, "clusterman_signal_latency_seconds_count", app="batch") == 1
    assert sample(rec, "clusterman_signal_failures_total", app="batch") == 0


def test_signal_failure_records_the_error_and_the_fallback(rec):
    rec.signal_failed("batch", "Sig@v2", "timed out after 5 s", 5.0, "previous request", {"cpus": 2})
    failed, fallback = events(rec)
    assert (failed.detail, failed.change, failed.message) == (
        ChangeDetail.SIGNAL_FAILED,
        ChangeType.NONE,
        "timed out after 5 s",
    )
    assert (fallback.detail, fallback.reference_id, fallback.resource) == (
        ChangeDetail.SIGNAL_FALLBACK,
        "previous request",
        (("cpus", 2.0),),
    )
    assert sample(rec, "clusterman_signal_failures_total", app="batch") == 1
    assert sample(rec, "clusterman_signal_latency_seconds_bucket", app="batch", le="5.0") == 1


def test_decision_records_action_reason_and_sets_the_gauges(rec):
    rec.decision(
        ChangeDetail.DECISION_UTILISATION,
        -3,
        target=12,
        demand=ResourceRequest(cpus=20, mem=NO_OPINION),
        capacity=Resources(cpus=64, mem=256000),
        utilisation={"cpus": 0.3125},
        setpoint=0.7,
        explanation="cpus below setpoint",
    )
    (e,) = events(rec)
    assert (e.type, e.change, e.detail, e.object_id) == (
        EventType.DECISION,
        ChangeType.REMOVE,
        ChangeDetail.DECISION_UTILISATION,
        POOL,
    )
    assert e.resource == (("capacity", 3.0),)
    assert e.message == "utilisation cpus=31.2% (setpoint 70%), target 12: cpus below setpoint"
    assert sample(rec, "clusterman_scale_delta") == -3
    assert sample(rec, "clusterman_target_capacity") == 12
    assert sample(rec, "clusterman_demand", resource="cpus") == 20
    assert sample(rec, "clusterman_demand", resource="mem") is None  # no opinion: no series
    assert sample(rec, "clusterman_capacity", resource="mem") == 256000
    assert sample(rec, "clusterman_utilisation_ratio", resource="cpus") == 0.3125


def test_a_hold_decision_has_no_change_and_no_resource(rec):
    rec.decision(
        ChangeDetail.DECISION_SCALE_LOCK,
        0,
        target=10,
        demand={},
        capacity={},
        utilisation={},
        setpoint=0.7,
        explanation="scale-down held",
    )
    (e,) = events(rec)
    assert (e.change, e.resource) == (ChangeType.NONE, ())


def test_decision_reason_must_be_a_decision_detail(rec):
    with pytest.raises(ValueError, match="DECISION_"):
        rec.decision(
            ChangeDetail.NODE_TAINT, 1, target=1, demand={}, capacity={}, utilisation={}, setpoint=0.7, explanation=""
        )


def test_group_target_and_node_actions(rec):
    rec.group_target("asg-web", 8, 10, "scale up")
    rec.node(NodeAction.TAINT, "i-1", "asg-web", NODE_SIZE, "oldest first")
    rec.node(NodeAction.TERMINATE, "i-1", "asg-web", NODE_SIZE, "empty after drain")
    rec.node(NodeAction.ORPHAN_CLEANUP, "i-2", "asg-web", reason="never joined")
    rec.node(NodeAction.JOIN, "i-3", "asg-web", NODE_SIZE, join_seconds=95.0)
    group, taint, terminate, orphan, join = events(rec)
    assert (group.detail, group.change, group.object_id, group.reference_id, group.resource, group.message) == (
        ChangeDetail.GROUP_TARGET,
        ChangeType.SET,
        "asg-web",
        POOL,
        (("capacity", 10.0),),
        "target 8 -> 10: scale up",
    )
    assert (taint.detail, taint.change, taint.resource[0]) == (ChangeDetail.NODE_TAINT, ChangeType.SET, ("cpus", 4.0))
    assert (terminate.detail, terminate.change) == (ChangeDetail.NODE_TERMINATE, ChangeType.REMOVE)
    assert (orphan.detail, orphan.change, orphan.resource) == (
        ChangeDetail.NODE_ORPHAN,
        ChangeType.REMOVE,
        (("nodes", 1.0),),
    )
    assert (join.detail, join.change) == (ChangeDetail.NODE_JOIN, ChangeType.ADD)
    assert sample(rec, "clusterman_node_actions_total", action="taint") == 1
    assert sample(rec, "clusterman_node_join_seconds_bucket", le="120.0") == 1


def test_lock_breaker_pause_config_and_errors(rec):
    rec.lock_taken(300, "scaled up by 2")
    assert sample(rec, "clusterman_scale_lock") == 1
    assert sample(rec, "clusterman_scale_lock_remaining_seconds") == 300
    rec.lock_released()
    rec.breaker_opened(3, "running count did not grow")
    assert (sample(rec, "clusterman_breaker_open"), sample(rec, "clusterman_breaker_failures")) == (1, 3)
    rec.breaker_closed("pool grew")
    rec.paused("operator")
    assert sample(rec, "clusterman_paused") == 1
    rec.resumed("operator")
    rec.config_reloaded("/etc/clusterman.yaml", "setpoint 0.7 -> 0.8")
    rec.config_rejected("/etc/clusterman.yaml", "autoscaling.setpoint: must be a fraction in (0, 1]")
    rec.error(ErrorSource.CLOUD, "asg-web", "Throttling: rate exceeded")
    details = [e.detail for e in events(rec)]
    assert details == [
        ChangeDetail.LOCK_TAKEN,
        ChangeDetail.LOCK_RELEASED,
        ChangeDetail.BREAKER_OPEN,
        ChangeDetail.BREAKER_CLOSED,
        ChangeDetail.POOL_PAUSE,
        ChangeDetail.POOL_RESUME,
        ChangeDetail.CONFIG_RELOAD,
        ChangeDetail.CONFIG_REJECTED,
        ChangeDetail.ERROR_CLOUD,
    ]
    assert (sample(rec, "clusterman_scale_lock"), sample(rec, "clusterman_breaker_open")) == (0, 0)
    assert sample(rec, "clusterman_paused") == 0
    assert sample(rec, "clusterman_config_reloads_total", result="rejected") == 1
    assert sample(rec, "clusterman_errors_total", source="cloud") == 1


def test_node_counts_export_every_state(rec):
    rec.metrics.observe_nodes({NodeState.READY: 7, NodeState.TAINTED: 2})
    assert sample(rec, "clusterman_nodes", state="ready") == 7
    assert sample(rec, "clusterman_nodes", state="orphan") == 0
    rec.metrics.observe_nodes({NodeState.READY: 8})
    assert sample(rec, "clusterman_nodes", state="tainted") == 0


def test_a_group_that_leaves_loses_its_series(rec):
    rec.metrics.observe_group("asg-a", target=5, fulfilled=4, minimum=1, maximum=10)
    assert sample(rec, "clusterman_group_fulfilled_capacity", group="asg-a") == 4
    rec.metrics.forget_group("asg-a")
    assert sample(rec, "clusterman_group_target_capacity", group="asg-a") is None


def test_unknown_resources_are_refused(rec):
    with pytest.raises(ValueError, match="bananas"):
        rec.metrics.observe_decision(
            demand={"bananas": 1}, capacity={}, utilisation={}, setpoint=0.7, delta=0, target=0
        )


def test_event_history_health_is_exported(rec):
    rec.publisher.queue_size = 2
    for _ in range(3):
        rec.lock_released()
    rec.publisher.drain()
    text = rec.metrics.exposition().decode()
    assert 'clusterman_events_stored{cluster="norcal",pool="web.kubernetes"} 2.0' in text
    assert 'clusterman_events_dropped_total{cluster="norcal",pool="web.kubernetes"} 1.0' in text
    assert 'clusterman_events_published_total{cluster="norcal",pool="web.kubernetes"} 2.0' in text


def test_every_node_action_records_a_node_with_its_size(rec):
    """Each action, given the node's size, is an event the ring takes (a NONE change with a
    resource would be refused: the run that records it would fail after acting)."""
    for action in NodeAction:
        rec.node(action, "i-1", "asg-web", NODE_SIZE, "why")
    recorded = events(rec)
    assert len(recorded) == len(NodeAction)
    assert all(e.resource and e.change is not ChangeType.NONE for e in recorded)
