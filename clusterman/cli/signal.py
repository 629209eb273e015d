"""``clusterman signal init DIR`` makes a signal repository that works as it is (the SDK, a sample
signal, its test, a metrics file to try it on, the requirements file); ``clusterman signal
evaluate`` tries a signal against a metrics file before tagging it (with ``--start``, in the
signal's own virtualenv, built from the files on disk as ``publish`` builds a version, and a
failing signal's traceback names the repository's files); ``clusterman signal publish`` builds a
tagged version's virtualenv and uploads it to S3."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO
from typing import Any

import clusterman_signals
from clusterman.batch.arguments import add_timeout_argument
from clusterman.batch.arguments import time_argument
from clusterman.errors import UserError
from clusterman.errors import reading_input
from clusterman.signals import metrics_file
from clusterman.signals.client import SignalAddress
from clusterman.signals.client import SignalClient
from clusterman.signals.protocol import SignalError
from clusterman.signals.signal_venv import PACKAGE
from clusterman.signals.signal_venv import REQUIREMENTS
from clusterman.signals.signal_venv import SDK_MODULES
from clusterman.signals.signal_venv import BuildInfo
from clusterman.signals.signal_venv import build_venv
from clusterman.signals.signal_venv import check_sdk
from clusterman.signals.signal_venv import interpreter_version
from clusterman.signals.signal_venv import venv_python


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("signal", aliases=["signals"], help="work with signals")
    actions = parser.add_subparsers(dest="signal_command", metavar="ACTION", required=True)

    init = actions.add_parser("init", help="make a signal repository: the SDK, a sample signal and its test")
    init.add_argument("dir", type=Path, metavar="DIR", help="where (made if missing; must hold no clusterman_signals/)")
    init.add_argument("--namespace", default="my_signals", help="the namespace of the sample signal")
    init.add_argument("--name", default="QueueDepthSignal", help="the sample signal's class")
    init.set_defaults(func=run_init)

    evaluate = actions.add_parser("evaluate", help="send a metrics file to a signal and print its request")
    evaluate.add_argument("--namespace", required=True, help="the clusterman_signals subpackage, e.g. clusterman")
    evaluate.add_argument("--name", required=True, help="the signal class, e.g. MostRecentResources")
    evaluate.add_argument("--app", default="__default__", help="the application (part of the socket name)")
    evaluate.add_argument(
        "--metrics", required=True, type=Path, help='{"metrics": {...}, "timestamp": T} or the bare mapping'
    )
    evaluate.add_argument("--param", action="append", default=[], metavar="K=V", help="a signal parameter (repeatable)")
    evaluate.add_argument(
        "--timestamp",
        type=time_argument,
        default=None,
        help="the evaluation time, Unix seconds or ISO 8601 (default: from the file)",
    )
    evaluate.add_argument("--cluster", default="local-dev")
    evaluate.add_argument("--pool", default="default")
    add_timeout_argument(evaluate, 60.0, "seconds to wait for the answer")
    evaluate.add_argument(
        "--start",
        action="store_true",
        help="build the signals' own virtualenv from --repo's files (as publish does), run the signal in it, "
        "and stop it after",
    )
    evaluate.add_argument(
        "--repo",
        type=Path,
        default=Path("."),
        help="with --start: the directory holding clusterman_signals/ (default: here; without one, the signals "
        "installed with clusterman)",
    )
    _wheelhouse_argument(evaluate)
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
    _wheelhouse_argument(publish)
    publish.set_defaults(func=run_publish)


def _wheelhouse_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wheelhouse",
        type=Path,
        default=Path(w) if (w := os.environ.get("CMAN_SIGNAL_WHEELHOUSE")) else None,
        help="install clusterman_signals/requirements.txt from this directory of wheels only (offline); "
        "default: $CMAN_SIGNAL_WHEELHOUSE, else the package index",
    )


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


def signal_venv(repo: Path, wheelhouse: Path | None, root: Path) -> tuple[Path, Path]:
    """The signals' own virtualenv under ``root``, built from ``repo``'s files on disk as ``publish``
    builds a version (their pinned requirements too), so a signal that imports a third-party package
    is tried as it will run: the python to run it with, and the directory its clusterman_signals
    came from. A ``repo`` without clusterman_signals/ stands for the signals installed with clusterman."""
    source = repo if (repo / PACKAGE).is_dir() else Path(clusterman_signals.__file__).resolve().parents[1]
    check_sdk(source, f"{source} (the files on disk)")
    build_venv(source, root, BuildInfo("evaluate", "worktree", interpreter_version()), wheelhouse=wheelhouse)
    return venv_python(root), source.resolve()


def as_written(text: str, venv_root: Path, source: Path) -> str:
    """A traceback from the signals' virtualenv naming the files they were copied from: the
    author's, to open and fix, not the temporary copy's."""
    copied = re.compile(re.escape(str(venv_root)) + r"/\S*?/site-packages/" + PACKAGE + "/")
    return copied.sub(lambda _: f"{source}/{PACKAGE}/", text)


def start_runner(address: SignalAddress, python: Path, log: IO[bytes]) -> subprocess.Popen[bytes]:
    """Launch the runner as the tree does (``-I``: nothing of our environment's Python paths). Its
    log goes to ``log``, not the terminal: stdout and stderr are for the answer and our errors."""
    return subprocess.Popen(
        [str(python), "-I", "-m", "clusterman_signals.run", address.namespace, address.name, address.app],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=log,
        stderr=log,
    )


def _runner_tail(log: IO[bytes], lines: int = 20) -> str:
    log.seek(0)
    return "\n".join(log.read().decode("utf-8", errors="replace").splitlines()[-lines:])


def _connect(client: SignalClient, started: bool) -> None:
    """Connect once: a runner nobody started is not waited for, and the error says how to start one."""
    try:
        client.connect()
    except SignalError as e:
        if started:
            raise
        a = client.address
        raise SignalError(
            f"{e}; start one with --start, or with `python -m clusterman_signals.run {a.namespace} {a.name} {a.app}`"
        ) from e


class _SendAgain(Exception):
    """The payload guessed from the file's bytes was not the checked one: send the checked one."""

    def __init__(self, payload: bytes) -> None:
        super().__init__("the guessed payload differs from the checked one")
        self.payload = payload


def run_evaluate(args: argparse.Namespace) -> int:
    """Send the file's bytes first when they can be predicted (``metrics_file.guess``) and check the
    file while the runner parses them; its answer counts only once the check has passed."""
    raw = metrics_file.read(args.metrics)
    guessed = metrics_file.guess(raw, args.timestamp)
    notes: list[str] = []

    def check() -> bytes:
        """The checked payload. The parsed file is dropped on return: when this runs while the
        runner works, freeing a million points costs no time on the way to the answer."""
        metrics = metrics_file.load(args.metrics, raw)
        notes.extend(metrics.notes)
        when = args.timestamp
        if when is None and metrics.when(None) is None:
            when = time.time()  # no points at all: the signal decides what an empty window means
        return metrics.payload(when)

    def check_guess() -> None:
        payload = check()
        if payload != guessed:
            raise _SendAgain(payload)

    address = SignalAddress(args.namespace, args.name, args.app)
    client = SignalClient(
        address,
        args.cluster,
        args.pool,
        parse_params(args.param),
        read_timeout=args.timeout,
        connect_timeout=10.0 if args.start else 0.5,  # without --start nobody is about to listen
        traceback=True,
    )
    with (
        tempfile.TemporaryDirectory(prefix="clusterman-evaluate-") as tmp,
        tempfile.TemporaryFile(prefix="clusterman-runner-") as runner_log,
        client,
    ):
        # a file whose bytes cannot be sent as they are is checked first; else while the runner works
        payload, meanwhile = (check(), None) if guessed is None else (guessed, check_guess)
        runner = None
        source: Path | None = None
        if args.start:
            python, source = signal_venv(args.repo, args.wheelhouse, Path(tmp))
            runner = start_runner(address, python, runner_log)
        try:
            _connect(client, started=runner is not None)
            try:
                request = client.evaluate_payload(payload, meanwhile=meanwhile)
            except _SendAgain as again:
                request = client.evaluate_payload(again.payload)
        except SignalError as e:
            if runner is not None and runner.poll() is not None:
                tail = _runner_tail(runner_log)
                raise SignalError(f"{e} (the runner exited with status {runner.returncode}; its log:\n{tail})") from e
            print(f"clusterman signal evaluate: {e}", file=sys.stderr)
            if e.traceback:
                shown = as_written(e.traceback, Path(tmp), source) if source is not None else e.traceback
                print(f"the signal's traceback:\n{shown.rstrip()}", file=sys.stderr)
            return 1
        finally:
            if runner is not None:
                runner.terminate()
                try:
                    runner.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    runner.kill()
                    runner.wait()
            for note in notes:
                print(f"clusterman signal evaluate: {note}", file=sys.stderr)
    print(json.dumps(request.as_json()))
    return 0


def run_publish(args: argparse.Namespace) -> int:
    # Imported here: ``signal evaluate`` needs neither boto3 nor the config loader.
    from clusterman.aws.session import AwsSettings
    from clusterman.aws.session import client as aws_client
    from clusterman.config.loader import load_main_config
    from clusterman.signals.artifacts import ArtifactLocation
    from clusterman.signals.artifacts import build_artifact
    from clusterman.signals.artifacts import check_bucket
    from clusterman.signals.artifacts import default_codename
    from clusterman.signals.artifacts import upload_artifact

    main = load_main_config(args.env_config_path)
    bucket = args.bucket or main.aws.signals_bucket
    with reading_input():  # the --version
        location = ArtifactLocation(bucket, args.codename or default_codename(), args.version)
    s3 = aws_client(AwsSettings.from_config(main.aws), "s3")
    check_bucket(s3, bucket)
    with tempfile.TemporaryDirectory(prefix="clusterman-publish-") as tmp:
        tarball = build_artifact(args.repo, args.version, Path(tmp), worktree=args.worktree, wheelhouse=args.wheelhouse)
        digest = upload_artifact(s3, location, tarball)
    print(f"published {location.url} (sha256 {digest})")
    return 0


SAMPLE_SIGNAL = '''"""{namespace}: your signals (docs/signals.md, "Writing a signal"). Each is exported here, as
clusterman_signals.{namespace}.<Name> is how a pool names it."""

from clusterman_signals.base_signal import BaseSignal
from clusterman_signals.base_signal import SignalResources


class {name}(BaseSignal):
    """A sample: cpus_per_item cpus (a parameter, 0.1 by default) for each item in the app's queue,
    its newest queue_depth point; no opinion without one."""

    def value(self, metrics, timestamp):
        points = metrics.get("queue_depth") or []
        if not points:
            return SignalResources()  # no opinion, which is not zero
        per_item = float(self.parameters.get("cpus_per_item", 0.1))
        return SignalResources(cpus=points[-1][1] * per_item)
'''
SAMPLE_TEST = '''"""{name}, as the runner calls it: python -m pytest tests"""

from clusterman_signals.{namespace} import {name}


def test_cpus_follow_the_queue():
    signal = {name}("my-cluster", "my-pool", {{"cpus_per_item": 0.5}})
    assert signal.evaluate({{"queue_depth": [[1700000000, 10.0]]}}, 1700000000).cpus == 5.0


def test_no_points_is_no_opinion():
    assert {name}("my-cluster", "my-pool").evaluate({{}}, 1700000000).cpus is None
'''
CONFTEST = """# The repository's own clusterman_signals (this directory) comes first on the path, before any
# installed one, for the tests in tests/.
"""
REQUIREMENTS_TEXT = """# Third-party packages your signals import, one per line, every one pinned (name==version) and
# the list complete: `clusterman signal publish` installs exactly these (docs/signals.md).
"""


def run_init(args: argparse.Namespace) -> int:
    """A signal repository that works as it is: ``evaluate --start`` answers and its test passes."""
    for what, value in (("--namespace", args.namespace), ("--name", args.name)):
        if not value.isidentifier():
            raise UserError(f"{what} {value!r} is not a Python identifier")
    if args.namespace == "clusterman":
        raise UserError("--namespace clusterman is the default signals' namespace: choose your own")
    package = args.dir / PACKAGE
    if package.exists():
        raise UserError(f"{package} exists already: init makes a new repository")
    sdk = Path(clusterman_signals.__file__).resolve().parent
    try:
        package.mkdir(parents=True)
        for name in ("__init__.py", "py.typed", *SDK_MODULES):
            shutil.copy(sdk / name, package / name)
        # the default signals' namespace: the same repository can publish the pools' default signal
        shutil.copytree(sdk / "clusterman", package / "clusterman", ignore=shutil.ignore_patterns("__pycache__"))
        (package / args.namespace).mkdir()
        (package / args.namespace / "__init__.py").write_text(
            SAMPLE_SIGNAL.format(namespace=args.namespace, name=args.name)
        )
        (package / REQUIREMENTS).write_text(REQUIREMENTS_TEXT)
        (args.dir / "tests").mkdir(exist_ok=True)
        test = args.dir / "tests" / f"test_{args.namespace}.py"
        test.write_text(SAMPLE_TEST.format(namespace=args.namespace, name=args.name))
        (args.dir / "conftest.py").write_text(CONFTEST)
        metrics = {"metrics": {"queue_depth": [[1700000000, 10.0]]}, "timestamp": 1700000000}
        (args.dir / "metrics.json").write_text(json.dumps(metrics) + "\n")
    except OSError as e:
        raise UserError(f"{args.dir}: cannot write: {e.strerror or e}") from e
    where = shlex.quote(str(args.dir))
    print(
        f"wrote {args.dir}: the signal SDK, {PACKAGE}/{args.namespace}/ with {args.name}, {test.relative_to(args.dir)}"
    )
    print("try it:")
    print(f"  cd {where} && python -m pytest tests")
    print(
        f"  clusterman signal evaluate --start --namespace {args.namespace} --name {args.name} --metrics metrics.json"
    )
    print("then commit, tag and publish it: git init && git add . && git commit -m signals && git tag v1 && "
          "clusterman signal publish --version v1")  # fmt: skip
    return 0
