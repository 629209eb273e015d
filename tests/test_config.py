from pathlib import Path

import pytest

from clusterman.config import ConfigError
from clusterman.config import MetricType
from clusterman.config import PoolIdentity
from clusterman.config import Scheduler
from clusterman.config import list_pools
from clusterman.config import load_main_config
from clusterman.config import load_pool_config
from clusterman.config.loader import read_yaml
from clusterman.core.config import ClusterConfig

REPO = Path(__file__).resolve().parents[1]
LOCAL_DEV = PoolIdentity("local-dev", "default", Scheduler.SIMULATED)


def test_shipped_local_dev_config_loads():
    main = load_main_config(REPO / "config" / "clusterman.yaml")
    assert main.autoscale_signal is not None
    assert main.autoscale_signal.name == "ForecastHeadroom"
    assert main.autoscale_signal.parameters == {"horizon_minutes": 4, "hold_minutes": 20, "spread_k": 3, "min_spare": 0}
    assert main.autoscaling.slot_reserve == 3
    assert (main.autoscaling.slot_reserve_fraction, main.autoscaling.slot_reserve_band) == (0.04, 1)
    assert main.autoscale_signal.required_metrics[0].type is MetricType.SYSTEM_METRICS
    assert Path(main.cluster_config_directory).is_absolute()
    pool = load_pool_config(main, LOCAL_DEV)
    assert pool.scaling_limits.max_capacity == 40
    assert pool.resource_groups[0].kind == "asg"
    assert LOCAL_DEV in list_pools(main.cluster_config_directory, "local-dev")


def write(tmp_path, text, name="clusterman.yaml"):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def make_tree(tmp_path, pool_text):
    main = write(tmp_path, "clusters: {c1: {aws_region: us-west-2}}\ncluster_config_directory: pools\n")
    write(tmp_path, pool_text, "pools/c1/web.kubernetes")
    return load_main_config(main), PoolIdentity("c1", "web", Scheduler.KUBERNETES)


LIMITS = "scaling_limits: {min_capacity: 1, max_capacity: 10, max_weight_to_add: 5, max_weight_to_remove: 5}\n"


def test_clusterman_example_pool_file_loads(tmp_path):
    """The seed's spelling (autoscaling_signal) and Clusterman's list-of-maps parameters."""
    main, ident = make_tree(
        tmp_path,
        LIMITS
        + """
autoscaling_signal:
    name: AverageCPUAllocation
    branch_or_tag: v1.0.0
    period_minutes: 10
    parameters:
      - threshold: 3
      - window: 5
    required_metrics:
        - name: cpus_allocated
          type: system_metrics
          minute_range: 20
sensu_config: [{team: noop}]
""",
    )
    pool = load_pool_config(main, ident)
    assert pool.autoscale_signal is not None
    assert pool.autoscale_signal.name == "AverageCPUAllocation"
    assert pool.autoscale_signal.parameters == {"threshold": 3, "window": 5}


def test_internal_signal_needs_no_name(tmp_path):
    main, ident = make_tree(tmp_path, LIMITS + "autoscale_signal: {internal: true, period_minutes: 1}\n")
    signal = load_pool_config(main, ident).autoscale_signal
    assert signal is not None and signal.internal


@pytest.mark.parametrize(
    ("pool_text", "key", "problem"),
    [
        (LIMITS + "autoscale_signal: {name: X, branch_or_tag: v1, period_minutes: 1, colour: red}\n",
         "autoscale_signal.colour", "unknown key"),
        (LIMITS + "autoscale_signal: {name: X, branch_or_tag: v1, period_minutes: soon}\n",
         "autoscale_signal.period_minutes", "expected a whole number"),
        (LIMITS + "autoscale_signal: {name: X, branch_or_tag: v1, period_minutes: 0}\n",
         "autoscale_signal.period_minutes", "greater than 0"),
        (LIMITS + "autoscale_signal: {name: X, period_minutes: 1}\n", "autoscale_signal", "branch_or_tag is required"),
        ("scaling_limits: {min_capacity: 1, max_capacity: 10, max_weight_to_add: 5}\n",
         "scaling_limits.max_weight_to_remove", "required key is missing"),
        ("scaling_limits: {min_capacity: 11, max_capacity: 10, max_weight_to_add: 5, max_weight_to_remove: 1}\n",
         "scaling_limits", "greater than max_capacity"),
        (LIMITS + "resource_groups: [{gcp: {tag: x}}]\n", "resource_groups", "unknown group kind"),
        (LIMITS + "resource_groups: [{asg: {tag: '{\"pool\": \"web\"}'}}]\n", "resource_groups",
         "resource_groups[0].asg.tag: expected a tag key"),
        (LIMITS + "resource_groups: [{asg: {s3: {bucket: b, prefix: p}}}]\n", "resource_groups",
         "only sfr groups are listed in S3"),
        (LIMITS + "resource_groups: [{sfr: {s3: {bucket: b}}}]\n", "resource_groups",
         "resource_groups[0].sfr.s3: expected {bucket: ..., prefix: ...}"),
        (LIMITS + "autoscale_signal: {name: X, branch_or_tag: v1, period_minutes: 1, required_metrics: "
         "[{name: a, type: bogus_metrics, minute_range: 1}]}\n",
         "autoscale_signal.required_metrics[0].type", "expected one of"),
        (LIMITS + "autoscaling: {setpoint: 70}\n", "autoscaling.setpoint", "fraction"),
        ("", "scaling_limits", "required key is missing"),
    ],
)  # fmt: skip
def test_bad_pool_files_name_the_file_and_key(tmp_path, pool_text, key, problem):
    main, ident = make_tree(tmp_path, pool_text)
    with pytest.raises(ConfigError) as err:
        load_pool_config(main, ident)
    assert err.value.source.endswith("pools/c1/web.kubernetes")
    assert err.value.key == key
    assert problem in err.value.problem


def test_malformed_yaml_names_the_line(tmp_path):
    path = write(tmp_path, "aws:\n  region: [us-west-2\n")
    with pytest.raises(ConfigError, match=r"clusterman.yaml: malformed YAML: line \d+"):
        load_main_config(path)


def test_duplicate_keys_are_refused_naming_file_line_and_key(tmp_path):
    """YAML keeps the last of two equal keys without a word; a pool would run on the wrong setpoint."""
    path = write(tmp_path, "aws: {region: us-west-2}\nautoscaling:\n  setpoint: 0.7\n  setpoint: 0.9\n")
    with pytest.raises(ConfigError) as err:
        load_main_config(path)
    assert str(err.value) == (
        f"{path}: autoscaling.setpoint: given twice, at lines 3 and 4: YAML would silently keep the last; remove one"
    )
    main, ident = make_tree(tmp_path, LIMITS + "resource_groups: [{asg: {tag: a}}]\nscaling_limits: {}\n")
    with pytest.raises(ConfigError, match=r"web.kubernetes: scaling_limits: given twice, at lines 1 and 3"):
        load_pool_config(main, ident)
    main, ident = make_tree(tmp_path, LIMITS + "resource_groups: [{asg: {tag: a, tag: b}}]\n")
    with pytest.raises(ConfigError, match=r"resource_groups\[0\]\.asg\.tag: given twice on line 2"):
        load_pool_config(main, ident)


def test_a_number_too_long_for_python_is_named(tmp_path):
    path = write(tmp_path, "aws: {region: us-west-2}\nautoscaling:\n  instance_loss_threshold: " + "9" * 5001 + "\n")
    with pytest.raises(ConfigError) as err:
        load_main_config(path)
    assert str(err.value) == f"{path}: autoscaling.instance_loss_threshold: line 3: a number of 5001 digits is too long"


def test_merge_keys_may_be_overridden(tmp_path):
    """``<<: *anchor`` then the mapping's own key is YAML's override, not a duplicate."""
    path = write(tmp_path, "base: &b {region: us-west-2, endpoint_url: null}\naws:\n  <<: *b\n  region: eu-west-1\n")
    assert read_yaml(path)["aws"] == {"region": "eu-west-1", "endpoint_url": None}


def test_missing_file_and_unknown_cluster(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_main_config(tmp_path / "nope.yaml")
    main, _ = make_tree(tmp_path, LIMITS)
    with pytest.raises(ConfigError, match="unknown cluster"):
        load_pool_config(main, PoolIdentity("c2", "web", Scheduler.KUBERNETES))
    with pytest.raises(ConfigError, match="file not found"):
        load_pool_config(main, PoolIdentity("c1", "api", Scheduler.MESOS))


def test_main_file_compat_keys(tmp_path):
    """Clusterman's own acceptance config: mesos_clusters, fqdn, setpoint_margin, module_config..."""
    path = write(
        tmp_path,
        """
module_config: [{namespace: clusterman_metrics, file: /x.yaml}]
mesos_clusters:
    docker: {aws_region: us-west-2, fqdn: mesosmaster, max_weight_to_add: 10}
aws: {endpoint_url: 'http://moto:5000', access_key_file: /etc/boto_cfg/clusterman.json}
batches: {spot_prices: {run_interval_seconds: 60}, cluster_metrics: {run_interval_seconds: 60}}
autoscaling: {default_signal_role: clusterman, setpoint: 0.7, setpoint_margin: 0.05}
autoscale_signal: {name: ConstantSignal, branch_or_tag: acceptance, period_minutes: 10}
sensu_config: [{team: noop, page: false}]
module_env_config: []
""",
    )
    main = load_main_config(path)
    assert main.clusters["docker"].mesos_master_fqdn == "mesosmaster"
    assert main.aws.endpoint_url == "http://moto:5000"


def test_keys_nothing_reads_are_accepted_and_ignored(tmp_path):
    """cluster_manager, aws_account_number and alert_on_max_capacity: accepted from Clusterman's
    files, and not on the model, so nothing can look as if it honoured them (docs/configuration.md)."""
    main, ident = make_tree(tmp_path, LIMITS + "alert_on_max_capacity: false\n")
    write(tmp_path, "clusters: {c1: {aws_region: x, cluster_manager: mesos, aws_account_number: '1'}}\n")
    assert load_main_config(tmp_path / "clusterman.yaml").clusters["c1"] == ClusterConfig(aws_region="x")
    pool = load_pool_config(main, ident)
    assert not hasattr(pool, "alert_on_max_capacity")


def test_unknown_main_key_is_an_error(tmp_path):
    path = write(tmp_path, "autoscalling: {setpoint: 0.7}\n")
    with pytest.raises(ConfigError, match="autoscalling: unknown key"):
        load_main_config(path)


def test_app_signals_cannot_reuse_default_app(tmp_path):
    main, ident = make_tree(
        tmp_path, LIMITS + "app_signals: {__default__: {name: X, branch_or_tag: v1, period_minutes: 1}}\n"
    )
    with pytest.raises(ConfigError, match="__default__"):
        load_pool_config(main, ident)
