"""``clusterman metrics read`` against a real Prometheus, configured the way an operator would."""

from __future__ import annotations

import json
import time

from clusterman.cli.main import main
from itests.datastore.conftest import WEB_CPUS


def test_metrics_read_through_a_pools_prometheus_queries(prometheus, tmp_path, capsys):
    (tmp_path / "clusterman.yaml").write_text(
        "clusters: {c1: {aws_region: us-west-2}}\ncluster_config_directory: pools\n"
        f"metrics: {{backend: prometheus, prometheus: {{url: '{prometheus.url}', step_seconds: 1}}}}\n"
    )
    (tmp_path / "pools" / "c1").mkdir(parents=True)
    (tmp_path / "pools" / "c1" / "web.kubernetes").write_text(
        "scaling_limits: {min_capacity: 1, max_capacity: 10, max_weight_to_add: 5, max_weight_to_remove: 5}\n"
        "prometheus_queries:\n"
        '  system_metrics:\n    test_cpus: \'sum(clusterman_test_cpus{cluster="$cluster", pool="$pool"})\'\n'
    )
    end = int(time.time()) - 1
    config = ["--env-config-path", str(tmp_path / "clusterman.yaml")]
    read = ["metrics", "read", "--cluster", "c1", "--pool", "web", "--type", "system_metrics", "--end", str(end)]
    assert main([*config, *read, "--key", WEB_CPUS, "--minutes", "1", "--json"]) == 0
    points = json.loads(capsys.readouterr().out)["points"]
    assert points and {v for _, v in points} == {42.0} and points[-1][0] == end
    assert main([*config, *read, "--key", "mem_allocated|cluster=c1,pool=web.kubernetes"]) == 1
    assert "no PromQL for system_metrics 'mem_allocated'" in capsys.readouterr().err
