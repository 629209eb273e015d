"""``clusterman config check``: the main file and its pool files, offline, one line per problem.

Each problem is one the bootstrap or the autoscaler would stop at: a key the loader does not know
or a value it refuses, limits that contradict, a signal name that is no Python identifier, a pool
file of a cluster the main file does not name, an AWS key file that is not there. The check uses
the loader they use, so a key added there is known here.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
import yaml

from clusterman.cli import main as cli

MAIN = {
    "clusters": {"prod": {"aws_region": "us-west-2"}},
    "aws": {"region": "us-west-2", "signals_bucket": "b"},
    "autoscale_signal": {"name": "MostRecentResources", "branch_or_tag": "v1", "period_minutes": 1},
    "autoscaling": {"default_signal_role": "clusterman"},
    "cluster_config_directory": "clusters",
}
POOL = {
    "resource_groups": [{"asg": {"tag": "clusterman:pool"}}],
    "scaling_limits": {"min_capacity": 1, "max_capacity": 10, "max_weight_to_add": 5, "max_weight_to_remove": 5},
}


def check(tmp_path: Path, *files: str) -> tuple[int, list[str]]:
    out = io.StringIO()
    saved, sys.stdout = sys.stdout, out
    try:
        status = cli.main(["--env-config-path", str(tmp_path / "clusterman.yaml"), "config", "check", *files])
    finally:
        sys.stdout = saved
    return status, out.getvalue().splitlines()


def write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


@pytest.fixture
def configs(tmp_path: Path) -> Path:
    write(tmp_path / "clusterman.yaml", MAIN)
    write(tmp_path / "clusters" / "prod" / "batch.kubernetes", POOL)
    write(tmp_path / "clusters" / "prod" / "README", "not a pool file: not read")
    return tmp_path


def test_good_files_are_one_line_and_status_0(configs: Path) -> None:
    assert check(configs) == (0, [f"{configs / 'clusterman.yaml'} and 1 pool file: ok"])


def test_each_problem_is_one_line_naming_the_file_and_key(configs: Path) -> None:
    pools = configs / "clusters" / "prod"
    write(pools / "typo.kubernetes", {**POOL, "scaling_limts": {}})
    write(pools / "contradicts.mesos", {**POOL, "scaling_limits": {**POOL["scaling_limits"], "min_capacity": 20}})
    signal = {"name": "not an identifier", "branch_or_tag": "v1", "period_minutes": 1}
    write(pools / "signal.kubernetes", {**POOL, "app_signals": {"web": signal}})
    write(pools / "duplicate.kubernetes", "resource_groups: []\nresource_groups: []\n")
    write(configs / "clusters" / "staging" / "web.kubernetes", POOL)
    status, lines = check(configs)
    assert status == 1
    assert lines[-1] == f"{configs / 'clusterman.yaml'} and 5 pool files: 5 problems"
    problems = lines[:-1]
    assert len(problems) == 5, lines
    assert f"{configs / 'clusters' / 'staging'}: pool files of cluster staging, which the main file's" in problems[0]
    expected = {
        "contradicts.mesos": "scaling_limits: min_capacity (20) is greater than max_capacity (10)",
        "duplicate.kubernetes": "resource_groups: given twice, at lines 1 and 2",
        "signal.kubernetes": "app_signals.web.name: 'not an identifier' is not a Python identifier",
        "typo.kubernetes": "scaling_limts: unknown key",
    }
    for name, problem in expected.items():
        (line,) = [p for p in problems if p.startswith(f"{pools / name}: ")]
        assert problem in line, line


def test_only_the_files_given_and_what_the_main_file_names(configs: Path) -> None:
    main = yaml.safe_load((configs / "clusterman.yaml").read_text())
    main["aws"]["access_key_file"] = str(configs / "no-such-key.json")
    write(configs / "clusterman.yaml", main)
    given = write(configs / "elsewhere" / "dev" / "web.kubernetes", POOL)
    status, lines = check(configs, str(given), str(configs / "clusters" / "prod" / "README"))
    assert status == 1 and lines[-1].endswith("and 2 pool files: 3 problems"), lines
    assert (
        lines[0]
        == f"{configs / 'clusterman.yaml'}: aws.access_key_file: {configs / 'no-such-key.json'}: AWS key file not found"
    )
    assert lines[1] == f"{given}: cluster dev is not in the main file's clusters (known: prod)"
    assert lines[2].startswith(f"{configs / 'clusters' / 'prod' / 'README'}: not a pool file: its name must be")


def test_a_main_file_that_does_not_load_is_its_line_and_no_pool_is_read(configs: Path) -> None:
    write(configs / "clusterman.yaml", {**MAIN, "autoscalin": {}})
    status, lines = check(configs)
    assert status == 1 and len(lines) == 2, lines
    assert lines[0].startswith(f"{configs / 'clusterman.yaml'}: autoscalin: unknown key")
    assert lines[1] == f"{configs / 'clusterman.yaml'}: 1 problem, pool files not checked"


def test_a_problem_of_the_main_file_met_at_every_pool_is_said_once(configs: Path) -> None:
    write(configs / "clusterman.yaml", {k: v for k, v in MAIN.items() if k != "autoscale_signal"})
    write(configs / "clusters" / "prod" / "web.kubernetes", POOL)
    status, lines = check(configs)
    assert status == 1 and lines == [
        f"{configs / 'clusterman.yaml'}: autoscale_signal: the main file must define the default signal",
        f"{configs / 'clusterman.yaml'} and 2 pool files: 1 problem",
    ], lines
