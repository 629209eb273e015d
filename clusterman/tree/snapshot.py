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

import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from clusterman.core.config import MainConfig
from clusterman.core.config import PoolIdentity

KEY_FILE = "aws-access-key.json"


def _yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_bytes())
    return data if isinstance(data, dict) else {}


def take_snapshot(main: MainConfig, main_path: Path, pool_path: Path, identity: PoolIdentity, dest: Path) -> Path:
    """Copy the validated configuration into ``dest`` (made 0700); return the copy of the main file."""
    dest.mkdir(mode=0o700, parents=True, exist_ok=False)
    raw = _yaml(main_path)
    clusters = dest / "clusters"
    raw["cluster_config_directory"] = str(clusters)
    raw["state_directory"] = main.state_directory  # absolute already: the real state, not a copy
    if main.aws.access_key_file:
        key = dest / KEY_FILE
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out, open(main.aws.access_key_file, "rb") as src:
            shutil.copyfileobj(src, out)
        raw.setdefault("aws", {})["access_key_file"] = str(key)
    pool = _yaml(pool_path)
    trace = (pool.get("simulation") or {}).get("trace")
    if isinstance(trace, dict) and isinstance(trace.get("file"), str):
        trace["file"] = str(pool_path.parent / trace["file"])  # an absolute path stays as it is
    pool_copy = clusters / identity.cluster / pool_path.name
    pool_copy.parent.mkdir(parents=True)
    pool_copy.write_text(yaml.safe_dump(pool, sort_keys=False))
    main_copy = dest / main_path.name
    main_copy.write_text(yaml.safe_dump(raw, sort_keys=False))
    return main_copy
