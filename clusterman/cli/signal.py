"""``clusterman signal evaluate`` tries a signal against a metrics file before tagging it;
``clusterman signal publish`` builds a tagged version's virtualenv and uploads it to S3."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from clusterman.aws.session import AwsSettings
from clusterman.aws.session import client as aws_client
from clusterman.config.loader import load_main_config
from clusterman.errors import UserError
from clusterman.signals.artifacts import ArtifactLocation
from clusterman.signals.artifacts import build_artifact
from clusterman.signals.artifacts import default_codename
from clusterman.signals.artifacts import upload_artifact
from clusterman.signals.client import SignalAddress
from clusterman.signals.client import SignalClient
from clusterman.signals.protocol import SignalError


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("signal", aliases=["signals"], help="work with signals")
    actions = parser.add_subparsers(dest="signal_command", metavar="ACTION", required=True)

    evaluate = actions.add_parser("evaluate", help="send a metrics file to a signal and print its request")
    evaluate.add_argument("--namespace", required=True, help="the clusterman_signals subpackage, e.g. clusterman")
    evaluate.add_argument("--name", required=True, help="the signal class, e.g. MostRecentResources")
    evaluate.add_argument("--app", default="__default__", help="the application (part of the socket name)")
    evaluate.add_argument(
        "--metrics", required=True, type=Path, help='{"metrics": {...}, "timestamp": T} or the bare mapping'
    )
    evaluate.add_argument("--param", action="append", default=[], metavar="K=V", help="a signal parameter (repeatable)")
    evaluate.add_argument("--timestamp", type=float, default=None, help="the evaluation time (default: from the file)")
    evaluate.add_argument("--cluster", default="local-dev")
    evaluate.add_argument("--pool", default="default")
    evaluate.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the answer")
    evaluate.add_argument("--start", action="store_true", help="launch the signal runner first, and stop it after")
    evaluate.set_defaults(func=run_evaluate)

    publish = actions.add_parser(
        "publish", help="build clusterman_signals as of a git tag or branch into a virtualenv and upload it to S3"
    )
    publish.add_argument("--version", required=True, help="the git tag or branch; also the published version name")
    publish.add_argument("--bucket", default=None, help="the S3 bucket (default: the main config's aws.signals_bucket)")
    publish.add_argument("--codename", default=None, help="key prefix (default: $CMAN_SIGNALS_CODENAME or OS codename)")
    publish.add_argument("--repo", type=Path, default=Path("."), help="the git repository holding clusterman_signals/")
    publish.add_argument(
        "--worktree", action="store_true", help="package the files on disk as they are (uncommitted changes too)"
    )
    publish.set_defaults(func=run_publish)


def parse_params(pairs: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise UserError(f"--param {pair!r}: expected KEY=VALUE")
        try:
            params[key] = json.loads(text)
        except json.JSONDecodeError:
            params[key] = text
    return params


def load_metrics_file(path: Path) -> tuple[dict[str, Any], float | None]:
    """The metrics mapping and the file's timestamp, if it has one."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON: {e}") from e
    if isinstance(data, dict) and isinstance(data.get("metrics"), dict):
        metrics, timestamp = data["metrics"], data.get("timestamp")
    elif isinstance(data, dict):
        metrics, timestamp = data, None
    else:
        raise UserError(f"{path}: expected a JSON object of metric name -> [[timestamp, value], ...]")
    for name, series in metrics.items():
        if not isinstance(series, list) or any(not isinstance(p, list) or len(p) != 2 for p in series):
            raise UserError(f"{path}: metric {name!r} must be a list of [timestamp, value] pairs")
    return metrics, timestamp


def newest_timestamp(metrics: dict[str, Any]) -> float | None:
    stamps = [p[0] for series in metrics.values() for p in series]
    return max(stamps) if stamps else None


def start_runner(address: SignalAddress) -> subprocess.Popen[bytes]:
    """Launch this checkout's runner; the child inherits our environment, so it finds the same SDK."""
    return subprocess.Popen(
        [sys.executable, "-m", "clusterman_signals.run", address.namespace, address.name, address.app],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def run_evaluate(args: argparse.Namespace) -> int:
    metrics, file_timestamp = load_metrics_file(args.metrics)
    timestamp = args.timestamp or file_timestamp or newest_timestamp(metrics) or time.time()
    address = SignalAddress(args.namespace, args.name, args.app)
    runner = start_runner(address) if args.start else None
    try:
        client = SignalClient(
            address,
            args.cluster,
            args.pool,
            parse_params(args.param),
            read_timeout=args.timeout,
            connect_timeout=10.0 if args.start else 2.0,
        )
        with client:
            request = client.evaluate(metrics, timestamp)
    except SignalError as e:
        if runner is not None and runner.poll() is not None:
            raise SignalError(f"{e} (the runner exited with status {runner.returncode})") from e
        raise
    finally:
        if runner is not None:
            runner.terminate()
            try:
                runner.wait(timeout=5)
            except subprocess.TimeoutExpired:
                runner.kill()
                runner.wait()
    print(json.dumps(request.as_json()))
    return 0


def run_publish(args: argparse.Namespace) -> int:
    main = load_main_config(args.env_config_path)
    bucket = args.bucket or main.aws.signals_bucket
    location = ArtifactLocation(bucket, args.codename or default_codename(), args.version)
    with tempfile.TemporaryDirectory(prefix="clusterman-publish-") as tmp:
        tarball = build_artifact(args.repo, args.version, Path(tmp), worktree=args.worktree)
        digest = upload_artifact(aws_client(AwsSettings.from_config(main.aws), "s3"), location, tarball)
    print(f"published {location.url} (sha256 {digest})")
    return 0
