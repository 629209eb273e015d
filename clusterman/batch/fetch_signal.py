"""``fetch_clusterman_signal N``: download, verify and unpack signal version number N of the tree.

The bootstrap runs one per version (its children, dying with it) before it touches the running
tree. It reads its version from ``$CMAN_VERSIONS_TO_FETCH``, the bucket from
``$CMAN_SIGNALS_BUCKET``, the S3 endpoint, region and credentials from the main config
(``$CMAN_ENV_CONFIG_PATH``), and installs into ``$CMAN_SIGNALS_DIR``. It exits 0 when S3's copy
is installed and runs, ``EXIT_INSTALLED_COPY`` (3) when S3 could not give a verified copy but one
was already installed (the last line says why), and 1 with one line naming the version otherwise.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from pathlib import Path

from clusterman.aws.session import AwsCredentialsError
from clusterman.aws.session import AwsSettings
from clusterman.aws.session import client
from clusterman.batch.arguments import configure_logging
from clusterman.config.loader import default_env_config_path
from clusterman.config.loader import load_main_config
from clusterman.core.config_schema import ConfigError
from clusterman.signals.artifacts import ArtifactError
from clusterman.signals.artifacts import ArtifactLocation
from clusterman.signals.artifacts import default_codename
from clusterman.signals.artifacts import fetch_version
from clusterman.tree.environment import TreeEnvironmentError
from clusterman.tree.environment import version_to_fetch
from clusterman.tree.fetching import EXIT_INSTALLED_COPY
from clusterman.tree.parent_death import die_with_parent

PROG = "fetch_clusterman_signal"
CALL_SECONDS = 20.0  # one S3 call with its retries, until its answer begins


def fetch(n: int) -> tuple[str, bool]:
    """Install version number ``n``; return a one-line report and whether the installed copy was used."""
    env = os.environ
    version = version_to_fetch(env, n)
    try:
        for var in ("CMAN_SIGNALS_BUCKET", "CMAN_SIGNALS_DIR"):
            if not env.get(var):
                raise TreeEnvironmentError(f"${var} is not set")
        main = load_main_config(default_env_config_path())
        location = ArtifactLocation(env["CMAN_SIGNALS_BUCKET"], default_codename(), version)
        # Few, short retries, each call bounded: an S3 that accepts and never answers must cost
        # seconds, as one that refuses does. A read timeout bounds each read of a download, not
        # all of it.
        retries = {"max_attempts": 3, "mode": "standard"}
        s3 = client(
            AwsSettings.from_config(main.aws), "s3", call_budget_seconds=CALL_SECONDS, retries=retries,
            connect_timeout=3, read_timeout=5,
        )  # fmt: skip
        started = time.monotonic()
        fetched = fetch_version(s3, location, Path(env["CMAN_SIGNALS_DIR"]))
    except (ArtifactError, ConfigError, AwsCredentialsError, TreeEnvironmentError) as e:
        raise ArtifactError(f"signal version {version}: {e}") from e
    if fetched.fallback is not None:
        held = f"the installed copy (sha256 {fetched.digest}…)"
        return f"signal version {version}: using {held}: S3 gave no verified copy: {fetched.fallback}", True
    took = time.monotonic() - started
    return f"signal version {version}: {location.url} installed in {fetched.path} ({took:.2f} s)", False


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    die_with_parent(os.getppid(), signal.SIGKILL)  # a fetch nobody waits for is pointless
    configure_logging("INFO", prefix=f"{PROG} | ")
    for noisy in ("botocore", "staticconf"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if len(args) != 1 or not args[0].isdigit():
        print(f"usage: {PROG} PROCESS_NUMBER", file=sys.stderr)
        return 2
    try:
        report, installed_copy = fetch(int(args[0]))
    except (ArtifactError, TreeEnvironmentError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    print(f"{PROG}: {report}", file=sys.stderr)
    return EXIT_INSTALLED_COPY if installed_copy else 0


if __name__ == "__main__":
    sys.exit(main())
