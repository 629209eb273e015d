"""Every subcommand, given bad and edge input, answers in one line (or its usage), never a traceback.

The commands run in this process through ``clusterman.cli.main.main``, the console script's entry
point, so a bug is an exception escaping it. Their surroundings are out of reach on purpose: AWS
and the event API at a port that refuses, a signal socket nobody listens on, a pool file with a
typo. A traceback stays for bugs (``tests/test_cli_main.py: test_a_bug_keeps_its_traceback``).

``test_every_command_has_cases`` fails when a command is added without cases here.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from clusterman.cli import main as cli
from clusterman.core.timestamps import PRINTED_MILLISECONDS
from clusterman.local.moto_server import FAKE_CREDENTIALS

REPO = Path(__file__).resolve().parents[1]
REFUSED = "http://127.0.0.1:1"  # nothing listens on port 1: a connection is refused at once
POOL = ["--cluster", "local-dev", "--pool", "default"]
BROKEN_POOL = ["--cluster", "local-dev", "--pool", "broken", "--scheduler", "simulated"]
KUBE_POOL = ["--cluster", "local-dev", "--pool", "kube"]  # no kubeconfig anywhere: the API cannot be reached

SIMULATED_POOL = """
resource_groups: [{simulated: {tag: sim-group}}]
scaling_limits: {min_capacity: 2, max_capacity: 10, max_weight_to_add: 5, max_weight_to_remove: 5}
simulation: {join_delay_seconds: 0, node_resources: {cpus: 4, mem: 16000}, tasks: [{count: 3, cpus: 0.5, mem: 100}]}
"""
KUBERNETES_POOL = """
resource_groups: [{asg: {tag: kube-group}}]
scaling_limits: {min_capacity: 1, max_capacity: 10, max_weight_to_add: 5, max_weight_to_remove: 5}
"""

# (command as COMMANDS names it, argv after the global options); {tmp} is the test's directory
# fmt: off
CASES: list[tuple[str, list[str]]] = [
    # the global options, and no command or an unknown one
    ("", []),
    ("", ["bogus"]),
    ("", ["--log-level", "LOUD", "list-clusters"]),
    ("", ["--env-config-path", "{tmp}/nonexistent.yaml", "list-clusters"]),
    ("", ["--env-config-path", "{tmp}/bad.yaml", "list-clusters"]),
    ("", ["--env-config-path", "{tmp}", "list-clusters"]),
    ("", ["--env-config-path", "{tmp}/unknown-key.yaml", "list-clusters"]),
    ("collect-metrics", []),
    ("collect-metrics", ["--cluster", "nosuch", "--once"]),
    ("collect-metrics", ["--cluster", "local-dev", "--pool", "nosuch", "--once"]),
    ("collect-metrics", [*POOL, "--once", "--store", "stdout"]),
    ("collect-metrics", [*POOL, "--once", "--store", "bogus"]),
    ("collect-metrics", ["--check-heartbeat", "{tmp}/nonexistent.json"]),
    ("collect-metrics", ["--check-heartbeat", "{tmp}/bad.yaml"]),
    ("collect-metrics", ["--cluster", "local-dev", "--pool", "broken.simulated", "--once", "--store", "stdout"]),
    ("config", []),
    ("config", ["check"]),
    ("config", ["check", "{tmp}/nonexistent.kubernetes"]),
    ("config", ["check", "{tmp}/bad.yaml"]),
    ("config", ["check", "{tmp}"]),
    ("", ["--env-config-path", "{tmp}/bad.yaml", "config", "check"]),
    ("events", ["--url", REFUSED]),
    ("events", ["--url", REFUSED, "--follow", "--timeout", "0.5"]),
    ("events", ["--url", "not a url"]),
    ("events", ["--url", REFUSED, "--timeout", "-1"]),
    ("events", ["--url", REFUSED, "--timeout", "nan"]),
    ("events", ["--url", REFUSED, "--timeout", "inf"]),
    ("events", ["--url", REFUSED, "--timeout", "0"]),
    ("events", ["--url", REFUSED, "--last", "-3"]),
    ("events", ["--url", REFUSED, "--since", "abc"]),
    ("events", ["--url", REFUSED, "--type", "bogus"]),
    ("generate-data", ["--design", "{tmp}/nonexistent.yaml", "--output", "{tmp}/out.json.gz"]),
    ("generate-data", ["--design", "{tmp}/bad.yaml", "--output", "{tmp}/out.json.gz"]),
    ("generate-data", ["--design", "{tmp}", "--output", "{tmp}/out.json.gz"]),
    ("generate-data", ["--design", "{design}", "--output", "{tmp}/no/such/dir/out.json.gz"]),
    ("generate-data", ["--design", "{design}", "--output", "{tmp}"]),
    ("generate-data", ["--design", "{design}", "--output", "{tmp}/out.json.gz", "--seed", "x"]),
    ("list-clusters", []),
    ("list-clusters", ["--json"]),
    ("list-pools", []),
    ("list-pools", ["--cluster", "nosuch"]),
    ("list-pools", ["--cluster", "local-dev", "--scheduler", "bogus"]),
    ("manage", []),
    ("manage", [*POOL, "--target-capacity", "lots", "--dry-run"]),
    ("manage", [*POOL, "--target-capacity", "-1", "--dry-run"]),
    ("manage", [*POOL, "--target-capacity", "nan", "--dry-run"]),
    ("manage", [*POOL, "--target-capacity", "inf", "--dry-run"]),
    ("manage", [*POOL, "--target-capacity", "3", "--pause", "1y", "--dry-run", "--timeout", "2"]),
    ("manage", [*POOL, "--target-capacity", "3", "--wait", "-5", "--dry-run"]),
    ("manage", [*POOL, "--target-capacity", "3", "--timeout", "nan", "--dry-run"]),
    ("manage", [*POOL, "--target-capacity", "3", "--dry-run", "--timeout", "2"]),
    ("manage", [*BROKEN_POOL, "--target-capacity", "3", "--dry-run"]),
    ("metrics", []),
    ("metrics", ["read", "--sqlite", "{tmp}/m.sqlite", "--type", "system_metrics", "--key", "k", "--end", "soon"]),
    ("metrics", ["read", "--sqlite", "{tmp}/m.sqlite", "--type", "system_metrics", "--key", "k", "--minutes", "-5"]),
    ("metrics", ["read", "--sqlite", "{tmp}", "--type", "system_metrics", "--key", "k"]),
    ("metrics", ["read", "--sqlite", "{tmp}/bad.yaml", "--type", "system_metrics", "--key", "k"]),
    ("metrics", ["keys", "--sqlite", "{tmp}/m.sqlite", "--type", "bogus"]),
    ("metrics", ["keys", "--sqlite", "{tmp}/m.sqlite", "--type", "app_metrics", "--regex", "("]),
    ("metrics", ["write", "--sqlite", "{tmp}/m.sqlite", "--type", "app_metrics", "--key", "a,b", "--value", "NaN"]),
    ("metrics", ["write", "--sqlite", "{tmp}/m.sqlite", "--type", "app_metrics", "--key", "a,b", "--value", "x"]),
    ("metrics", ["write", "--sqlite", "{tmp}/m.sqlite", "--type", "app_metrics", "--key", "ab", "--value", "1"]),
    ("metrics", ["write", "--sqlite", "{tmp}/m.sqlite", "--type", "app_metrics", "--key", "a,b", "--value", "1",
                 "--timestamp", "-5"]),
    ("metrics", ["load", "--sqlite", "{tmp}/m.sqlite", "--input", "{tmp}/nonexistent.json.gz"]),
    ("metrics", ["load", "--sqlite", "{tmp}/m.sqlite", "--input", "{tmp}/corrupt.json.gz"]),
    ("metrics", ["load", "--sqlite", "{tmp}/m.sqlite", "--input", "{tmp}/bad.yaml"]),
    ("metrics", ["load", "--sqlite", "{tmp}/m.sqlite", "--input", "{tmp}"]),
    ("metrics", ["init", "--sqlite", "{tmp}/no/such/dir/m.sqlite"]),
    ("", ["--env-config-path", "{tmp}/bad.yaml", "metrics", "read", "--type", "system_metrics", "--key", "k"]),
    ("", ["--env-config-path", "{tmp}/bad.yaml", "events"]),
    ("migrate", []),
    ("migrate", [*POOL, "uptime", "lt", "30d"]),
    ("migrate", [*KUBE_POOL, "kernel", "ge", "newest"]),
    ("migrate", [*KUBE_POOL, "uptime", "eq", "30d"]),
    ("migrate", [*KUBE_POOL, "uptime", "lt", "30d", "--label-selector", "a in (b"]),
    ("migrate", [*KUBE_POOL, "uptime", "lt", "30d", "--timeout", "2"]),
    ("migrate-stop", [*KUBE_POOL, "--timeout", "2"]),
    ("migrate-stop", ["--cluster", "local-dev", "--pool", "nosuch"]),
    ("plan", []),
    ("plan", [*POOL, "--timeout", "2"]),
    ("plan", ["--cluster", "local-dev", "--pool", "sim", "--snapshot", "{tmp}/nan.json"]),
    ("plan", ["--cluster", "local-dev", "--pool", "nosuch"]),
    ("plan", [*BROKEN_POOL]),
    ("plan", ["--snapshot", "{tmp}/nan.json", "--write-snapshot", "{tmp}/out.json"]),
    ("plan", ["--cluster", "local-dev", "--pool", "sim", "--write-snapshot", "{tmp}/no/such/dir/x.json"]),
    ("plan", ["--snapshot", "{tmp}/nonexistent.json"]),
    ("plan", ["--snapshot", "{tmp}"]),
    ("plan", ["--snapshot", "{tmp}/bad.yaml"]),
    ("plan", ["--snapshot", "{tmp}/nan.json"]),
    ("plan", ["--snapshot", "-"]),
    ("signal", []),
    ("signal", ["init", "{tmp}/bad.yaml"]),
    ("signal", ["init", "{tmp}/fresh", "--namespace", "1bad"]),
    ("signal", ["init", "{tmp}/fresh", "--name", "Not-A-Class"]),
    ("signal", ["evaluate", "--namespace", "x", "--name", "Y", "--metrics", "{tmp}/nonexistent.json"]),
    ("signal", ["evaluate", "--namespace", "x", "--name", "Y", "--metrics", "{tmp}"]),
    ("signal", ["evaluate", "--namespace", "x", "--name", "Y", "--metrics", "{tmp}/nan.json"]),
    ("signal", ["evaluate", "--namespace", "x", "--name", "Y", "--metrics", "{tmp}/empty.json"]),
    ("signal", ["evaluate", "--namespace", "x", "--name", "Y", "--metrics", "{tmp}/empty.json", "--timeout", "-1"]),
    ("signal", ["evaluate", "--namespace", "x", "--name", "Y", "--metrics", "{tmp}/empty.json", "--timeout", "nan"]),
    ("signal", ["evaluate", "--namespace", "x", "--name", "Y", "--metrics", "{tmp}/empty.json", "--param", "x"]),
    ("signal", ["evaluate", "--namespace", "x", "--name", "Y", "--metrics", "{tmp}/empty.json", "--timestamp", "?"]),
    ("signal", ["evaluate", "--namespace", "../x", "--name", "Y", "--metrics", "{tmp}/empty.json"]),
    ("signal", ["publish", "--version", "bad version!", "--repo", "{tmp}"]),
    ("signal", ["publish", "--version", "v1", "--repo", "{tmp}/nonexistent"]),
    ("signal", ["publish", "--version", "v1", "--repo", "{tmp}", "--bucket", "no-such-bucket"]),
    ("signal", ["publish", "--version", "v1", "--repo", "{tmp}", "--worktree"]),
    ("simulate", ["--pool-config", "{tmp}/nonexistent.mesos", "--metrics-data-files", "{tmp}/m.json.gz"]),
    ("simulate", ["--pool-config", "{tmp}/bad.yaml", "--metrics-data-files", "{tmp}/corrupt.json.gz"]),
    ("simulate", ["--pool-config", "{sample_pool}", "--metrics-data-files", "{tmp}/corrupt.json.gz"]),
    ("simulate", ["--pool-config", "{sample_pool}", "--metrics-data-files", "{tmp}"]),
    ("simulate", ["--pool-config", "{sample_pool}", "--metrics-data-files", "{sample}", "--start", "soon"]),
    ("simulate", ["--pool-config", "{sample_pool}", "--metrics-data-files", "{sample}", "--join-delay", "-1", "0"]),
    ("simulate", ["--pool-config", "{sample_pool}", "--metrics-data-files", "{sample}", "--join-delay", "nan", "0"]),
    ("simulate", ["--pool-config", "{sample_pool}", "--metrics-data-files", "{sample}", "--compare", "{tmp}/bad.yaml"]),
    ("simulate", ["--pool-config", "{sample_pool}", "--metrics-data-files", "{sample}", "--output-prefix", "{tmp}/f/x",
                  "--start", "2017-12-01T16:00:00Z", "--end", "2017-12-01T16:00:00Z"]),
    ("simulate", ["--pool-config", "{sample_pool}", "--metrics-data-files", "{sample}", "--seed", "-1",
                  "--end", "2017-12-01T16:03:00Z", "--output-prefix", "{tmp}/bad.yaml/x"]),
    ("simulate", ["--pool-config", "{tmp}/clusters/local-dev/default.simulated", "--end", "2024-03-04T00:30:00Z"]),
    ("status", []),
    ("status", ["--cluster", "local-dev", "--pool", "nosuch"]),
    ("status", [*POOL, "--no-events", "--timeout", "2"]),
    ("status", [*POOL, "--events-url", REFUSED, "--timeout", "2", "--json"]),
    ("status", [*POOL, "--timeout", "nan"]),
    ("status", [*POOL, "--decisions", "-1", "--events-url", REFUSED, "--timeout", "2"]),
    ("status", [*BROKEN_POOL, "--events-url", REFUSED]),
    ("disable", []),
    ("disable", [*POOL, "--until", "soon"]),
    ("disable", [*POOL, "--until", "-5m"]),
    ("disable", [*POOL, "--until", "nan"]),
    ("disable", [*BROKEN_POOL, "--until", "1h"]),
    ("interrupt", ["--cluster", "local-dev", "--pool", "nosuch"]),
    ("interrupt", [*BROKEN_POOL]),
    ("enable", ["--cluster", "local-dev", "--pool", "nosuch"]),
    ("enable", [*BROKEN_POOL]),
    ("setup", ["--timeout", "-1"]),
    ("setup", ["--timeout", "2"]),
]
# fmt: on


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A main config whose AWS and event API refuse, a copy of the shipped pools, and bad files."""
    tmp = tmp_path_factory.mktemp("cli")
    clusters = tmp / "clusters"
    shutil.copytree(REPO / "config" / "clusterman-clusters", clusters)
    shutil.copytree(REPO / "config" / "workloads", tmp / "workloads")  # the shipped trace's path is relative
    broken = (clusters / "local-dev" / "default.simulated").read_text().replace("scaling_limits:", "scaling_limit:")
    (clusters / "local-dev" / "broken.simulated").write_text(broken)
    (clusters / "local-dev" / "sim.simulated").write_text(SIMULATED_POOL)  # needs no AWS
    (clusters / "local-dev" / "kube.kubernetes").write_text(KUBERNETES_POOL)
    main = yaml.safe_load((REPO / "config" / "clusterman.yaml").read_text())
    main.update(cluster_config_directory=str(clusters), state_directory=str(tmp / "state"))
    main["aws"].update(endpoint_url=REFUSED)
    main["events"] = {"port": 1}
    (tmp / "clusterman.yaml").write_text(yaml.safe_dump(main))
    (tmp / "unknown-key.yaml").write_text(yaml.safe_dump({**main, "autoscalin": {}}))
    (tmp / "bad.yaml").write_text("clusters: [unclosed\n")
    (tmp / "nan.json").write_text('{"metrics": {"m": [[1, NaN]]}, "now": NaN}')
    (tmp / "empty.json").write_text("{}")
    (tmp / "corrupt.json.gz").write_bytes(gzip.compress(b'{"not": "metrics"')[:-9])
    return tmp


def fill(argv: list[str], tmp: Path) -> list[str]:
    values = {
        "tmp": str(tmp),
        "design": str(REPO / "config" / "metrics-designs" / "batch-queue.yaml"),
        "sample": str(REPO / "config" / "simulator" / "clusterman-sample-metrics.json.gz"),
        "sample_pool": str(REPO / "config" / "simulator" / "default.mesos"),
    }
    return [arg.format(**values) for arg in argv]


def run(argv: list[str], tmp: Path, stdout: io.TextIOBase | None = None) -> tuple[int, str, str]:
    """``clusterman --env-config-path <the world's> <argv>``: exit status, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(""), stdout or out, err
    try:
        status = cli.main(["--env-config-path", str(tmp / "clusterman.yaml"), *argv])
    except SystemExit as e:  # argparse: usage and status 2
        status = e.code if isinstance(e.code, int) else 1
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
    return status, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def no_pool_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [n for n in os.environ if n.startswith("CMAN_")] + ["KUBECONFIG", "KUBERNETES_SERVICE_HOST"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CMAN_SIGNAL_SOCKET_PREFIX", f"notb-{os.getpid()}-")  # a socket nobody listens on
    for name, value in FAKE_CREDENTIALS.items():  # never real ones: every AWS call goes to REFUSED
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)  # simulate's default output prefix lands here


@pytest.mark.parametrize(("command", "argv"), CASES, ids=[" ".join([c, *a])[:80] for c, a in CASES])
def test_bad_and_edge_input_is_one_line_not_a_traceback(world: Path, command: str, argv: list[str]) -> None:
    status, out, err = run(fill([command, *argv] if command else argv, world), world)
    assert "Traceback" not in out + err, out + err
    assert status in ((0, 1, 2, 5) if command == "status" else (0, 1, 2)), (status, err)  # status: 5 unknown
    if status == 1:
        lines = [line for line in err.splitlines() if not re.match(PRINTED_MILLISECONDS, line)]
        assert len(lines) <= 1, err  # one line (or an ERROR record), after the records logged on the way


def test_every_command_has_cases() -> None:
    covered = {command for command, _ in CASES}
    assert {c.name for c in cli.COMMANDS} - covered == set()


@pytest.mark.parametrize(
    "argv",
    [
        [*POOL, "--no-events", "--timeout", "2"],
        [*BROKEN_POOL, "--events-url", REFUSED],
    ],
    ids=["status", "status with a refused pool file"],
)
def test_status_into_a_closed_pipe_ends_quietly(world: Path, argv: list[str]) -> None:
    assert_quiet_in_a_closed_pipe(["status", *argv], world)


def test_metrics_read_and_collect_into_a_closed_pipe_end_quietly(world: Path) -> None:
    sqlite = str(world / "pipe.sqlite")
    key = "cpus_allocated|cluster=local-dev,pool=default.simulated"
    for t in range(5):
        point = ["--type", "system_metrics", "--key", key, "--value", str(t), "--timestamp", str(1_700_000_000 + t)]
        assert run(["metrics", "write", "--sqlite", sqlite, *point], world)[0] == 0
    read = ["metrics", "read", "--sqlite", sqlite, "--type", "system_metrics", "--key", key, "--end", "1700000010"]
    assert_quiet_in_a_closed_pipe(read, world)
    collect = ["collect-metrics", "--cluster", "local-dev", "--pool", "sim", "--once", "--store", "stdout"]
    status, out, err = run(collect, world)
    assert status == 0 and len(out.splitlines()) > 5, err
    # --once says what it did (it printed nothing); on stderr, since stdout may carry the points
    assert err == f"local-dev/sim.simulated: wrote {len(out.splitlines())} points to stdout\n"
    assert_quiet_in_a_closed_pipe(collect, world)


def assert_quiet_in_a_closed_pipe(argv: list[str], tmp: Path) -> None:
    """As ``clusterman ... | head -0``: the reader is gone before the first byte is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    pipe = open(write_end, "w", buffering=1, encoding="utf-8")  # noqa: SIM115 - closed below, after main used it
    try:
        status, _, err = run(argv, tmp, stdout=pipe)
    finally:
        try:
            pipe.close()
        except BrokenPipeError:
            pass
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert status in (0, 1), err


@pytest.mark.parametrize(
    "argv", [["status", *POOL, "--no-events", "--timeout", "5"], ["simulate", "--help"]], ids=["status", "simulate"]
)
def test_ctrl_c_at_any_moment_of_the_start_ends_quietly(world: Path, argv: list[str]) -> None:
    """As `timeout -s INT 0.3 clusterman status`: Ctrl-C while the command's modules import printed
    a 35-59 line KeyboardInterrupt traceback; now status 130 (or the command done), nothing more.
    Each Ctrl-C comes a while after the console script's module is imported (``-X importtime``
    says when; before it, Python itself is starting)."""
    import signal
    import subprocess
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith("CMAN_")}
    command = [sys.executable, "-X", "importtime", "-m", "clusterman",
               "--env-config-path", str(world / "clusterman.yaml"), *argv]  # fmt: skip
    for delay in (0.0, 0.02, 0.05, 0.1, 0.2, 0.4):
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.rstrip().endswith("| clusterman.cli.main"):
                break
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        err = "".join(line for line in proc.stderr if not line.startswith("import time:"))
        proc.wait(timeout=60)
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, (delay, err)
        assert proc.returncode in (0, 130, -signal.SIGINT), (delay, proc.returncode, err)  # -2: as a shell, 130
