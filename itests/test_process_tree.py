"""The process tree for real: the bootstrap, supervisord, fetchers, signal runners from S3 (moto's
server), and a stand-in autoscaler using the real SignalClient (itests/fixtures/fake_autoscaler.py)."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from clusterman.signals.artifacts import sha256_of
from itests.tree_helpers import CODENAME
from itests.tree_helpers import REPO_ROOT
from itests.tree_helpers import Bootstrap
from itests.tree_helpers import TreeConfig
from itests.tree_helpers import new_bucket
from itests.tree_helpers import s3_client
from itests.tree_helpers import signal_block
from itests.tree_helpers import unique_name
from itests.tree_helpers import upload

pytestmark = pytest.mark.slow

SECRET = "itest-secret-key-must-not-be-logged"
LIMITS = "scaling_limits: {min_capacity: 1, max_capacity: 2, max_weight_to_add: 1, max_weight_to_remove: 1}\n"


def all_answered(run):
    return all("cpus" in result for result in run["results"].values())


def cpus(run):
    return {app: result.get("cpus") for app, result in run["results"].items()}


def tree_config(tmp_path, moto_server, signal_versions, versions=("v1", "v2"), key_file=False):
    bucket = new_bucket(moto_server.url)
    for version in versions:
        upload(moto_server.url, bucket, version, signal_versions.tarballs[version])
    root = tmp_path / "srv-configs"
    root.mkdir()
    key_path = None
    if key_file:
        key_path = root / "aws-key.json"
        key_path.write_text(json.dumps({"accessKeyId": "testing", "secretAccessKey": SECRET}))
    return TreeConfig(root, moto_server.url, bucket, unique_name("pool"), key_path)


def private_dir(bootstrap):
    return Path(re.search(r"private directory (\S+),", bootstrap.stderr).group(1))


def stop_cleanly(bootstrap):
    bootstrap.proc.send_signal(signal.SIGTERM)
    assert bootstrap.wait_exit(60) == 0, bootstrap.stderr
    assert bootstrap.tree_pids() == []


def test_two_versions_answer_a_killed_signal_comes_back_and_sigterm_leaves_nothing(
    tmp_path, moto_server, signal_versions
):
    config = tree_config(tmp_path, moto_server, signal_versions)
    config.write_main(signal_block(unique_name(), "v1"))
    config.write_pool({"appa": signal_block(unique_name(), "v1"), "appb": signal_block(unique_name(), "v2")})
    bootstrap = Bootstrap(config, tmp_path, ("--allowed-uids", "4242"), cman_args="--interval 0.2")
    try:
        run = bootstrap.wait_for_run(all_answered)
        assert cpus(run) == {"__default__": 1.0, "appa": 1.0, "appb": 2.0}
        assert run["argv"][-2:] == ["--interval", "0.2"]  # $CMAN_ARGS reached the autoscaler
        assert "fetched 2 signal version(s)" in bootstrap.stderr
        private = private_dir(bootstrap)
        assert private.stat().st_mode & 0o777 == 0o700

        # Each signal runs on the interpreter copied into its own fetched version's venv.
        victim = int(run["results"]["appb"]["mem"])
        exe = Path(os.readlink(f"/proc/{victim}/exe"))
        assert exe.parent.name == "bin" and exe.parents[2].name.startswith(".v2-")
        assert exe.parents[3] == private / "signals"
        environ = Path(f"/proc/{victim}/environ").read_bytes().split(b"\0")
        assert b"CMAN_SIGNAL_ALLOWED_UIDS=4242" in environ
        assert 4242 in run["allowed_uids"]

        os.kill(victim, signal.SIGKILL)
        killed_at = time.time()
        back = bootstrap.wait_for_run(lambda r: r["time"] > killed_at and r["results"]["appb"].get("mem") != victim)
        assert cpus(back) == {"__default__": 1.0, "appa": 1.0, "appb": 2.0}
        assert back["pid"] == run["pid"]  # the autoscaler itself was not restarted
        after_kill = [r for r in bootstrap.runs() if r["time"] > killed_at]
        assert after_kill and all(all_answered(r) for r in after_kill)  # it reconnected; no run failed

        tree = bootstrap.tree_pids()
        assert victim not in tree and run["pid"] in tree and len(tree) >= 5  # supervisord, 3 signals, autoscaler
        stop_cleanly(bootstrap)
        assert not private.exists()
        assert "stopped the tree" in bootstrap.stderr
    finally:
        bootstrap.kill()


def test_config_changes_restart_the_tree_and_bad_ones_keep_it(tmp_path, moto_server, signal_versions):
    config = tree_config(tmp_path, moto_server, signal_versions, key_file=True)
    config.write_main(signal_block(unique_name(), "v1"))
    app_name = unique_name()
    config.write_pool({"appa": signal_block(app_name, "v1")})
    bootstrap = Bootstrap(config, tmp_path, cman_args="--interval 0.2")
    try:
        first = bootstrap.wait_for_run(all_answered)
        assert cpus(first) == {"__default__": 1.0, "appa": 1.0}

        # An invalid pool file: one error naming the file and key, and the tree keeps running.
        config.write_pool({}, raw=config.pool_path.read_text() + "no_such_key: 1\n")
        bootstrap.wait_log("no_such_key: unknown key")
        assert "the running tree keeps its previous configuration" in bootstrap.stderr
        settled = time.time() + 0.3
        later = bootstrap.wait_for_run(lambda r: r["time"] > settled)
        assert later["pid"] == first["pid"] and all_answered(later)

        # A version that is not in S3: fetched beside the running tree, it fails naming the version,
        # and the running tree is never stopped.
        config.write_pool({"appa": signal_block(app_name, "v404")})
        failure = r"signal version v404 could not be fetched .*v404\.tar\.gz\.sha256 not found.*keeps its previous"
        bootstrap.wait_log("v404.tar.gz.sha256 not found")
        assert re.search(failure, bootstrap.stderr)
        settled = time.time() + 0.3
        restored = bootstrap.wait_for_run(lambda r: r["time"] > settled)
        assert restored["pid"] == first["pid"] and cpus(restored) == {"__default__": 1.0, "appa": 1.0}

        # A valid change: the whole tree restarts with the new pin.
        config.write_pool({"appa": signal_block(app_name, "v2")})
        moved = bootstrap.wait_for_run(lambda r: r["pid"] != restored["pid"] and all_answered(r))
        assert cpus(moved) == {"__default__": 1.0, "appa": 2.0}

        # The AWS key file changes: restart again.
        config.key_file.write_text(json.dumps({"accessKeyId": "testing", "secretAccessKey": SECRET + "-rotated"}))
        bootstrap.wait_log(f"{config.key_file} changed: restarting the tree")
        rotated = bootstrap.wait_for_run(lambda r: r["pid"] != moved["pid"] and all_answered(r))
        assert cpus(rotated) == {"__default__": 1.0, "appa": 2.0}

        stop_cleanly(bootstrap)
        assert SECRET not in bootstrap.stderr
        assert bootstrap.stderr.count("starting the tree for") == 3  # first, v2, key: v404 never stopped the tree
    finally:
        bootstrap.kill()


def test_a_missing_version_fails_the_bootstrap_naming_it(tmp_path, moto_server, signal_versions):
    config = tree_config(tmp_path, moto_server, signal_versions, versions=("v1",))
    config.write_main(signal_block(unique_name(), "v1"))
    config.write_pool({"appa": signal_block(unique_name(), "v9")})
    bootstrap = Bootstrap(config, tmp_path)
    try:
        assert bootstrap.wait_exit(60) == 1
        assert "signal version v9 could not be fetched (exit status 1:" in bootstrap.stderr
        assert f"s3://{config.bucket}/{CODENAME}/clusterman_signals_v9.tar.gz.sha256 not found" in bootstrap.stderr
        assert "started the autoscaler" not in bootstrap.stderr
        assert bootstrap.tree_pids() == []
    finally:
        bootstrap.kill()


def test_the_tree_dies_with_a_killed_bootstrap(tmp_path, moto_server, signal_versions):
    config = tree_config(tmp_path, moto_server, signal_versions, versions=("v1",))
    config.write_main(signal_block(unique_name(), "v1"))
    config.write_pool({})
    bootstrap = Bootstrap(config, tmp_path, cman_args="--interval 0.2")
    try:
        bootstrap.wait_for_run(all_answered)
        assert len(bootstrap.tree_pids()) == 3  # supervisord, the default signal, the autoscaler
        bootstrap.proc.kill()  # no handler runs: supervisord's parent-death signal must stop the tree
        bootstrap.wait_exit()
        deadline = time.monotonic() + 30
        while bootstrap.tree_pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert bootstrap.tree_pids() == []
    finally:
        bootstrap.kill()
        shutil.rmtree(private_dir(bootstrap), ignore_errors=True)  # a killed bootstrap cannot remove it


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"CMAN_POOL": ""}, "$CMAN_POOL must name the pool to autoscale"),
        ({"CMAN_SCHEDULER": "yarn"}, "unknown scheduler 'yarn'"),
        ({"CMAN_SIGNAL_ALLOWED_UIDS": "root"}, "--allowed-uids: 'root' is not a uid"),
        ({"pool": "scaling_limits: {}\n"}, "scaling_limits.min_capacity: required key is missing"),
        ({"pool": LIMITS + "app_signals: {a: {name: S, branch_or_tag: a/b, period_minutes: 1}}"}, "a.branch_or_tag"),
        ({"key_file": "{not json"}, "expected JSON with accessKeyId and secretAccessKey"),
    ],
)
def test_bad_settings_fail_before_anything_starts(tmp_path, moto_server, signal_versions, change, message):
    config = tree_config(tmp_path, moto_server, signal_versions, versions=(), key_file=True)
    config.write_main(signal_block("WhoAmI", "v1"))
    config.write_pool({}, raw=change.get("pool"))
    if "key_file" in change:
        config.key_file.write_text(change["key_file"])
    env = {
        **os.environ,
        "CMAN_CLUSTER": "itest-cluster",
        "CMAN_POOL": config.pool,
        "CMAN_SCHEDULER": "simulated",
        "CMAN_ENV_CONFIG_PATH": str(config.main_path),
        **{k: v for k, v in change.items() if k.startswith("CMAN_")},
    }
    proc = subprocess.run(
        [sys.executable, "-m", "clusterman.batch.autoscaler_bootstrap"], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert message in proc.stderr
    assert "starting the tree" not in proc.stderr and "private directory" not in proc.stderr


# ---- the fetcher alone --------------------------------------------------------------------------


def fetch(tmp_path, config, version, signals_dir):
    env = {
        **os.environ,
        "CMAN_VERSIONS_TO_FETCH": f"v1 {version}",
        "CMAN_NUM_VERSIONS": "2",
        "CMAN_SIGNALS_BUCKET": config.bucket,
        "CMAN_SIGNALS_DIR": str(signals_dir),
        "CMAN_SIGNALS_CODENAME": CODENAME,
        "CMAN_ENV_CONFIG_PATH": str(config.main_path),
        "CMAN_PYTHON": sys.executable,
    }
    script = REPO_ROOT / "supervisord" / "fetch_clusterman_signal"
    return subprocess.run([str(script), "1"], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)


def bad_tarball(tmp_path, good: Path, kind: str) -> Path:
    """The good v1 tarball with one hostile entry added."""
    path = tmp_path / f"{kind}.tar.gz"
    with tarfile.open(good) as src, tarfile.open(path, "w:gz") as out:
        for m in src.getmembers():
            out.addfile(m, src.extractfile(m) if m.isfile() else None)
        evil = tarfile.TarInfo({"dotdot": "venv/../../escaped", "symlink": "venv/etc"}[kind])
        if kind == "symlink":
            evil.type, evil.linkname = tarfile.SYMTYPE, "/etc"
            out.addfile(evil)
        else:
            evil.size = 5
            out.addfile(evil, io.BytesIO(b"owned"))
    return path


def concatenated_gzip(path: Path, parts: list[tuple[bytes, int]]) -> Path:
    """A tar.gz of ``parts`` (bytes, times repeated), each compressed once and repeated as a gzip
    member of its own: a gzip stream may hold many, so gigabytes of tar take a second to make."""
    with path.open("wb") as out:
        for chunk, times in parts:
            compressed = gzip.compress(chunk, mtime=0)
            for _ in range(times):
                out.write(compressed)
    return path


def zeros_tarball(path: Path) -> Path:
    """One file of 1.9 GiB of zeros (about 2 MB compressed): the old limit of 2 GiB let it fill
    the pod's volume."""
    block = 64 << 20
    header = tarfile.TarInfo("venv/zeros")
    header.size = 30 * block
    return concatenated_gzip(path, [(header.tobuf(), 1), (bytes(block), 30), (bytes(1024), 1)])


def many_files_tarball(path: Path) -> Path:
    """300,000 empty files: the old fetcher took 57 s and 247 MB to unpack them."""
    headers = b"".join(tarfile.TarInfo(f"venv/f{n}").tobuf() for n in range(1000))
    return concatenated_gzip(path, [(headers, 300), (bytes(1024), 1)])


@pytest.mark.parametrize("kind", ["dotdot", "symlink", "checksum", "mislabelled", "zeros", "many-files", "crc"])
def test_the_fetcher_refuses_hostile_or_corrupt_tarballs(tmp_path, moto_server, signal_versions, kind):
    config = tree_config(tmp_path, moto_server, signal_versions, versions=(), key_file=True)
    config.write_main(signal_block("WhoAmI", "v1"))
    good = signal_versions.tarballs["v1"]
    if kind == "checksum":
        upload(moto_server.url, config.bucket, "bad", good)
        corrupt = bytearray(good.read_bytes())
        corrupt[len(corrupt) // 2] ^= 0xFF
        s3_client(moto_server.url).put_object(
            Bucket=config.bucket, Key=f"{CODENAME}/clusterman_signals_bad.tar.gz", Body=bytes(corrupt)
        )
        expected = "checksum mismatch"
    elif kind == "mislabelled":
        upload(moto_server.url, config.bucket, "bad", good)
        expected = "the tarball was built as version 'v1'"
    elif kind == "zeros":
        upload(moto_server.url, config.bucket, "bad", zeros_tarball(tmp_path / "zeros.tar.gz"))
        expected = "refused: the archive unpacks to more than 268435456 bytes"
    elif kind == "many-files":
        upload(moto_server.url, config.bucket, "bad", many_files_tarball(tmp_path / "many.tar.gz"))
        expected = "refused: the archive holds more than 20000 entries"
    elif kind == "crc":  # published with the checksum of its corrupt bytes: only the gzip CRC can tell
        corrupt = bytearray(good.read_bytes())
        corrupt[-8] ^= 0xFF
        (tmp_path / "crc.tar.gz").write_bytes(corrupt)
        upload(moto_server.url, config.bucket, "bad", tmp_path / "crc.tar.gz")
        expected = "not a readable tar.gz file: CRC check failed"
    else:
        upload(moto_server.url, config.bucket, "bad", bad_tarball(tmp_path, good, kind))
        expected = {"dotdot": "contains '..'", "symlink": "points to the absolute path '/etc'"}[kind]
    signals_dir = tmp_path / "work" / "signals"
    proc = fetch(tmp_path, config, "bad", signals_dir)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("fetch_clusterman_signal: signal version bad: ")
    assert expected in proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    assert not (tmp_path / "work" / "escaped").exists() and not (tmp_path / "escaped").exists()
    assert os.listdir(signals_dir) == []  # no version link, no half-unpacked directory


def test_the_fetcher_installs_a_runnable_version_and_reuses_it(tmp_path, moto_server, signal_versions):
    config = tree_config(tmp_path, moto_server, signal_versions, versions=("v2",), key_file=True)
    config.write_main(signal_block("WhoAmI", "v1"))
    signals_dir = tmp_path / "signals"
    first = fetch(tmp_path, config, "v2", signals_dir)
    assert first.returncode == 0, first.stderr
    link = signals_dir / "v2"
    assert link.is_symlink() and os.readlink(link).startswith(".v2-")
    python = link / "venv" / "bin" / "python"
    assert python.is_file() and not python.is_symlink()
    probe = "import clusterman_signals.itest_versions as m, sys; print(m.VERSION_CPUS, sys.prefix)"
    out = subprocess.run([str(python), "-I", "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "2.0" and Path(out[1]).resolve() == (link / "venv").resolve()
    installed = os.readlink(link)

    again = fetch(tmp_path, config, "v2", signals_dir)
    assert again.returncode == 0 and "already unpacked" in again.stderr
    assert os.readlink(link) == installed
    assert SECRET not in first.stderr + again.stderr


# ---- publishing -----------------------------------------------------------------------------------


def test_publish_builds_the_tagged_version_and_uploads_it_with_its_checksum(tmp_path, moto_server, signal_versions):
    config = tree_config(tmp_path, moto_server, signal_versions, versions=())
    config.write_main(signal_block("WhoAmI", "v1"))
    cli = [sys.executable, "-m", "clusterman.cli.main", "--env-config-path", str(config.main_path), "signal"]
    args = ["publish", "--repo", str(signal_versions.repo), "--codename", CODENAME]
    proc = subprocess.run([*cli, *args, "--version", "v1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    key = f"{CODENAME}/clusterman_signals_v1.tar.gz"
    assert f"published s3://{config.bucket}/{key}" in proc.stdout

    s3 = s3_client(moto_server.url)
    tarball = tmp_path / "downloaded.tar.gz"
    s3.download_file(config.bucket, key, str(tarball))
    checksum = s3.get_object(Bucket=config.bucket, Key=f"{key}.sha256")["Body"].read().decode()
    assert checksum == f"{sha256_of(tarball)}  clusterman_signals_v1.tar.gz\n"
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
        info = json.load(tar.extractfile("BUILD_INFO.json"))
        source = tar.extractfile("venv/lib/python3.11/site-packages/clusterman_signals/itest_versions/__init__.py")
        assert b"VERSION_CPUS = 1.0" in source.read()
    assert {n.split("/")[0] for n in names} == {"venv", "BUILD_INFO.json"}
    assert not any("activate" in n for n in names)  # scripts with the build path baked in are left out
    assert info["version"] == "v1" and len(info["source"]) == 40

    missing = subprocess.run([*cli, *args, "--version", "v7"], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1
    assert "no git tag or branch named 'v7'" in missing.stderr
