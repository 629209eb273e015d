"""Yelp Clusterman's own configuration files load, and each of its keys takes effect or is logged
as ignored with its reason (docs/configuration.md, "Clusterman's keys"). The files are copies,
listed with their commit in tests/fixtures/clusterman_upstream/README.md."""

from __future__ import annotations

import logging
import math
import shutil
from pathlib import Path

import pytest

from clusterman.aws.session import AwsSettings
from clusterman.aws.session import client
from clusterman.config.loader import load_main_config
from clusterman.config.loader import load_pool_config
from clusterman.config.loader import load_pool_file
from clusterman.core.config import NO_QUEUE
from clusterman.core.config import DrainingConfig
from clusterman.core.config import MainConfig
from clusterman.core.config import MigrationPrecedence
from clusterman.core.config import PoolConfig
from clusterman.core.config import PoolIdentity
from clusterman.core.config import PoolPortion
from clusterman.core.config import Scheduler
from clusterman.core.config_schema import ConfigError
from clusterman.decision.policy import ScalingPolicy
from clusterman.wiring.connectors import safe_to_evict_keys

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "clusterman_upstream"
DAY = 86400.0


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    """A copy per test: ignored keys are logged once per file, so each test reads its own files."""
    return Path(shutil.copytree(FIXTURES, tmp_path / "upstream"))


def ignored_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if " is ignored: " in r.getMessage()]


def policy(main: MainConfig, pool: PoolConfig) -> ScalingPolicy:
    return ScalingPolicy.from_config(pool.scaling_limits, pool.autoscaling, main.autoscaling)


def test_the_documented_service_configuration_loads(upstream, caplog):
    caplog.set_level(logging.INFO, "clusterman.core.config_schema")
    main = load_main_config(upstream / "docs" / "clusterman.yaml")
    assert main.autoscaling.default_signal_role == "clusterman"  # written default_signal_pool
    assert (main.autoscaling.prevent_scale_down_after_capacity_loss, main.autoscaling.instance_loss_threshold) == (
        True,
        2,
    )
    assert main.batches.node_migration.max_worker_processes == 6
    assert main.batches.node_migration.failed_attemps_margin == 5
    assert (main.batches.spot_prices.run_interval_seconds, main.batches.spot_prices.dedupe_interval_seconds) == (60, 60)
    assert main.clusters["cluster-name"].kubeconfig_path == "/path/to/kubeconfig.conf"
    lines = ignored_lines(caplog)
    for key in ("drain_termination_timeout_seconds", "module_config", "clusters.cluster-name.mesos_api_url"):
        assert sum(f": {key} is ignored: " in line for line in lines) == 1, key


def test_the_documented_pool_configuration_loads_with_its_draining_and_migration(upstream):
    pool = load_pool_file(upstream / "docs" / "pools" / "cluster-name" / "example.kubernetes")
    assert pool.draining == DrainingConfig(
        draining_time_threshold_seconds=1200, redraining_delay_seconds=60, force_terminate=True
    )
    migration = pool.node_migration
    assert migration.enabled
    assert (migration.trigger.max_uptime, migration.trigger.event) == (90 * DAY, True)
    assert migration.strategy.rate == PoolPortion(5)
    assert migration.strategy.prescaling == PoolPortion(2, percent=True)
    assert migration.strategy.precedence is MigrationPrecedence.HIGHEST_UPTIME
    assert (migration.strategy.bootstrap_wait, migration.strategy.bootstrap_timeout) == (300, 900)
    assert (migration.disable_autoscaling, migration.expected_duration) == (False, 7200)
    # Clusterman's defaults for what the example leaves out
    assert (migration.strategy.allowed_failed_drains, migration.health_check_interval) == (3, 120)
    assert (migration.max_uptime_worker_skips, migration.orphan_capacity_tollerance) == (6, 0)
    assert pool.scaling_limits.max_tasks_to_kill == 100


def test_the_main_files_guard_default_switches_the_loss_guard_on_for_pools_that_say_nothing(upstream):
    main = load_main_config(upstream / "docs" / "clusterman.yaml")
    quiet = load_pool_file(upstream / "docs" / "pools" / "cluster-name" / "example.kubernetes")
    assert policy(main, quiet).prevent_scale_down_after_capacity_loss
    assert policy(main, quiet).instance_loss_threshold == 2
    every = load_pool_file(upstream / "every-key" / "pools" / "c1" / "web.kubernetes")
    assert not policy(main, every).prevent_scale_down_after_capacity_loss  # the pool's false wins


def test_the_acceptance_suites_files_load(upstream, caplog):
    caplog.set_level(logging.INFO, "clusterman.core.config_schema")
    for name in ("clusterman.yaml", "clusterman-external.yaml"):
        main = load_main_config(upstream / "acceptance" / name)
        assert main.clusters["local-dev"].mesos_master_fqdn == "mesosmaster"
        assert main.aws.endpoint_url == "http://moto-{svc}:5000"
    assert sum(": monitoring_client is ignored: " in line for line in ignored_lines(caplog)) == 1
    pools = str(upstream / "acceptance" / "clusterman-clusters")
    mesos = load_pool_config(main, PoolIdentity("local-dev", "default", Scheduler.MESOS), pools)
    assert mesos.resource_groups[0].s3_bucket == "clusterman-resource-groups"
    kube = load_pool_config(main, PoolIdentity("local-dev", "default", Scheduler.KUBERNETES), pools)
    assert kube.autoscale_signal is not None and kube.autoscale_signal.internal
    assert policy(main, kube).prevent_scale_down_after_capacity_loss
    assert policy(main, kube).instance_loss_threshold == 3


def test_the_integration_tests_files_load_once_the_signal_version_is_given(upstream):
    main_file = upstream / "itests" / "clusterman.yaml"
    with pytest.raises(ConfigError, match="autoscale_signal: branch_or_tag is required"):
        load_main_config(main_file)  # Clusterman supplies it from --signals-branch-or-tag
    main_file.write_text(main_file.read_text() + "  branch_or_tag: v1\n")
    main = load_main_config(main_file)
    assert main.autoscaling.default_signal_role == "foo"
    pools = str(upstream / "itests" / "pools")
    bar = load_pool_config(main, PoolIdentity("mesos-test", "bar", Scheduler.MESOS), pools)
    assert [g.kind for g in bar.resource_groups] == ["sfr", "asg"]
    kube = load_pool_config(main, PoolIdentity("kube-test", "bar", Scheduler.KUBERNETES), pools)
    assert kube.scaling_limits.max_capacity == 100


def test_a_percent_rate_is_at_least_one_node(upstream):
    pool = load_pool_file(upstream / "tests" / "pools" / "bar.kubernetes")
    rate = pool.node_migration.strategy.rate
    assert (str(rate), rate.of(200), rate.of(10), PoolPortion(0, percent=True).of(10)) == ("3%", 6, 1, 0)
    assert pool.node_migration.strategy.prescaling.of(200) == 1


def test_every_key_clustermans_code_reads_loads_and_each_ignored_one_says_why_once(upstream, caplog):
    caplog.set_level(logging.INFO, "clusterman.core.config_schema")
    main = load_main_config(upstream / "every-key" / "clusterman.yaml")
    identity = PoolIdentity("c1", "web", Scheduler.KUBERNETES)
    pool = load_pool_config(main, identity)
    load_pool_config(main, identity)  # files are read again every run: no second line
    c1 = main.clusters["c1"]
    assert c1.drain_queue_url.endswith("/c1-drain") and c1.warning_queue_url.endswith("/c1-warning")
    assert c1.termination_queue_url.endswith("/c1-terminate")
    assert main.batches.drainer.run_interval_seconds == 5
    assert main.batches.spot_prices.dedupe_interval_seconds == 30
    assert pool.draining == DrainingConfig(1200, 60, True, process_spot_warnings=False)
    migration = pool.node_migration
    assert (migration.strategy.precedence, migration.expected_duration) == (MigrationPrecedence.LOWEST_TASK_COUNT, DAY)
    assert (migration.ignore_pod_health, migration.orphan_capacity_tollerance) == (True, 0.1)
    assert pool.autoscaling.orphan_instance_uptime_threshold_seconds == 900
    assert pool.scaling_limits.max_tasks_to_kill == math.inf
    lines = ignored_lines(caplog)
    where = [line.split(" is ignored: ")[0] for line in lines]  # "<file>: <key>"
    assert len(where) == len(set(where))
    ignored = {w.rsplit(": ", 1)[1] for w in where}
    expected = {
        "module_config", "module_env_config", "sensu_config", "monitoring_client",
        "mesos_maintenance_timeout_seconds", "drain_termination_timeout_seconds", "mesos",
        "exclude_daemonset_pods", "join_delay_mean_seconds", "join_delay_stdev_seconds", "cpus_per_weight",
        "ebs_volume_size", "aws.spot_price_table", "aws.add_entrypoint_info", "autoscaling.setpoint_margin",
        "clusters.c1.aws_account_number", "clusters.c1.cluster_manager", "clusters.c1.mesos_api_url",
        "clusters.c1.sensu_config", "clusters.c1.spot_fleet_resource_groups_cache_seconds",
        "clusters.c1.auto_scaling_resource_groups_cache_seconds", "clusters.c1.always_delay_drain_processing",
        "autoscaling.killable_nodes_prioritizing_v2", "alert_on_max_capacity", "pool_owner", "paasta_cluster",
    }  # fmt: skip
    assert expected <= ignored
    assert all(line.split(" is ignored: ")[1].strip() for line in lines)  # each with its reason


def test_the_main_files_redraining_delay_is_the_pools_default(upstream):
    main = load_main_config(upstream / "every-key" / "clusterman.yaml")
    pool_file = upstream / "every-key" / "pools" / "c1" / "web.kubernetes"
    identity = PoolIdentity("c1", "web", Scheduler.KUBERNETES)
    assert load_pool_config(main, identity).draining.redraining_delay_seconds == 60  # the pool's own
    pool_file.write_text(pool_file.read_text().replace("  redraining_delay_seconds: 60\n", ""))
    assert load_pool_config(main, identity).draining.redraining_delay_seconds == 20  # the main file's
    assert load_pool_file(pool_file).draining.redraining_delay_seconds == 15  # Clusterman's default


def test_without_a_draining_block_or_queues_clustermans_defaults_hold(upstream):
    main = load_main_config(upstream / "acceptance" / "clusterman.yaml")
    cluster = main.clusters["local-dev"]
    assert (cluster.drain_queue_url, cluster.termination_queue_url, cluster.warning_queue_url) == (NO_QUEUE,) * 3
    pools = str(upstream / "acceptance" / "clusterman-clusters")
    pool = load_pool_config(main, PoolIdentity("local-dev", "default", Scheduler.KUBERNETES), pools)
    assert pool.draining == DrainingConfig(1800.0, 15.0, False, True)
    assert not pool.node_migration.enabled


def test_the_clusters_safe_to_evict_annotation_pins_nodes(upstream):
    main = load_main_config(upstream / "every-key" / "clusterman.yaml")
    identity = PoolIdentity("c1", "web", Scheduler.KUBERNETES)
    keys = safe_to_evict_keys(main, identity, load_pool_config(main, identity))
    assert keys == (
        "cluster-autoscaler.kubernetes.io/safe-to-evict",
        "example.com/safe-to-evict",
        "clusterman.com/safe_to_evict",
    )


def test_an_endpoint_naming_the_service_is_filled_in_per_client():
    settings = AwsSettings("us-west-2", "http://moto-{svc}:5000")
    assert client(settings, "ec2").meta.endpoint_url == "http://moto-ec2:5000"
    assert client(settings, "s3").meta.endpoint_url == "http://moto-s3:5000"


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("draining: {force_terminat: true}", "draining.force_terminat", "unknown key"),
        ("node_migration: {trigger: {}, strategy: {rat: 5}}", "node_migration.strategy.rat", "unknown key"),
        ("node_migration: {trigger: {}, strategy: {rate: 0}}", "node_migration.strategy.rate", "greater than 0"),
        ("node_migration: {trigger: {}, strategy: {rate: 'x%'}}", "node_migration.strategy.rate", "a percent"),
        ("node_migration: {trigger: {}, strategy: {rate: -1}}", "node_migration.strategy.rate", "whole number"),
        ("node_migration: {strategy: {rate: 1}}", "node_migration.trigger", "required key is missing"),
        ("node_migration: {trigger: {}}", "node_migration.strategy", "required key is missing"),
        (
            "node_migration: {trigger: {}, strategy: {rate: 1, precedence: oldest}}",
            "node_migration.strategy.precedence",
            "expected one of highest_uptime",
        ),
        (
            "node_migration: {trigger: {max_uptime: soon}, strategy: {rate: 1}}",
            "node_migration.trigger.max_uptime",
            "duration",
        ),
        (
            "draining: {draining_time_threshold_seconds: 0}",
            "draining.draining_time_threshold_seconds",
            "greater than 0",
        ),
        ("autoscaling: {default_signal_pol: x}", "autoscaling.default_signal_pol", "unknown key"),
    ],
)
def test_a_typo_or_bad_value_in_clustermans_blocks_is_named(tmp_path, text, key, problem):
    path = tmp_path / "web.kubernetes"
    limits = "scaling_limits: {min_capacity: 0, max_capacity: 9, max_weight_to_add: 1, max_weight_to_remove: 1}\n"
    path.write_text(limits + text + "\n")
    with pytest.raises(ConfigError) as err:
        load_pool_file(path)
    assert err.value.key == key and problem in err.value.problem


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("clusters: {c1: {drain_queue_ur: https://q}}", "clusters.c1.drain_queue_ur", "unknown key"),
        ("clusters: {c1: {warning_queue_url: c1-warning}}", "clusters.c1.warning_queue_url", "an SQS queue URL"),
        ("autoscaling: {default_signal_pool: a, default_signal_role: b}", "autoscaling.default_signal_role", "twice"),
        ("batches: {node_migration: {max_worker_process: 2}}", "batches.node_migration.max_worker_process", "unknown"),
    ],
)
def test_a_typo_or_bad_value_in_the_main_file_is_named(tmp_path, text, key, problem):
    path = tmp_path / "clusterman.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as err:
        load_main_config(path)
    assert err.value.key == key and problem in err.value.problem
