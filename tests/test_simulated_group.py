import math

import pytest

from clusterman.cloud.discovery import discover_groups
from clusterman.cloud.instance_types import CATALOG
from clusterman.cloud.kinds import Clouds
from clusterman.cloud.resource_group import DEFAULT_TAG_KEY
from clusterman.cloud.resource_group import InstanceState
from clusterman.cloud.resource_group import ResourceGroupError
from clusterman.cloud.resource_group import read_groups
from clusterman.cloud.simulated_group import SimulatedCloud
from clusterman.cloud.simulated_group import SimulatedGroup
from clusterman.cloud.simulated_group import SimulatedMarket
from clusterman.cloud.simulated_group import groups_from_config
from clusterman.core.config import PoolConfig
from clusterman.core.config import PoolIdentity
from clusterman.core.config import ResourceGroupConfig
from clusterman.core.config import Scheduler
from clusterman.core.config_schema import ConfigError
from clusterman.core.config_schema import parse
from clusterman.core.resources import Resources

SMALL = SimulatedMarket("m5.large", "us-west-2a", 1.0, Resources(cpus=2, mem=8000))
LARGE = SimulatedMarket("m5.xlarge", "us-west-2b", 2.0, Resources(cpus=4, mem=16000))
POOL_TAG = '{"pool": "web", "paasta_cluster": "c1"}'


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def group(clock, **kw):
    kw.setdefault("markets", [SMALL])
    return SimulatedGroup(kw.pop("group_id", "g1"), kw.pop("markets"), clock, **kw)


def test_instances_launch_pending_and_run_after_the_join_delay():
    clock = Clock()
    g = group(clock, join_delay_seconds=120)
    change = g.set_target_capacity(3)
    assert (change.previous, change.target, change.changed) == (0, 3, True)
    state = g.read()
    assert [i.state for i in state.instances] == [InstanceState.PENDING] * 3
    assert all(i.launched_at == 1000.0 for i in state.instances)
    assert state.group.fulfilled_capacity == 3  # pending counts, as in AWS
    clock.now += 119
    assert {i.state for i in g.read().instances} == {InstanceState.PENDING}
    clock.now += 1
    assert {i.state for i in g.read().instances} == {InstanceState.RUNNING}


def test_same_seed_same_instances_other_seed_other_instances():
    def run(seed):
        clock = Clock()
        g = group(clock, markets=[SMALL, LARGE], seed=seed, join_delay_seconds=60, join_jitter_seconds=30)
        g.set_target_capacity(10)
        clock.now += 70
        g.terminate_instances([g.read().instances[0].id])
        g.set_target_capacity(14)
        return [(i.id, i.instance_type, i.state) for i in g.read().instances]

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_weighted_markets_fill_the_target_and_size_a_unit():
    g = group(Clock(), markets=[LARGE], target_capacity=5)
    state = g.read()
    assert len(state.instances) == 3  # 3 × weight 2 ≥ 5: overshoots by less than one weight, like AWS
    assert state.group.fulfilled_capacity == 6
    mixed = group(
        Clock(), markets=[SMALL, SimulatedMarket("r5.large", "us-west-2a", 1.0, Resources(cpus=2, mem=16000))]
    )
    assert mixed.read().group.node_resources == Resources(cpus=2, mem=8000)  # the smallest of each


def test_target_is_clamped_rounded_and_validated():
    g = group(Clock(), min_capacity=2, max_capacity=10)
    assert g.read().group.target_capacity == 2  # starts at its minimum
    change = g.set_target_capacity(50)
    assert change.target == 10 and "maximum" in change.note
    change = g.set_target_capacity(0)
    assert change.target == 2 and "minimum" in change.note
    assert g.set_target_capacity(4.2).target == 5
    assert g.set_target_capacity(6.0000000001).target == 6  # float noise is not a unit
    with pytest.raises(ResourceGroupError, match="refusing target capacity nan"):
        g.set_target_capacity(math.nan)


def test_lowering_the_target_terminates_nothing():
    g = group(Clock(), target_capacity=5)
    before = [i.id for i in g.read().instances]
    g.set_target_capacity(1)
    state = g.read()
    assert [i.id for i in state.instances] == before
    assert (state.group.target_capacity, state.group.fulfilled_capacity) == (1, 5)


def test_terminate_removes_exactly_the_chosen_and_lowers_the_target_by_their_weight():
    g = group(Clock(), markets=[LARGE], target_capacity=8)
    ids = [i.id for i in g.read().instances]
    result = g.terminate_instances([ids[1], ids[3], "i-not-mine", ids[1]])
    assert result.terminated == (ids[1], ids[3])
    assert result.lowered_by == 4 and result.replaced == ()
    assert result.skipped == (("i-not-mine", "not an instance of simulated g1"),)
    state = g.read()
    assert [i.id for i in state.instances] == [ids[0], ids[2]]
    assert state.group.target_capacity == 4


def test_terminating_at_the_minimum_replaces_instead_of_shrinking():
    g = group(Clock(), min_capacity=2, target_capacity=3)
    ids = [i.id for i in g.read().instances]
    result = g.terminate_instances(ids[:2])
    assert result.terminated == tuple(ids[:2])
    assert result.replaced == (ids[1],) and result.lowered_by == 1
    state = g.read()
    assert state.group.target_capacity == 2
    assert len(state.instances) == 2 and ids[0] not in {i.id for i in state.instances}


def test_dry_run_changes_nothing():
    g = group(Clock(), target_capacity=4)
    before = g.read()
    change = g.set_target_capacity(9, dry_run=True)
    assert change.dry_run and change.target == 9
    result = g.terminate_instances([before.instances[0].id], dry_run=True)
    assert result.dry_run and result.terminated == (before.instances[0].id,) and result.lowered_by == 1
    assert g.read() == before


def test_a_broken_group_fails_alone():
    clock = Clock()
    good, bad = group(clock, target_capacity=2), group(clock, group_id="g2", target_capacity=2)
    bad.break_with("AccessDenied: not allowed")
    with pytest.raises(ResourceGroupError, match="simulated g2: AccessDenied"):
        bad.set_target_capacity(5)
    readings = read_groups([bad, good])
    assert list(readings.states) == ["g1"] and readings.states["g1"].group.fulfilled_capacity == 2
    assert [str(e) for e in readings.errors] == ["simulated g2: AccessDenied: not allowed"]
    bad.break_with("")
    assert bad.read().group.target_capacity == 2


def test_a_stale_group_is_drained_not_resized():
    g = group(Clock(), target_capacity=3)
    g.mark_stale()
    state = g.read()
    assert state.group.stale and state.group.target_capacity == 0 and state.group.fulfilled_capacity == 3
    assert not g.set_target_capacity(10).changed
    result = g.terminate_instances([i.id for i in state.instances])
    assert result.lowered_by == 0 and result.replaced == () and len(result.terminated) == 3
    assert g.read().instances == ()  # nothing launched to replace them


def test_lost_instances_are_replaced_at_the_same_target():
    clock = Clock()
    g = group(clock, target_capacity=3, join_delay_seconds=30)
    clock.now += 60
    lost = g.read().instances[0].id
    assert g.lose_instances([lost, "i-unknown"]) == [lost]
    state = g.read()
    assert state.group.target_capacity == 3 and len(state.instances) == 3
    assert lost not in {i.id for i in state.instances}
    assert sorted(i.state.value for i in state.instances) == ["pending", "running", "running"]


def test_discovery_finds_the_pools_simulated_groups_by_tag():
    clock = Clock()
    cloud = SimulatedCloud(
        [
            group(clock, group_id="mine", tags={DEFAULT_TAG_KEY: POOL_TAG}),
            group(clock, group_id="other-pool", tags={DEFAULT_TAG_KEY: '{"pool": "db", "paasta_cluster": "c1"}'}),
            group(clock, group_id="bad-tag", tags={DEFAULT_TAG_KEY: "web"}),
            group(clock, group_id="custom", tags={"puppet:role::paasta": POOL_TAG}),
        ]
    )
    entries = [ResourceGroupConfig("simulated"), ResourceGroupConfig("simulated", tag="puppet:role::paasta")]
    found = discover_groups("c1", "web", entries, Clouds(simulated=cloud))
    assert [g.id for g in found.groups] == ["mine", "custom"]
    assert found.errors == () and len(found.mistagged) == 1  # names no pool: reported, holds nothing
    assert "bad-tag" in str(found.mistagged[0]) and "resource_groups[0] (simulated)" in str(found.mistagged[0])

    no_aws = discover_groups("c1", "web", [ResourceGroupConfig("asg", tag="k"), entries[0]], Clouds(simulated=cloud))
    assert [g.id for g in no_aws.groups] == ["mine"]
    assert "need AWS clients" in str(no_aws.errors[0])


def test_reads_return_the_same_state_until_something_changes():
    clock = Clock()
    g = group(clock, target_capacity=2, join_delay_seconds=60)
    first = g.read()
    assert g.read() is first
    g.set_target_capacity(2)
    assert g.read() is first  # the same target changes nothing
    g.set_target_capacity(3)
    launched = g.read()
    assert launched is not first and launched.instances[:2] == first.instances
    clock.now += 59
    assert g.read() is launched
    clock.now += 1
    running = g.read()
    assert running is not launched and running.instances[2].state is InstanceState.RUNNING
    g.terminate_instances([running.instances[0].id])
    assert [i.id for i in g.read().instances] == [i.id for i in running.instances[1:]]
    assert g.read().group.fulfilled_capacity == 2


def pool_config(**simulation):
    raw = {
        "scaling_limits": {"min_capacity": 3, "max_capacity": 10, "max_weight_to_add": 5, "max_weight_to_remove": 5},
        "resource_groups": [{"simulated": {"tag": "sim-a"}}, {"sfr": {"tag": "k"}}],
        "simulation": simulation,
    }
    return parse(PoolConfig, raw, "web.simulated")


IDENTITY = PoolIdentity("c1", "web", Scheduler.SIMULATED)


def test_groups_from_config_share_the_initial_capacity_and_price_from_the_catalog():
    markets = [{"instance_type": "m5.large"}, {"instance_type": "x9.custom", "resources": {"cpus": 8}, "price": 0.5}]
    groups = groups_from_config(IDENTITY, pool_config(markets=markets), Clock(), "web.simulated", every_kind=True)
    assert [g.id for g in groups] == ["sim-a", "sfr-1"]
    assert [g.read().group.target_capacity for g in groups] == [2, 1]  # min_capacity 3, shared out
    small, custom = groups[0].markets
    assert (small.resources, small.price, small.spot) == (CATALOG["m5.large"].resources, 0.096, False)
    assert (custom.resources, custom.price) == (Resources(cpus=8), 0.5)
    assert all(m.spot for m in groups[1].markets)  # a Spot Fleet's markets are spot


def test_groups_from_config_name_what_is_wrong():
    with pytest.raises(ConfigError, match=r"web.simulated: simulation.markets\[0\].instance_type: unknown instance"):
        groups_from_config(IDENTITY, pool_config(markets=[{"instance_type": "x9.huge"}]), Clock(), "web.simulated",
                           every_kind=True)  # fmt: skip
    with pytest.raises(ConfigError, match=r"resource_groups: .* needs a cloud adapter for its sfr groups"):
        groups_from_config(IDENTITY, pool_config(), Clock(), "web.simulated")
    with pytest.raises(ConfigError, match="give either markets or instance_type, not both"):
        pool_config(instance_type="r5.large", markets=[{"instance_type": "m5.large"}])
