"""``fetch_clusterman_signal N``: download, verify and unpack signal version number N of the tree.

One process of supervisord's ``fetch_signals`` group. It reads its version from
``$CMAN_VERSIONS_TO_FETCH``, the bucket from ``$CMAN_SIGNALS_BUCKET``, the S3 endpoint, region and
credentials from the main config (``$CMAN_ENV_CONFIG_PATH``), and installs into
``$CMAN_SIGNALS_DIR``. It exits 0 only when the version is installed and runs; any failure exits
1 with one line naming the version, which the bootstrap repeats.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

from clusterman.aws.session import AwsCredentialsError
from clusterman.aws.session import AwsSettings
from clusterman.aws.session import client
from clusterman.config.loader import default_env_config_path
from clusterman.config.loader import load_main_config
from clusterman.config.schema import ConfigError
from clusterman.signals.artifacts import ArtifactError
from clusterman.signals.artifacts import ArtifactLocation
from clusterman.signals.artifacts import default_codename
from clusterman.signals.artifacts import fetch_version
from clusterman.tree.environment import TreeEnvironmentError
from clusterman.tree.environment import version_to_fetch

PROG = "fetch_clusterman_signal"


def fetch(n: int) -> str:
    """Install version number ``n``; return a one-line report."""
    env = os.environ
    version = version_to_fetch(env, n)
    try:
        for var in ("CMAN_SIGNALS_BUCKET", "CMAN_SIGNALS_DIR"):
            if not env.get(var):
                raise TreeEnvironmentError(f"${var} is not set")
        main = load_main_config(default_env_config_path())
        location = ArtifactLocation(env["CMAN_SIGNALS_BUCKET"], default_codename(), version)
        s3 = client(AwsSettings.from_config(main.aws), "s3")
        started = time.monotonic()
        path = fetch_version(s3, location, Path(env["CMAN_SIGNALS_DIR"]))
    except (ArtifactError, ConfigError, AwsCredentialsError, TreeEnvironmentError) as e:
        raise ArtifactError(f"signal version {version}: {e}") from e
    return f"signal version {version}: {location.url} installed in {path} ({time.monotonic() - started:.2f} s)"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=f"{PROG} %(levelname)s %(message)s")
    for noisy in ("botocore", "staticconf"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if len(args) != 1 or not args[0].isdigit():
        print(f"usage: {PROG} PROCESS_NUMBER", file=sys.stderr)
        return 2
    try:
        print(fetch(int(args[0])), file=sys.stderr)
    except (ArtifactError, TreeEnvironmentError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
