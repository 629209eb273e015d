"""The last good configuration, copied where no later edit can reach it.

The tree's programs are restarted by supervisord at any time (a crash, the heartbeat watch); each
restart reads its configuration again. So they must not read the live srv-configs, which may
have become invalid since the bootstrap accepted them: the bootstrap copies the main file, the
pool file and the AWS key file into its private directory once they validate, and points the
programs at the copy. Paths the files give relative to their own location (the cluster and
state directories, a simulated trace) are made absolute, so the copy means the same thing; the
state directory stays the real one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from clusterman.config.loader import read_pool_file
from clusterman.config.loader import read_yaml
from clusterman.core.config import MainConfig
from clusterman.core.config import PoolIdentity

KEY_FILE = "aws-access-key.json"


def take_snapshot(main: MainConfig, main_path: Path, pool_path: Path, identity: PoolIdentity, dest: Path) -> Path:
    """Copy the validated configuration into ``dest`` (made 0700); return the copy of the main file."""
    dest.mkdir(mode=0o700, parents=True, exist_ok=False)
    raw = read_yaml(main_path)  # strict, as when it was validated
    clusters = dest / "clusters"
    raw["cluster_config_directory"] = str(clusters)
    raw["state_directory"] = main.state_directory  # absolute already: the real state, not a copy
    if main.aws.access_key_file:
        key = dest / KEY_FILE
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out, open(main.aws.access_key_file, "rb") as src:
            shutil.copyfileobj(src, out)
        raw.setdefault("aws", {})["access_key_file"] = str(key)
    pool = read_pool_file(pool_path)
    pool_copy = clusters / identity.cluster / pool_path.name
    pool_copy.parent.mkdir(parents=True)
    pool_copy.write_text(yaml.safe_dump(pool, sort_keys=False))
    main_copy = dest / main_path.name
    main_copy.write_text(yaml.safe_dump(raw, sort_keys=False))
    return main_copy


# The last good configuration, kept across restarts of the bootstrap.
#
# The in-memory rollback dies with the bootstrap: restarted (a crash, a node drain, a rollout)
# in front of a bad file, it would exit 1 and leave the pool without an autoscaler. So the
# configuration the autoscaler finished a run under is also copied to a directory that outlives
# the process (``--last-good-dir``; on Kubernetes an ``emptyDir`` survives container restarts),
# one per pool and per main-file path, so two deployments (or two test runs) never read each
# other's. ``current`` is a symlink replaced atomically, pointing at one ``snap-<ns>`` copy.

LAST_GOOD_RECORD = "last-good.json"


class LastGoodError(Exception):
    """The kept configuration cannot be used; the message names the directory and why."""


@dataclass(frozen=True)
class LastGood:
    main_path: Path  # the kept copy of the main file
    baseline: tuple[tuple[str, str], ...]  # the live files it was accepted from, with their digests (watch.py)
    accepted_at: float  # Unix seconds: when the autoscaler was first seen finishing a run under it


def last_good_home(base: Path, env_config_path: Path, identity: PoolIdentity) -> Path:
    """Where one deployment keeps its last good configuration: per main file and pool."""
    digest = hashlib.sha256(str(env_config_path).encode()).hexdigest()[:12]
    return base / f"{identity.cluster}.{identity.pool}.{identity.scheduler.value}-{digest}"


def keep_last_good(
    main: MainConfig,
    main_copy: Path,
    pool_copy: Path,
    identity: PoolIdentity,
    baseline: Sequence[tuple[str, str]],
    accepted_at: float,
    home: Path,
) -> Path:
    """Copy a snapshot (``main_copy``, ``pool_copy``) under ``home`` and make it ``current``."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    _check_private(home)
    dest = home / f"snap-{time.time_ns()}"
    kept = take_snapshot(main, main_copy, pool_copy, identity, dest)
    record = {"main": kept.name, "baseline": [list(p) for p in baseline], "accepted_at": accepted_at}
    (dest / LAST_GOOD_RECORD).write_text(json.dumps(record))
    link = home / f".current-{dest.name}"
    link.symlink_to(dest.name)
    os.replace(link, home / "current")
    for old in home.glob("snap-*"):
        if old != dest:
            shutil.rmtree(old, ignore_errors=True)
    return dest


def read_last_good(home: Path) -> LastGood | None:
    """The kept configuration; None when there is none; LastGoodError when it cannot be trusted."""
    current = home / "current"
    if not current.is_symlink():
        return None
    try:
        _check_private(home)
        dest = home / os.readlink(current)
        record = json.loads((dest / LAST_GOOD_RECORD).read_text())
        main_path = dest / str(record["main"])
        baseline = tuple((str(path), str(digest)) for path, digest in record["baseline"])
        accepted_at = float(record["accepted_at"])
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise LastGoodError(f"{current}: the last good configuration cannot be read: {e}") from e
    if dest.parent != home or not main_path.is_file():
        raise LastGoodError(f"{current}: the last good configuration is incomplete")
    return LastGood(main_path, baseline, accepted_at)


def _check_private(home: Path) -> None:
    """Refuse a directory someone else could have written: it would choose our configuration."""
    st = home.stat()
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise LastGoodError(f"{home}: not ours or writable by others (mode {st.st_mode & 0o777:o}): not used")
