"""The pure rules of node migration: label selectors, conditions (traits, operators, versions), and
a NodeMigration resource read or refused (docs/node_lifecycle.md, "Node migration")."""

from __future__ import annotations

import pytest

from clusterman.core import label_selectors
from clusterman.core.model import NO_TIME
from clusterman.core.model import Node
from clusterman.core.model import NodeState
from clusterman.core.model import PoolSnapshot
from clusterman.core.model import ResourceGroup
from clusterman.core.resources import Resources
from clusterman.decision import migration_request
from clusterman.decision.drift import drifted
from clusterman.decision.migration_condition import Condition
from clusterman.decision.migration_condition import os_release
from clusterman.decision.migration_condition import version_key
from clusterman.decision.migration_request import Status

DAY = 86400.0
CREATED = 1_700_000_000.0
LABELS = {"team": "web", "node.kubernetes.io/instance-type": "m5.large", "gpu": "", "generation": "7"}


@pytest.mark.parametrize(
    ("selector", "selected"),
    [
        ("", True),
        ("team=web", True),
        ("team==web", True),
        ("team!=web", False),
        ("owner!=x", True),  # absent: != holds
        ("team", True),
        ("!team", False),
        ("!owner", True),
        ("gpu", True),  # present with an empty value
        ("gpu=", True),
        ("node.kubernetes.io/instance-type in (m5.large, m5.xlarge)", True),
        ("node.kubernetes.io/instance-type notin (m5.large)", False),
        ("owner notin (a,b)", True),
        ("owner in (a,b)", False),
        ("team=web,gpu,generation>6", True),
        ("team=web, generation<7", False),
        ("team>1", False),  # not an integer: never above
    ],
)
def test_a_selector_matches_as_the_api_server_does(selector, selected):
    assert label_selectors.parse(selector).matches(LABELS) is selected


@pytest.mark.parametrize(
    ("selector", "problem"),
    [
        ("team in (web", "'(' without ')'"),
        ("team in web)", "')' without '('"),
        ("team=web,,gpu", "an empty requirement between commas"),
        ("team=a=b", "expected key, !key"),
        ("bad_=x", "'bad_' is not a label name"),
        ("Example.com/team=x", "'Example.com' is not a DNS subdomain prefix"),
        ("team=" + "v" * 64, "is not a label value"),
        ("generation>seven", "> needs an integer"),
        ("team in (a,(b))", "nested parentheses"),
    ],
)
def test_a_malformed_selector_is_refused_naming_the_part(selector, problem):
    with pytest.raises(ValueError, match="label selector") as e:
        label_selectors.parse(selector)
    assert problem in str(e.value)


def test_versions_sort_by_their_parts_builds_above_the_bare_release():
    order = ["4.19", "5.4.0-1103-aws", "5.10.215-203.850.amzn2.x86_64", "5.15", "5.15.0-1034-aws", "5.15.0-1051-aws",
             "5.15.1", "6.1.0-rc1", "6.1.0-1"]  # fmt: skip
    assert sorted(order, key=version_key) == order
    assert version_key("22.04") == version_key("22.04.0") == version_key("22.4")
    with pytest.raises(ValueError, match="must start with a number"):
        version_key("latest")


def test_the_os_release_is_the_version_in_the_image_name():
    assert os_release("Ubuntu 22.04.3 LTS") == "22.04.3"
    assert os_release("Debian GNU/Linux 12 (bookworm)") == ""
    assert os_release("Bottlerocket OS 1.19.2 (aws-k8s-1.29)") == "1.19.2"
    assert os_release("Amazon Linux 2") == ""


def node(**fields) -> Node:
    return Node(**{"id": "n1", "state": NodeState.READY, "allocatable": Resources(cpus=2), **fields})


@pytest.mark.parametrize(
    ("words", "fields", "holds"),
    [
        (("kernel", "ge", "5.15"), {"kernel": "5.15.0-1034-aws"}, True),
        (("kernel", "ge", "5.15.0"), {"kernel": "5.15.0-1034-aws"}, True),  # Clusterman: False (a pre-release)
        (("kernel", "lt", "5.15"), {"kernel": "5.10.215-203.850.amzn2.x86_64"}, True),  # Clusterman: an error
        (("kernel", "eq", "5.15.0-1034-aws"), {"kernel": "5.15.0-1034-aws"}, True),
        (("kernel", "in", "5.15.0-1034-aws,5.15.0-1051-aws"), {"kernel": "5.15.0-1051-aws"}, True),
        (("kernel", "ge", "5.15"), {"kernel": ""}, None),  # not reported: left alone
        (("kernel", "ge", "5.15"), {"kernel": "unknown"}, None),
        (("lsbrelease", "ge", "22.04"), {"os_image": "Ubuntu 22.04.3 LTS"}, True),
        (("lsbrelease", "eq", "22.04"), {"os_image": "Ubuntu 22.04 LTS"}, True),
        (("lsbrelease", "notin", "20.04,22.04"), {"os_image": "Ubuntu 24.04.1 LTS"}, True),
        (("lsbrelease", "ge", "22.04"), {"os_image": "Amazon Linux 2"}, None),
        (("instance_type", "eq", "M5.Large"), {"instance_type": "m5.large"}, True),
        (("instance_type", "notin", "m5.large,m5.xlarge"), {"instance_type": "m6i.large"}, True),
        (("instance_type", "ne", "m5.large"), {"instance_type": ""}, None),
        # uptime when the migration was created: a node launched 40 days before is older than 30d
        (("uptime", "lt", "30d"), {"launched_at": CREATED - 40 * DAY}, False),
        (("uptime", "lt", "30d"), {"launched_at": CREATED - 29 * DAY}, True),
        (("uptime", "lt", "30d"), {"launched_at": CREATED + DAY}, True),  # a replacement: newer than the request
        (("uptime", "ge", "2592000"), {"launched_at": CREATED - 30 * DAY}, True),  # seconds, as Clusterman reads them
        (("uptime", "lt", "30d"), {"launched_at": NO_TIME}, None),
    ],
)
def test_a_condition_holds_for_a_node_as_the_table_says(words, fields, holds):
    assert Condition.parse(*words).holds(node(**fields), CREATED) is holds


@pytest.mark.parametrize(
    ("words", "problem"),
    [
        (("ami", "eq", "x"), "trait 'ami': expected one of kernel, lsbrelease, instance_type, uptime"),
        (("kernel", "like", "5"), "operator 'like': expected one of gt, ge, eq, ne, lt, le, in, notin"),
        (("uptime", "eq", "30d"), "operator eq does not apply to uptime (it takes gt, ge, lt, le)"),
        (("instance_type", "lt", "m5.large"), "operator lt does not apply to instance_type"),
        (("kernel", "ge", " "), "target ' ': expected a non-empty string"),
        (("kernel", "ge", "v5"), "target of kernel: 'v5' is not a version"),
        (("lsbrelease", "ge", "jammy"), "target of lsbrelease: 'jammy' is not an OS release"),
        (("instance_type", "eq", "large"), "target of instance_type: 'large' is not an instance type"),
        (("instance_type", "in", "m5.large,"), "an empty item in the list"),
        (("uptime", "gt", "-1d"), "target of uptime: expected a duration"),
    ],
)
def test_a_bad_condition_is_refused_naming_the_word(words, problem):
    with pytest.raises(ValueError) as e:
        Condition.parse(*words)
    assert problem in str(e.value)


def resource(name="m1", labels=None, **spec):
    base = {"cluster": "c1", "pool": "web", "condition": {"trait": "uptime", "operator": "lt", "target": "30d"}}
    return {
        "metadata": {"name": name, "creationTimestamp": "2023-11-14T22:13:20Z", "labels": labels or {}},
        "spec": {**base, **spec},
    }


def test_a_resource_is_read_with_its_status_attempts_and_creation():
    read = migration_request.read(
        resource(
            labels={"clusterman.yelp.com/migration_status": "inprogress", "clusterman.yelp.com/attempts": "2"},
            label_selectors=["team=web", " "],
        )
    )
    assert (read.name, read.cluster, read.pool, read.status, read.attempts) == ("m1", "c1", "web", Status.INPROGRESS, 2)
    assert read.created == CREATED and read.refused == ""
    assert read.spec_line() == "uptime lt 30d on nodes team=web"
    assert migration_request.read(resource()).status is Status.PENDING  # no label yet: pending


@pytest.mark.parametrize(
    ("obj", "refused"),
    [
        ({"metadata": {"name": "m1"}}, "spec: missing"),
        (resource(pool=""), "spec.pool: expected a name, got ''"),
        (resource(condition={"trait": "kernel", "operator": "ge"}), "spec.condition: missing target"),
        (resource(condition="kernel>5"), "spec.condition: expected {trait, operator, target}"),
        (
            resource(condition={"trait": "kernel", "operator": "ge", "target": "new"}),
            "spec.condition: target of kernel",
        ),
        (resource(label_selectors="team=web"), "spec.label_selectors: expected a list of selectors"),
        (resource(label_selectors=["team in (a"]), "spec.label_selectors: label selector 'team in (a'"),
        (resource(labels={"clusterman.yelp.com/migration_status": "done"}), "'done' is none of pending, inprogress"),
    ],
)
def test_a_malformed_resource_is_refused_with_the_reason_and_keeps_its_pool(obj, refused):
    read = migration_request.read(obj)
    assert refused in read.refused
    assert read.name == "m1"
    if isinstance(obj.get("spec"), dict) and obj["spec"].get("pool"):
        assert (read.cluster, read.pool) == ("c1", "web")  # so the pool can mark it failed


def test_a_new_resource_is_named_and_labelled_as_clusterman_names_it():
    assert migration_request.resource_name("kube_stage", "Default", 1663000000.9) == "kube--stage-default-1663000000"
    body = migration_request.body("n", "c1", "web", Condition.parse("uptime", "lt", "90d"), ("a=b",), "pool-key")
    assert body["metadata"]["labels"] == {
        "clusterman.yelp.com/migration_status": "pending",
        "clusterman.yelp.com/attempts": "0",
        "pool-key": "web",
    }
    assert migration_request.read(body).condition == Condition.parse("uptime", "lt", "90d")


def test_a_node_drifts_when_its_template_version_or_image_is_not_its_group_s():
    groups = (
        ResourceGroup("g1", 4, 4, template="lt-1:4", image_id="ami-new"),
        ResourceGroup("g2", 2, 2, image_id="ami-new"),  # a launch configuration: its image only
        ResourceGroup("g3", 1, 1),  # not read: nothing drifts
        ResourceGroup("g4", 1, 1, stale=True, template="lt-9:1"),  # draining anyway
    )
    nodes = (
        node(id="a", group_id="g1", template="lt-1:3", image_id="ami-new"),  # a version with the same image
        node(id="b", group_id="g1", template="lt-1:4", image_id="ami-new"),
        node(id="c", group_id="g1", template="", image_id="ami-old"),  # no template tags: the image
        node(id="d", group_id="g1", template="", image_id=""),  # nothing known: not drift
        node(id="e", group_id="g2", template="lt-7:1", image_id="ami-old"),
        node(id="f", group_id="g3", template="lt-1:1", image_id="ami-old"),
        node(id="g", group_id="g4", template="lt-9:0"),
        Node(id="h", state=NodeState.ORPHAN, allocatable=Resources(), group_id="g1", template="lt-1:1"),
    )
    assert drifted(PoolSnapshot(0.0, nodes, groups)) == {
        "a": "launched from lt-1:3, its group launches lt-1:4",
        "c": "runs image ami-old, its group launches ami-new",
        "e": "runs image ami-old, its group launches ami-new",
    }
