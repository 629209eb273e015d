"""``make run``: the whole process tree on an embedded local stack, with nothing but this checkout.

1. moto's server on loopback is the AWS: an S3 bucket for signal versions and an Auto Scaling
   group tagged for the ``local-dev`` pool.
2. This checkout's ``clusterman_signals`` is published into that bucket as version ``local``.
3. The real bootstrap runs for ``local-dev/default.simulated`` with a copy of ``config/`` pointed at
   the embedded AWS: supervisord fetches the signal from S3, starts it, starts the autoscaler.
4. The autoscaler scales the group; a simulated scheduler turns its instances into nodes and
   replays a day of demand in four minutes (``config/workloads/local-dev-day.yaml``).
One line per decision is printed here; the event and metrics endpoints, and the operator commands
that reach this stack (``env.sh`` in its directory), are printed at start.
The stack stops after ``--duration`` seconds (0: never) or on Ctrl-C, and leaves no process behind.

Each run has its own directory ``.local-stack/<run id>/`` (``.local-stack/latest`` points at the
newest) and its own signal socket names (``CMAN_SIGNAL_SOCKET_PREFIX=cman-<run id>-``), so two
stacks on one host, or two people's, never touch each other (``clusterman.local.rundir``).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO
from typing import Any

import boto3
import yaml

import clusterman_signals
from clusterman.aws.session import AwsSettings
from clusterman.batch.arguments import duration_argument
from clusterman.batch.stopping import stop_on_signals
from clusterman.config.loader import read_yaml
from clusterman.core.timestamps import PRINTED_MILLISECONDS
from clusterman.core.timestamps import PRINTED_SECONDS
from clusterman.data import config_directory
from clusterman.local.moto_server import FAKE_CREDENTIALS
from clusterman.local.moto_server import MotoServer
from clusterman.local.moto_server import free_port
from clusterman.local.rundir import RunDir
from clusterman.local.rundir import StackBusy
from clusterman.local.rundir import claim
from clusterman.local.rundir import claim_new
from clusterman.local.rundir import socket_prefix
from clusterman.notices.setup import set_up_notices
from clusterman.signals.artifacts import ArtifactLocation
from clusterman.signals.artifacts import build_artifact
from clusterman.signals.artifacts import upload_artifact
from clusterman.tree.supervisor import Supervisor
from clusterman.tree.supervisor import die_with_parent

# Where clusterman_signals/ is (a checkout's top, or site-packages when installed from the wheel):
# the stack publishes it as version `local`.
SIGNALS_SOURCE = Path(clusterman_signals.__file__).resolve().parents[1]
CLUSTER, POOL, SCHEDULER = "local-dev", "default", "simulated"
REGION = "us-west-2"
TAG_KEY = "clusterman:pool"
CODENAME = "local"
AUTOSCALER_ARGS = "--period-seconds 5 --no-splay --collect-metrics"


def signals_origin() -> str:
    """Whose clusterman_signals the stack publishes: this checkout's, or the installed clusterman's
    (the wheel's, in site-packages: there is no checkout then)."""
    return "this checkout's" if (SIGNALS_SOURCE / "pyproject.toml").is_file() else "the installed clusterman's"


def prepare_configs(run_dir: Path, moto_url: str, events_port: int, config_dir: Path) -> Path:
    """A copy of ``config_dir`` whose main file points at the embedded AWS and keeps state in ``run_dir``."""
    srv = run_dir / "srv-configs"
    shutil.copytree(config_dir, srv)
    main_path = srv / "clusterman.yaml"
    main = read_yaml(main_path)
    main.setdefault("aws", {}).update({"endpoint_url": moto_url, "region": REGION})
    main["state_directory"] = str(run_dir / "state")
    main.setdefault("events", {})["port"] = events_port
    # Spot interruption warnings: `clusterman interrupt` puts one on moto's bus, its rule routes it to
    # this queue, the tree's drainer files it for the pool (docs/node_lifecycle.md)
    main.setdefault("clusters", {}).setdefault(CLUSTER, {})["warning_queue_url"] = warning_queue_url(moto_url)
    # A day replayed in four minutes: one real minute is six simulated hours, so the default signal
    # reads only the last minute (ForecastHeadroom, with too little history to measure its errors,
    # asks for the demand plus its warm-up headroom; MostRecentResources looks 15 s ahead).
    signal = main["autoscale_signal"]
    if signal.get("name") == "MostRecentResources":
        signal["parameters"] = [{"lookahead_minutes": 0.25}]
    for metric in signal.get("required_metrics", []):
        metric["minute_range"] = 1
    main_path.write_text("# written by clusterman.local.stack from config/clusterman.yaml\n" + yaml.safe_dump(main))
    return main_path


def warning_queue_url(moto_url: str) -> str:
    return f"{moto_url}/123456789012/{CLUSTER}-warnings"


def create_warning_queue(moto_url: str) -> list[str]:
    """The warning queue and the EventBridge rules that feed it, as ``clusterman setup`` makes them."""
    clients = tuple(
        boto3.client(service, endpoint_url=moto_url, region_name=REGION, **_credentials())
        for service in ("sqs", "events")
    )
    settings = AwsSettings(REGION, moto_url)
    return set_up_notices(settings, CLUSTER, warning_queue_url(moto_url), clients=(clients[0], clients[1]))


def create_bucket(moto_url: str, bucket: str) -> None:
    s3 = boto3.client("s3", endpoint_url=moto_url, region_name=REGION, **_credentials())
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})


def create_pool_group(moto_url: str, cluster: str = CLUSTER, pool: str = POOL, max_size: int = 40) -> str:
    """An Auto Scaling group tagged for the pool (``clusterman:pool``), one instance to start with."""
    session = boto3.session.Session(**_credentials())
    ec2 = session.client("ec2", endpoint_url=moto_url, region_name=REGION)
    images = ec2.describe_images(Owners=["amazon"], Filters=[{"Name": "name", "Values": ["amzn2-ami-hvm-*"]}])
    image = sorted(i["ImageId"] for i in images["Images"])[0]
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/20", AvailabilityZone=f"{REGION}a")["Subnet"]["SubnetId"]
    name = f"{cluster}-{pool}-asg"
    ec2.create_launch_template(
        LaunchTemplateName=name, LaunchTemplateData={"ImageId": image, "InstanceType": "m5.large"}
    )
    tag = json.dumps({"pool": pool, "paasta_cluster": cluster})
    session.client("autoscaling", endpoint_url=moto_url, region_name=REGION).create_auto_scaling_group(
        AutoScalingGroupName=name,
        MinSize=0,
        MaxSize=max_size,
        DesiredCapacity=1,
        VPCZoneIdentifier=subnet,
        NewInstancesProtectedFromScaleIn=True,
        LaunchTemplate={"LaunchTemplateName": name, "Version": "$Latest"},
        Tags=[{"Key": TAG_KEY, "Value": tag, "PropagateAtLaunch": False}],
    )
    return name


def publish_signals(moto_url: str, bucket: str, version: str, work_dir: Path) -> None:
    tarball = build_artifact(SIGNALS_SOURCE, version, work_dir, worktree=True)
    s3 = boto3.client("s3", endpoint_url=moto_url, region_name=REGION, **_credentials())
    upload_artifact(s3, ArtifactLocation(bucket, CODENAME, version), tarball)


def _credentials() -> dict[str, Any]:
    return {
        "aws_access_key_id": FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    }


_RUN_LINE = re.compile(rf"{PRINTED_SECONDS} ")


def is_decision_line(line: str) -> bool:
    """The autoscaler prints one line per run, stamped to the second ("2026-11-23T08:41:07Z ...");
    its log records are stamped to the millisecond ("2026-11-23T08:41:07.123Z ...")."""
    return _RUN_LINE.match(line) is not None


def follow(path: Path, stop: threading.Event, show: Any) -> None:
    """Print the decision lines the autoscaler writes to its supervisord log, as they come."""
    while not path.exists() and not stop.wait(0.2):
        pass
    if stop.is_set():
        return
    with path.open() as f:
        while not stop.is_set():
            line = f.readline()
            if not line:
                stop.wait(0.2)
                continue
            if is_decision_line(line):
                show(line.rstrip("\n"))


def keep_output(pipe: IO[bytes], path: Path) -> None:
    """Copy the bootstrap's output (supervisord's with it) to ``path`` until it ends, dropping what
    cannot be written. The run directory's disk may fill up: given the file itself, supervisord
    died of it (its logger raises once stdout and stderr both fail), and with it the tree."""
    lost = 0
    with path.open("ab", buffering=0) as out:  # unbuffered: a line a full disk refused is not kept to fail again
        for line in pipe:
            try:
                if lost:
                    out.write(f"({lost} lines lost here: {path} could not be written)\n".encode())
                out.write(line)
                lost = 0
            except OSError:
                lost += 1


def operator_environment(main_path: Path, prefix: str) -> dict[str, str]:
    """What ``clusterman status|manage|disable|events|signal publish`` need to reach this stack (a
    signal version published from it lands under the codename the stack fetches from)."""
    return {
        "CMAN_ENV_CONFIG_PATH": str(main_path),
        "CMAN_CLUSTER": CLUSTER,
        "CMAN_POOL": POOL,
        "CMAN_SCHEDULER": SCHEDULER,
        "CMAN_SIGNAL_SOCKET_PREFIX": prefix,
        "CMAN_SIGNALS_CODENAME": CODENAME,
        **FAKE_CREDENTIALS,
    }


def write_env_file(path: Path, env: dict[str, str]) -> None:
    lines = [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    header = "# written by `make run`: `. <this file>` points clusterman at that stack (moto's fake AWS keys)\n"
    path.write_text(header + "\n".join(lines) + "\n")


def shown(path: Path) -> str:
    """``path`` relative to the current directory when under it (what a person would type)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def operator_commands(env_file: Path) -> list[str]:
    cli = Path(sys.executable).parent / "clusterman"
    command = shown(cli) if cli.exists() else f"{shown(Path(sys.executable))} -m clusterman.cli.main"
    return [
        f". {shown(env_file)}",
        f"{command} status",
        f"{command} manage --target-capacity 5 --dry-run",
        f"{command} disable --until 10m --reason trying; {command} enable",
        f"{command} interrupt    (a Spot interruption warning for the oldest node: watch it drained and replaced)",
    ]


LOG_LINE = re.compile(rf"^{PRINTED_MILLISECONDS} (?P<logger>\S+) (?P<level>[A-Z]+) (?P<message>.*)$")


def bootstrap_error(log_path: Path) -> str:
    """The bootstrap's last ERROR line (its one-line cause), else the log's last line."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError as e:
        return f"(cannot read {log_path}: {e.strerror})"
    for line in reversed(lines):
        m = LOG_LINE.match(line)
        if m and m["level"] in ("ERROR", "CRITICAL"):
            return m["message"]
    last = [line for line in lines if line.strip()]
    return last[-1].strip() if last else "(it logged nothing)"


def private_parent(run_dir: Path) -> Path:
    """Where the bootstrap makes its private directory (supervisord's socket): the run's own
    directory, unless its path is too long for a Unix socket."""
    return run_dir if Supervisor.socket_fits(run_dir / "clusterman-tree-xxxxxxxx") else Path(tempfile.gettempdir())


def run(duration: float, run: RunDir, config_dir: Path) -> int:
    run_dir = run.path
    (run_dir / "logs").mkdir(parents=True)
    prefix = socket_prefix(run.run_id)
    stop = stop_on_signals(logging.getLogger("clusterman.local.stack"), "stopping the stack")
    moto = MotoServer(log_path=run_dir / "moto.log").start()
    bootstrap: subprocess.Popen[bytes] | None = None
    try:
        events_port = free_port()
        main_path = prepare_configs(run_dir, moto.url, events_port, config_dir)
        bucket = read_yaml(main_path)["aws"]["signals_bucket"]
        create_bucket(moto.url, bucket)
        group = create_pool_group(moto.url)
        create_warning_queue(moto.url)
        print(
            f"embedded AWS (moto) on {moto.url}: bucket {bucket}, Auto Scaling group {group}, "
            f"warning queue {CLUSTER}-warnings and its EventBridge rules"
        )
        with tempfile.TemporaryDirectory(prefix="clusterman-publish-") as tmp:
            publish_signals(moto.url, bucket, "local", Path(tmp))
        print(
            f"published {signals_origin()} clusterman_signals as s3://{bucket}/{CODENAME}/clusterman_signals_local.tar.gz"
        )
        env = {
            **os.environ,
            **FAKE_CREDENTIALS,
            "CMAN_CLUSTER": CLUSTER,
            "CMAN_POOL": POOL,
            "CMAN_SCHEDULER": SCHEDULER,
            "CMAN_ENV_CONFIG_PATH": str(main_path),
            "CMAN_ARGS": AUTOSCALER_ARGS,
            "CMAN_LOG_DIR": str(run_dir / "logs"),
            "CMAN_LAST_GOOD_DIR": str(run_dir / "last-good"),  # a second stack never reads this one's
            "CMAN_SIGNALS_DIR": str(run_dir / "signals"),
            "CMAN_SIGNAL_SOCKET_PREFIX": prefix,
            "PYTHONUNBUFFERED": "1",
        }
        env_file = run_dir / "env.sh"
        write_env_file(env_file, operator_environment(main_path, prefix))
        bootstrap = subprocess.Popen(
            [sys.executable, "-m", "clusterman.batch.autoscaler_bootstrap", "--env-config-path", str(main_path),
             "--private-dir-parent", str(private_parent(run_dir)), "--poll-interval", "2", "--codename", CODENAME],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=functools.partial(die_with_parent, os.getpid()),
            pass_fds=(run.fd,),  # the run stays locked while its bootstrap lives, even if we are killed
        )  # fmt: skip
        assert bootstrap.stdout is not None
        keeper = threading.Thread(target=keep_output, args=(bootstrap.stdout, run_dir / "bootstrap.log"), daemon=True)
        keeper.start()
        print(f"bootstrap started (logs in {shown(run_dir)}); events and /metrics: http://127.0.0.1:{events_port}")
        print(f"operator commands for this stack (its config and moto's fake AWS keys are in {shown(env_file)}):")
        for line in operator_commands(env_file):
            print(f"  {line}")
        print("time     (UTC)  demand | utilisation | action | target | why")
        follower = threading.Thread(
            target=follow, args=(run_dir / "logs" / "autoscaler.log", stop, lambda s: print(s, flush=True))
        )
        follower.start()
        deadline = time.monotonic() + duration if duration > 0 else float("inf")
        while not stop.is_set() and time.monotonic() < deadline:
            if bootstrap.poll() is not None:
                keeper.join(10)  # its last lines written
                cause = bootstrap_error(run_dir / "bootstrap.log")
                print(f"the bootstrap exited with status {bootstrap.returncode}: {cause}")
                print(f"(its whole log: {shown(run_dir / 'bootstrap.log')})")
                return 1
            stop.wait(0.5)
        return 0
    finally:
        stop.set()
        if bootstrap is not None:
            _stop_tree(bootstrap)
        moto.stop()
        print("stopped: no process of the stack is left")


def _stop_tree(bootstrap: subprocess.Popen[bytes]) -> None:
    """SIGTERM the bootstrap (it stops supervisord and every program), then make sure of it."""
    if bootstrap.poll() is None:
        bootstrap.terminate()
        try:
            bootstrap.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(bootstrap.pid, signal.SIGKILL)  # anything of its session still there
    except ProcessLookupError:
        pass
    bootstrap.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clusterman.local.stack", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--duration", type=duration_argument, default=0, help="stop after this long: 120, 2m (0: run until Ctrl-C)"
    )
    parser.add_argument(
        "--base-dir", type=Path, default=Path(".local-stack"), help="each run makes <base>/<run id> and <base>/latest"
    )
    parser.add_argument(
        "--run-dir", type=Path, default=None, help="use this directory (refused while a stack runs in it)"
    )
    parser.add_argument(
        "--config-dir", type=Path, default=None, help="the srv-configs to copy (default: the config/ clusterman ships)"
    )
    args = parser.parse_args(argv)
    if importlib.util.find_spec("moto") is None:
        print(
            "clusterman.local.stack: the local stack runs moto's server: pip install 'clusterman[local]'",
            file=sys.stderr,
        )
        return 1
    try:
        # absolute: the bootstrap and supervisord's programs are given these paths and run elsewhere
        owned = claim(args.run_dir.resolve()) if args.run_dir is not None else claim_new(args.base_dir.resolve())
    except StackBusy as e:
        print(f"clusterman.local.stack: {e}", file=sys.stderr)
        return 1
    try:
        return run(args.duration, owned, args.config_dir or config_directory())
    finally:
        owned.release()


if __name__ == "__main__":
    sys.exit(main())
