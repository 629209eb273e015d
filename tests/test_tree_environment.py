import pytest

from clusterman.config import ConfigError
from clusterman.config import MainConfig
from clusterman.config import PoolConfig
from clusterman.config import PoolIdentity
from clusterman.config import Scheduler
from clusterman.core.config_schema import parse
from clusterman.signals.specs import check_version
from clusterman.tree.environment import SignalProcess
from clusterman.tree.environment import TreeEnvironmentError
from clusterman.tree.environment import plan_tree
from clusterman.tree.environment import signal_process
from clusterman.tree.environment import signal_processes
from clusterman.tree.environment import version_to_fetch

IDENTITY = PoolIdentity("c1", "web", Scheduler.KUBERNETES)
LIMITS = {"min_capacity": 1, "max_capacity": 10, "max_weight_to_add": 5, "max_weight_to_remove": 5}


def signal(name, version, **extra):
    return {"name": name, "branch_or_tag": version, "period_minutes": 1, **extra}


def main_config(**signal_extra):
    raw = {
        "aws": {"signals_bucket": "bucket-b"},
        "autoscaling": {"default_signal_role": "clusterman"},
        "autoscale_signal": signal("MostRecentResources", "v1", **signal_extra),
    }
    return parse(MainConfig, raw, "main.yaml")


def pool_config(own=None, apps=None):
    raw = {"scaling_limits": LIMITS, "app_signals": apps or {}}
    if own is not None:
        raw["autoscale_signal"] = own
    return parse(PoolConfig, raw, "web.kubernetes")


def plan(main=None, pool=None, args=""):
    return plan_tree(main or main_config(), "main.yaml", pool or pool_config(), "web.kubernetes", IDENTITY, args)


def test_default_signal_first_then_pool_then_apps_and_versions_once_each():
    pool = pool_config(
        own=signal("OwnSignal", "v2"),
        apps={"zeta": signal("Z", "v1", namespace="zns"), "alpha": signal("A", "v3")},
    )
    tree = plan(pool=pool, args="--dry-run --verbose")
    assert tree.signals == (
        SignalProcess("v1", "clusterman", "MostRecentResources", "__default__"),
        SignalProcess("v2", "web", "OwnSignal", "web"),
        SignalProcess("v3", "alpha", "A", "alpha"),
        SignalProcess("v1", "zns", "Z", "zeta"),
    )
    assert tree.versions == ("v1", "v2", "v3")
    env = tree.to_env()
    assert env == {
        "CMAN_CLUSTER": "c1",
        "CMAN_POOL": "web",
        "CMAN_SCHEDULER": "kubernetes",
        "CMAN_ARGS": "--dry-run --verbose",
        "CMAN_VERSIONS_TO_FETCH": "v1 v2 v3",
        "CMAN_SIGNAL_VERSIONS": "v1 v2 v3 v1",
        "CMAN_SIGNAL_NAMESPACES": "clusterman web alpha zns",
        "CMAN_SIGNAL_NAMES": "MostRecentResources OwnSignal A Z",
        "CMAN_SIGNAL_APPS": "__default__ web alpha zeta",
        "CMAN_NUM_VERSIONS": "3",
        "CMAN_NUM_SIGNALS": "4",
        "CMAN_SIGNALS_BUCKET": "bucket-b",
    }
    # what each supervisord process reads back, by its process number
    assert [version_to_fetch(env, n) for n in range(3)] == ["v1", "v2", "v3"]
    assert [signal_process(env, n) for n in range(4)] == list(tree.signals)
    assert signal_processes(env) == list(tree.signals)


def test_internal_pool_signal_runs_no_process():
    tree = plan(pool=pool_config(own={"internal": True, "period_minutes": 1}))
    assert [s.app for s in tree.signals] == ["__default__"]


@pytest.mark.parametrize(
    ("pool", "key", "problem"),
    [
        (pool_config(own=signal("S", "has space")), "autoscale_signal.branch_or_tag", "not usable"),
        (pool_config(apps={"a": signal("S", "feature/x")}), "app_signals.a.branch_or_tag", "not usable"),
        (pool_config(apps={"a": signal("S", "-v1")}), "app_signals.a.branch_or_tag", "not usable"),
        (pool_config(apps={"a": signal("not-an-identifier", "v1")}), "app_signals.a.name", "not a Python identifier"),
        (pool_config(apps={"a": signal("S", "v1", namespace="x.y")}), "app_signals.a.namespace", "identifier"),
        (pool_config(apps={"a b": signal("S", "v1", namespace="ns")}), "app_signals.a b", "app name"),
        (pool_config(own=signal("S", "v1"), apps={"web": signal("T", "v1")}), "app_signals.web", "already has"),
    ],
)
def test_unusable_signals_are_config_errors_naming_the_key(pool, key, problem):
    with pytest.raises(ConfigError) as err:
        plan(pool=pool)
    assert err.value.source == "web.kubernetes"
    assert err.value.key == key
    assert problem in err.value.problem


def test_a_bad_default_signal_names_the_main_file():
    with pytest.raises(ConfigError) as err:
        plan(main=main_config(namespace="bad-namespace"))
    assert (err.value.source, err.value.key) == ("main.yaml", "autoscale_signal.namespace")
    no_default = parse(MainConfig, {}, "main.yaml")
    with pytest.raises(ConfigError, match=r"main\.yaml: autoscale_signal: the main file must define"):
        plan(main=no_default)


def test_versions_accept_usual_tags():
    for version in ("v1.2.3", "2024.01.05", "release_7", "1.0+build.5", "master"):
        assert check_version(version) == version
    for bad in ("", ".hidden", "a/b", "a b", "x" * 129, "ünï"):
        with pytest.raises(ValueError):
            check_version(bad)


ENV = {
    "CMAN_NUM_VERSIONS": "2",
    "CMAN_VERSIONS_TO_FETCH": "v1 v2",
    "CMAN_NUM_SIGNALS": "1",
    "CMAN_SIGNAL_VERSIONS": "v1",
    "CMAN_SIGNAL_NAMESPACES": "ns",
    "CMAN_SIGNAL_NAMES": "S",
    "CMAN_SIGNAL_APPS": "app",
}


@pytest.mark.parametrize(
    ("change", "call", "message"),
    [
        ({}, lambda env: version_to_fetch(env, 2), "process number 2 is out of range"),
        ({"CMAN_NUM_VERSIONS": "3"}, lambda env: version_to_fetch(env, 0), "has 2 entries but $CMAN_NUM_VERSIONS is 3"),
        ({"CMAN_NUM_VERSIONS": ""}, lambda env: version_to_fetch(env, 0), "$CMAN_NUM_VERSIONS must be a number"),
        ({"CMAN_VERSIONS_TO_FETCH": "../x v2"}, lambda env: version_to_fetch(env, 0), "not usable"),
        ({"CMAN_SIGNAL_APPS": ""}, lambda env: signal_process(env, 0), "$CMAN_SIGNAL_APPS has 0 entries"),
    ],
)
def test_helpers_refuse_an_environment_that_does_not_describe_their_task(change, call, message):
    with pytest.raises(TreeEnvironmentError) as err:
        call({**ENV, **change})
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("queues", "drainer"),
    [
        ({}, False),
        ({"warning_queue_url": "http://sqs.local/1/warnings"}, True),
        ({"drain_queue_url": "http://sqs.local/1/drain"}, True),  # Clusterman's host queues alone
        ({"termination_queue_url": "http://sqs.local/1/terminate"}, True),
    ],
)
def test_a_cluster_with_any_queue_of_notices_runs_a_drainer_in_the_tree(queues, drainer):
    raw = {"clusters": {"c1": {"aws_region": "us-west-2", **queues}}, "autoscale_signal": signal("M", "v1")}
    assert plan(main=parse(MainConfig, raw, "main.yaml")).drainer is drainer
