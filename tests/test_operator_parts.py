"""The pure parts of the operator commands: reading the autoscaler's last decision, parsing targets."""

from fractions import Fraction

import pytest

from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.errors import UserError
from clusterman.events.exporter import AutoscalerMetrics
from clusterman.run.manual import parse_target
from clusterman.wiring.pool_status import decided_utilisation
from tests.scaling_builders import policy

WEB = PoolIdentity("norcal", "web", Scheduler.KUBERNETES)


def test_the_last_decision_is_read_from_the_autoscalers_own_gauges():
    mine = AutoscalerMetrics("norcal", "web.kubernetes")
    mine.observe_decision(demand={"cpus": 10.0}, capacity={"cpus": 16.0, "mem": 64000.0},
                          utilisation={"cpus": 0.625}, setpoint=0.7, delta=0, target=8)  # fmt: skip
    other = AutoscalerMetrics("norcal", "batch.kubernetes")  # the same API may carry other pools
    other.observe_decision(demand={"cpus": 1.0}, capacity={"cpus": 2.0}, utilisation={"cpus": 0.5},
                           setpoint=0.8, delta=0, target=1)  # fmt: skip
    text = (mine.exposition() + other.exposition()).decode()
    reading = decided_utilisation(text, WEB)
    assert (reading.source, reading.ratios, reading.setpoint) == ("last decision", {"cpus": 0.625}, 0.7)
    assert reading.demand == {"cpus": 10.0} and reading.capacity == {"cpus": 16.0, "mem": 64000.0}


def test_no_decision_yet_is_said():
    with pytest.raises(UserError, match=r"has not measured norcal/web\.kubernetes yet"):
        decided_utilisation(AutoscalerMetrics("norcal", "web.kubernetes").exposition().decode(), WEB)


@pytest.mark.parametrize(("text", "expected"), [("min", 2), ("MAX", 30), ("12", 12), ("7.5", Fraction(15, 2))])
def test_targets(text, expected):
    assert parse_target(text, policy(min_capacity=2, max_capacity=30)) == expected


@pytest.mark.parametrize("text", ["-1", "lots", "nan"])
def test_bad_targets(text):
    with pytest.raises(ValueError, match="--target-capacity"):
        parse_target(text, policy())


def test_status_names_the_nodes_drained_to_be_kept_and_those_resting():
    from clusterman.core.timestamps import format_time
    from clusterman.decision.autoscaler_state import AutoscalerState
    from clusterman.decision.disruption import REST_SECONDS
    from clusterman.decision.disruption import DisruptionState
    from clusterman.wiring.pool_status import describe_kept

    now = 1_700_000_000.0
    disruption = DisruptionState(
        keeping=(("k1", now - 60),),
        given_up=(("n3", now - 600), ("old", now - REST_SECONDS)),
        unknown=(("n7", now - 60, now - 900),),
    )
    line = describe_kept(AutoscalerState(disruption=disruption), now)
    assert "1 node(s) being drained to be kept" in line
    assert "taint not answered for n7: the next run settles what choosing it spent" in line
    assert f"n3 rests until {format_time(now - 600 + REST_SECONDS)}" in line
    assert "old" not in line  # its hour is over
    assert describe_kept(AutoscalerState(), now) == "scale lock free, breaker closed"


def test_status_names_each_node_leaving_and_why():
    from clusterman.core.notices import LeaveReason
    from clusterman.decision.autoscaler_state import AutoscalerState
    from clusterman.decision.drains import DrainState
    from clusterman.decision.drains import Leaving
    from clusterman.wiring.pool_status import describe_kept

    now = 1_800_000_000.0
    spot = Leaving("n2", "i-2", "g", LeaveReason.SPOT_INTERRUPTION, now - 30, now + 90, 1.0)
    drains = DrainState(leaving=(spot,), given_up=(("n7", now - 60),))
    line = describe_kept(AutoscalerState(drains=drains), now)
    assert "n2 leaving for spot_interruption since 2027-01-15T07:59:30Z, gone by 2027-01-15T08:01:30Z" in line, line
    assert "1 unit(s) kept for its replacement" in line
    assert "n7: its drain was given up at 2027-01-15T07:59:00Z" in line
