import pytest
from botocore.exceptions import ClientError
from botocore.exceptions import ReadTimeoutError

from clusterman.aws.session import CallBudgetExceeded
from clusterman.cloud.aws_calls import cloud_call
from clusterman.cloud.aws_calls import is_ambiguous
from clusterman.cloud.aws_calls import write_absolute
from clusterman.cloud.resource_group import Instance
from clusterman.cloud.resource_group import InstanceState
from clusterman.cloud.resource_group import ResourceGroupError
from clusterman.cloud.resource_group import clamp_target
from clusterman.cloud.resource_group import plan_termination
from clusterman.cloud.resource_group import tag_names_pool
from clusterman.cloud.resource_group import whole_units
from clusterman.cloud.simulated_group import SimulatedGroup
from clusterman.cloud.simulated_group import SimulatedMarket


def client_error(code, status=400, message="m"):
    response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "SetDesiredCapacity")


@pytest.mark.parametrize(
    ("capacity", "units"), [(0, 0), (41.99999999, 42), (42.0000001, 42), (42.2, 43), (-0.0000001, 0)]
)
def test_whole_units_round_up_but_forgive_float_noise(capacity, units):
    assert whole_units(capacity) == units


def test_clamp_target_names_what_it_changed():
    assert clamp_target("asg g", 5, 1, 10) == (5, "")
    assert clamp_target("asg g", 50, 1, 10)[0] == 10
    assert clamp_target("asg g", 0, 1.5, 10)[0] == 2
    with pytest.raises(ResourceGroupError, match="asg g: refusing target capacity -1"):
        clamp_target("asg g", -1, 0, 10)


def instance(i, weight=1.0, state=InstanceState.RUNNING):
    return Instance(f"i-{i}", "m5.large", "us-west-2a", weight, 0.0, state)


def test_plan_termination_keeps_the_minimum_and_skips_what_it_must():
    instances = (instance(1, 2), instance(2, 2), instance(3, 1), instance(4, state=InstanceState.SHUTTING_DOWN))
    group = SimulatedGroup("g", [SimulatedMarket("m5.large", "us-west-2a")], clock=lambda: 0.0)
    plan = plan_termination(group, instances, ["i-1", "i-2", "i-3", "i-4", "i-9", "i-1"], target=5, minimum=1)
    assert [i.id for i in plan.lower] == ["i-1", "i-2"]  # 5 → 3 → 1
    assert [i.id for i in plan.replace] == ["i-3"]  # would take the target under its minimum
    assert plan.skipped == (("i-4", "already shutting-down"), ("i-9", "not an instance of simulated g"))
    assert plan.lowered_by == 4

    partly = plan.result(dry_run=False, done=["i-2", "i-3"], failed=[("i-1", "AccessDenied")])
    assert (partly.terminated, partly.replaced, partly.lowered_by) == (("i-2", "i-3"), ("i-3",), 2)
    assert partly.failed == (("i-1", "AccessDenied"),)

    drained = plan_termination(group, instances, ["i-1", "i-2", "i-3"], target=5, minimum=1, drain=True)
    assert [i.id for i in drained.chosen] == ["i-1", "i-2", "i-3"] and drained.lowered_by == 0
    assert drained.result(dry_run=True).replaced == ()


def test_pool_tags_follow_clusterman_json():
    assert tag_names_pool('{"pool": "web", "paasta_cluster": "c1"}', "c1", "web")
    assert not tag_names_pool('{"pool": "web", "paasta_cluster": "c2"}', "c1", "web")
    assert not tag_names_pool(None, "c1", "web")
    with pytest.raises(ValueError, match="expected JSON like"):
        tag_names_pool("web", "c1", "web")


def test_ambiguous_errors_are_those_the_service_may_have_applied():
    assert is_ambiguous(client_error("Throttling"))
    assert is_ambiguous(client_error("RequestLimitExceeded", 503))
    assert is_ambiguous(client_error("Whatever", 500))
    assert is_ambiguous(ReadTimeoutError(endpoint_url="http://x"))
    # an attempt was sent before the budget stopped the next: it may have landed
    assert is_ambiguous(CallBudgetExceeded(url="http://x", why="no answer", budget=3))
    assert not is_ambiguous(client_error("AccessDenied", 403))
    assert not is_ambiguous(client_error("ValidationError"))


def test_cloud_call_names_the_group_and_keeps_the_ambiguity():
    with pytest.raises(ResourceGroupError) as err, cloud_call("sfr sfr-1", "ModifySpotFleetRequest"):
        raise client_error("AccessDenied", 403, "not yours")
    assert str(err.value) == "sfr sfr-1: ModifySpotFleetRequest failed: AccessDenied: not yours"
    assert not err.value.ambiguous


class Remote:
    """A value behind an unreliable link: each failure either applied the write or did not."""

    def __init__(self, value, failures):
        self.value = value
        self.failures = list(failures)  # "applied" / "lost" / "refused", one per write attempt
        self.writes = 0
        self.reads = 0

    def writer(self, wanted):
        def write():
            self.writes += 1
            outcome = self.failures.pop(0) if self.failures else "ok"
            if outcome in ("ok", "applied"):
                self.value = wanted
            if outcome == "late":  # lost, and past the call's budget
                with cloud_call("asg g", "SetDesiredCapacity"):
                    raise CallBudgetExceeded(url="http://x", why="no answer", budget=3)
            if outcome != "ok":
                with cloud_call("asg g", "SetDesiredCapacity"):
                    raise client_error("AccessDenied" if outcome == "refused" else "Throttling")

        return write

    def read(self):
        self.reads += 1
        return self.value


def test_write_absolute_reads_back_before_any_retry():
    applied = Remote(2, ["applied"])
    write_absolute("asg g", "SetDesiredCapacity", 5, applied.writer(5), applied.read, sleep=lambda s: None)
    assert (applied.value, applied.writes, applied.reads) == (5, 1, 1)  # applied: nothing sent again

    lost = Remote(2, ["lost", "lost"])
    write_absolute("asg g", "SetDesiredCapacity", 5, lost.writer(5), lost.read, sleep=lambda s: None)
    assert (lost.value, lost.writes, lost.reads) == (5, 3, 2)

    refused = Remote(2, ["refused"])
    with pytest.raises(ResourceGroupError, match="AccessDenied"):
        write_absolute("asg g", "SetDesiredCapacity", 5, refused.writer(5), refused.read, sleep=lambda s: None)
    assert (refused.value, refused.writes, refused.reads) == (2, 1, 0)

    hopeless = Remote(2, ["lost"] * 5)
    with pytest.raises(ResourceGroupError, match=r"did not take after 3 attempts \(still 2\)") as err:
        write_absolute("asg g", "SetDesiredCapacity", 5, hopeless.writer(5), hopeless.read, sleep=lambda s: None)
    assert err.value.ambiguous and hopeless.writes == 3

    late = Remote(2, ["late"] * 5)  # the budget is spent: read back once, never sent again
    with pytest.raises(ResourceGroupError, match=r"did not take after 1 attempt \(still 2\)"):
        write_absolute("asg g", "SetDesiredCapacity", 5, late.writer(5), late.read, sleep=lambda s: None)
    assert (late.writes, late.reads) == (1, 1)
