"""Faults of fetching signal versions (issue 11, items 3 and 11): S3 down or serving a bad checksum
must not take a tree down when a verified copy is installed; fetch failures keep their cause.

Real bootstrap, supervisord, fetchers and signal runners; S3 is moto's server (a private one
where the test stops it); the autoscaler is itests/fixtures/tree_autoscaler.py.
"""

from __future__ import annotations

import hashlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from clusterman.local.moto_server import MotoServer
from itests.test_process_tree import tree_config
from itests.tree_helpers import CODENAME
from itests.tree_helpers import Bootstrap
from itests.tree_helpers import TreeConfig
from itests.tree_helpers import build_versions
from itests.tree_helpers import new_bucket
from itests.tree_helpers import s3_client
from itests.tree_helpers import signal_block
from itests.tree_helpers import unique_name
from itests.tree_helpers import upload

pytestmark = pytest.mark.slow

STAND_IN = "tree_autoscaler.py"


def write_pool(config: TreeConfig, app_signal: dict, max_capacity: int) -> None:
    """The pool file with one app signal; ``max_capacity`` tells which version of the file a program runs with."""
    config.write_pool({"appa": app_signal})
    config.pool_path.write_text(
        config.pool_path.read_text().replace("max_capacity: 9", f"max_capacity: {max_capacity}")
    )


def test_s3_down_or_a_bad_checksum_uses_the_installed_copy(tmp_path, signal_versions):
    with MotoServer() as moto:
        bucket = new_bucket(moto.url)
        upload(moto.url, bucket, "v1", signal_versions.tarballs["v1"])
        root = tmp_path / "srv-configs"
        root.mkdir()
        config = TreeConfig(root, moto.url, bucket, unique_name("pool"))
        config.write_main(signal_block(unique_name(), "v1"))
        app_signal = signal_block(unique_name(), "v1")
        write_pool(config, app_signal, 9)
        signals_dir = tmp_path / "signals"  # persistent, as in production: it outlives one bootstrap
        args = ("--signals-dir", str(signals_dir))
        first = Bootstrap(config, tmp_path, args, autoscaler=STAND_IN, name="first")
        try:
            run = first.wait_for_run(lambda r: r["max_capacity"] == 9, timeout=60)
            assert run["fallback_metrics"] == []

            # A bad .sha256 re-published for the installed version, then a config edit.
            key = f"{CODENAME}/clusterman_signals_v1.tar.gz.sha256"
            s3_client(moto.url).put_object(Bucket=bucket, Key=key, Body=b"0" * 64 + b"  clusterman_signals_v1.tar.gz\n")
            write_pool(config, app_signal, 8)
            first.wait_for_run(lambda r: r["max_capacity"] == 8, timeout=60)  # at once: v1 is installed
            run = first.wait_for_run(fell_back, timeout=60)  # S3 asked beside the new tree
            assert "checksum mismatch" in first.stderr and "RUNS FROM ITS INSTALLED COPY" in first.stderr

            # S3 unreachable, then a config edit: the tree comes up again from the installed copy.
            moto.stop()
            edited = time.monotonic()
            write_pool(config, app_signal, 7)
            first.wait_for_run(lambda r: r["max_capacity"] == 7, timeout=90)
            print(f"config edit with S3 down: new tree running after {time.monotonic() - edited:.1f} s")
            first.wait_for_run(fell_back, timeout=60)
            assert "Could not connect to the endpoint URL" in first.stderr

            # A restart of the whole bootstrap with S3 still down.
            first.proc.send_signal(signal.SIGTERM)
            assert first.wait_exit(60) == 0, first.stderr
            restarted = time.monotonic()
            second = Bootstrap(config, tmp_path, args, autoscaler=STAND_IN, name="second")
            try:
                second.wait_for_run(lambda r: r["max_capacity"] == 7, timeout=90)
                print(f"bootstrap restart with S3 down: running after {time.monotonic() - restarted:.1f} s")
                assert "exited with status 1" not in second.stderr
            finally:
                second.kill()
        finally:
            first.kill()


def fell_back(run: dict[str, Any]) -> bool:
    """The autoscaler exports v1 as run from its installed copy."""
    return any('version="v1"' in line and line.endswith(" 1.0") for line in run["fallback_metrics"])


def test_fetch_failures_keep_their_cause_and_only_this_fetchs_lines(tmp_path, moto_server, signal_versions):
    config = tree_config(tmp_path, moto_server, signal_versions, versions=("v1",))
    garbage = b"this is not a tarball\n"
    s3 = s3_client(moto_server.url)
    s3.put_object(Bucket=config.bucket, Key=f"{CODENAME}/clusterman_signals_junk.tar.gz", Body=garbage)
    digest = hashlib.sha256(garbage).hexdigest()
    s3.put_object(
        Bucket=config.bucket,
        Key=f"{CODENAME}/clusterman_signals_junk.tar.gz.sha256",
        Body=f"{digest}  clusterman_signals_junk.tar.gz\n".encode(),
    )
    config.write_main(signal_block(unique_name(), "v1"))
    config.write_pool({"appa": signal_block(unique_name(), "junk")})
    logs = tmp_path / "logs"
    logs.mkdir()
    # An earlier fetch's lines in the same log directory must not be repeated.
    (logs / "fetch_signals_1.log").write_text("fetch_clusterman_signal: signal version OLD: stale line\n")
    bootstrap = Bootstrap(config, tmp_path, ("--log-dir", str(logs)), autoscaler=STAND_IN)
    try:
        assert bootstrap.wait_exit(60) == 1
        errors = [line for line in bootstrap.stderr.splitlines() if " ERROR " in line]
        assert len(errors) == 1, errors
        assert "signal version junk could not be fetched" in errors[0]
        assert "not a readable tar.gz file: not a gzip file" in errors[0]
        assert "stale line" not in bootstrap.stderr
    finally:
        bootstrap.kill()


def test_an_unknown_signal_name_is_refused_at_start_up(tmp_path, moto_server, signal_versions):
    config = tree_config(tmp_path, moto_server, signal_versions, versions=("v1",))
    config.write_main(signal_block("NoSuchSignal", "v1"))  # itest_versions only answers to WhoAmI*
    config.write_pool({})
    bootstrap = Bootstrap(config, tmp_path, autoscaler=STAND_IN)
    try:
        assert bootstrap.wait_exit(60) == 1
        errors = [line for line in bootstrap.stderr.splitlines() if " ERROR " in line]
        assert len(errors) == 1, errors
        assert f"{config.main_path}: autoscale_signal:" in errors[0]
        assert "clusterman_signals.itest_versions has no signal named NoSuchSignal (version v1)" in errors[0]
        assert "started the autoscaler" not in bootstrap.stderr
    finally:
        bootstrap.kill()


def on_v1(tmp_path: Path, moto: MotoServer, signal_versions: Any) -> tuple[TreeConfig, str, str]:
    """v1 and v2 published in a bucket of ``moto``'s; a config whose app signal ``name`` runs v1 with
    max_capacity 9. Returns (config, bucket, name)."""
    bucket = new_bucket(moto.url)
    for version in ("v1", "v2"):
        upload(moto.url, bucket, version, signal_versions.tarballs[version])
    root = tmp_path / "srv-configs"
    root.mkdir()
    config = TreeConfig(root, moto.url, bucket, unique_name("pool"))
    config.write_main(signal_block(unique_name(), "v1"))
    name = unique_name()
    write_pool(config, signal_block(name, "v1"), 9)
    return config, bucket, name


def test_a_change_refused_while_s3_is_down_is_applied_once_s3_is_back(tmp_path, signal_versions):
    """A new version cannot be fetched while S3 is down: the running tree stays, and the change is
    tried again every --fetch-retry seconds, without waiting for another edit of the files."""
    with MotoServer() as moto:
        config, bucket, name = on_v1(tmp_path, moto, signal_versions)
        tree = Bootstrap(config, tmp_path, ("--fetch-retry", "2"), autoscaler=STAND_IN)
        try:
            tree.wait_for_run(lambda r: r["max_capacity"] == 9, timeout=60)
            port = moto.port
            moto.stop()
            write_pool(config, signal_block(name, "v2"), 6)
            tree.wait_for_run(lambda r: r["max_capacity"] == 9, timeout=30)  # the old tree still runs
            deadline = time.monotonic() + 60
            while "trying again in 2 s" not in tree.stderr and time.monotonic() < deadline:
                time.sleep(0.2)
            assert "trying again in 2 s" in tree.stderr, tree.stderr

            with MotoServer(port=port) as back:  # S3 is back (empty, as a restarted moto): publish again
                s3_client(back.url).create_bucket(
                    Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
                )
                for version in ("v1", "v2"):
                    upload(back.url, bucket, version, signal_versions.tarballs[version])
                returned = time.monotonic()
                tree.wait_for_run(lambda r: r["max_capacity"] == 6, timeout=60)
                print(
                    f"change refused while S3 was down: applied {time.monotonic() - returned:.1f} s after S3 returned"
                )
        finally:
            tree.kill()


def test_the_running_tree_is_watched_while_a_change_waits_for_an_s3_that_hangs(tmp_path, signal_versions):
    """A change needs a version from an S3 that accepts and never answers (moto ``SIGSTOP``ped):
    the fetch may take up to --fetch-timeout. Meanwhile the bootstrap goes on watching the tree
    it runs: a stopped autoscaler is restarted, and /healthz does not say the bootstrap stopped
    looking. Before, the watch waited for the fetch: nothing was restarted, and /healthz answered
    503 (`the bootstrap has not looked at the tree …`) until the fetch gave up."""
    with MotoServer() as moto:
        config, _, name = on_v1(tmp_path, moto, signal_versions)
        liveness = ("--fetch-timeout", "120", "--stale-periods", "3", "--start-grace", "2")
        tree = Bootstrap(config, tmp_path, liveness, cman_args="--period 0.5", autoscaler=STAND_IN)
        assert moto._proc is not None
        try:
            first = tree.wait_for_run(lambda r: r["max_capacity"] == 9, timeout=60)
            moto._proc.send_signal(signal.SIGSTOP)
            write_pool(config, signal_block(name, "v2"), 6)
            changed = time.time()
            time.sleep(8)  # the fetch of v2 is under way, and hangs: longer than /healthz allows a look to take
            os.kill(first["pid"], signal.SIGSTOP)
            stopped = time.monotonic()
            back = tree.wait_for_run(lambda r: r["pid"] != first["pid"], timeout=30)
            print(f"stopped autoscaler restarted {time.monotonic() - stopped:.1f} s after SIGSTOP, during the fetch")
            assert back["max_capacity"] == 9  # the running configuration: the change still waits for S3
            tree.wait_for_run(lambda r: r["time"] > back["time"] + 2)
            health = [r["health"] for r in tree.runs() if r["time"] > changed]
            assert health and all(status == 200 for status, _ in health), health
            assert "not fetched" not in tree.stderr  # the fetch still hangs: all this happened during it
        finally:
            moto._proc.send_signal(signal.SIGCONT)
            tree.kill()


def test_a_restart_with_an_s3_that_hangs_starts_the_installed_versions_at_once(tmp_path, signal_versions):
    """A bootstrap restarted while S3 accepts and never answers (moto ``SIGSTOP``ped), its versions
    installed in a persistent signals directory: the tree starts at once, and S3 is asked beside it,
    for at most --s3-check-timeout. Before, the start waited for S3: 3 attempts of a 60 s read
    timeout, 241 s without an autoscaler."""
    with MotoServer() as moto:
        config, _, _ = on_v1(tmp_path, moto, signal_versions)
        args = ("--signals-dir", str(tmp_path / "signals"), "--s3-check-timeout", "3")
        first = Bootstrap(config, tmp_path, args, autoscaler=STAND_IN, name="first")
        try:
            first.wait_for_run(lambda r: r["max_capacity"] == 9, timeout=60)
            first.proc.send_signal(signal.SIGTERM)
            assert first.wait_exit(60) == 0, first.stderr
        finally:
            first.kill()
        assert moto._proc is not None
        moto._proc.send_signal(signal.SIGSTOP)
        restarted = time.monotonic()
        second = Bootstrap(config, tmp_path, args, autoscaler=STAND_IN, name="second")
        try:
            second.wait_for_run(lambda r: r["max_capacity"] == 9, timeout=20)
            print(f"restart with S3 hanging: the tree runs {time.monotonic() - restarted:.1f} s after the start")
            second.wait_for_run(fell_back, timeout=20)
            print(f"and reports v1 run from its installed copy {time.monotonic() - restarted:.1f} s after the start")
            errors = [line for line in second.stderr.splitlines() if " ERROR " in line]
            assert errors == [e for e in errors if "SIGNAL VERSION v1 RUNS FROM ITS INSTALLED COPY: S3 gave no " in e]
            assert len(errors) == 1, errors
            second.proc.send_signal(signal.SIGTERM)
            assert second.wait_exit(60) == 0, second.stderr
        finally:
            moto._proc.send_signal(signal.SIGCONT)
            second.kill()


def test_versions_no_configuration_runs_are_pruned_and_the_disk_they_take_exported(tmp_path, signal_versions):
    """A persistent signals directory kept every install ever fetched, and a fetcher killed while
    unpacking left its partial directory: the pod's volume filled up. Now the bootstrap keeps the
    running configuration's installs and the last good one's, and exports the disk they take."""
    with MotoServer() as moto:
        config, bucket, name = on_v1(tmp_path, moto, signal_versions)
        signals = tmp_path / "signals"
        leftover = signals / ".v1.partial-killed"  # as a fetcher killed while unpacking leaves it
        (leftover / "root" / "venv").mkdir(parents=True)
        args = ("--signals-dir", str(signals))
        tree = Bootstrap(config, tmp_path, args, cman_args="--period 0.3", autoscaler=STAND_IN)
        try:
            tree.wait_for_run(lambda r: r["max_capacity"] == 9, timeout=60)
            v1 = os.readlink(signals / "v1")
            config.write_main(signal_block(unique_name(), "v2"))  # nothing runs v1 any more
            write_pool(config, signal_block(name, "v2"), 6)
            tree.wait_for_run(lambda r: r["max_capacity"] == 6, timeout=60)
            run = tree.wait_for_run(lambda r: r["signals_disk_metrics"] and not (signals / v1).exists(), timeout=30)
            assert sorted(p.name for p in signals.iterdir()) == sorted(["v2", os.readlink(signals / "v2")])
            used = float(run["signals_disk_metrics"][0].rsplit(" ", 1)[1])
            print(f"after the change, the signals directory holds v2 alone: {used / 2**20:.1f} MiB")
            assert 0 < used < 2**30

            # v2 moved in S3 (a branch pushed again): the next tree starts on the install it has, S3
            # is asked beside it, and the tree is restarted on the new install
            old = os.readlink(signals / "v2")
            upload(moto.url, bucket, "v2", build_versions(tmp_path / "moved", {"v2": 5.0}).tarballs["v2"])
            write_pool(config, signal_block(name, "v2"), 5)
            tree.wait_for_run(lambda r: r["max_capacity"] == 5, timeout=60)
            tree.wait_log("signal version(s) v2 moved in S3: restarting the tree on the new install")
            new = os.readlink(signals / "v2")
            assert new != old

            def runs_on(install: str) -> bool:
                cwds = {os.readlink(f"/proc/{pid}/cwd") for pid in tree.tree_pids() if runner(pid)}
                return cwds == {str(signals / install)}

            deadline = time.monotonic() + 30
            while not runs_on(new):
                assert time.monotonic() < deadline, "the runners never ran the moved version"
                time.sleep(0.2)
        finally:
            tree.kill()


def runner(pid: int) -> bool:
    try:
        return b"clusterman_signals.run" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
