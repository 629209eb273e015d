"""Reading a pool's resource groups into the cloud view a connector joins with its nodes."""

from clusterman.cloud.groups_view import GroupsCloudView
from clusterman.cloud.groups_view import cloud_view_of
from clusterman.cloud.resource_group import CloudGroup
from clusterman.cloud.resource_group import GroupReadings
from clusterman.cloud.resource_group import GroupState
from clusterman.cloud.resource_group import Instance
from clusterman.cloud.resource_group import InstanceState
from clusterman.cloud.resource_group import ResourceGroupError
from clusterman.cloud.simulated_group import SimulatedGroup
from clusterman.cloud.simulated_group import SimulatedMarket
from clusterman.core.model import ResourceGroup


class Broken(CloudGroup):
    kind = "asg"

    def read(self):
        raise ResourceGroupError(self.label, "AccessDenied")

    def set_target_capacity(self, new_target, dry_run=False):
        raise AssertionError("not called")

    def terminate_instances(self, instance_ids, dry_run=False):
        raise AssertionError("not called")


def test_live_instances_of_readable_groups_and_errors_of_the_others():
    now = [1000.0]
    group = SimulatedGroup(
        "g1", [SimulatedMarket("m5.large", "us-west-2a", weight=2)], lambda: now[0], target_capacity=4
    )
    view_source = GroupsCloudView([group, Broken("bad")])
    reading = view_source.read(now[0])
    view = reading.view
    assert [g.id for g in view.groups] == ["g1"]
    assert len(view.instances) == 2 and {i.weight for i in view.instances} == {2}
    assert all(i.group_id == "g1" and i.market == "us-west-2a" for i in view.instances)
    assert [e.group for e in reading.unreadable] == ["asg bad"]
    assert [g.id for g in reading.groups] == ["g1", "bad"]  # the handles, readable or not
    group.terminate_instances([view.instances[0].instance_id])
    assert len(view_source.cloud_view(now[0]).instances) == 1


def test_the_view_keeps_the_instances_a_group_counts_as_live():
    """One rule for what counts as capacity, in the group's reading and in the view."""
    instances = tuple(Instance(s.value, "m5.large", "us-west-2a", 1, 0.0, s) for s in InstanceState)
    state = GroupState(ResourceGroup("g1", 3, 3), instances)
    view = cloud_view_of(GroupReadings({"g1": state}, ()))
    assert [i.instance_id for i in view.instances] == [i.id for i in state.live_instances()]
    assert {i.instance_id for i in view.instances} == {"pending", "running", "unknown"}
