"""Signal versions in S3: publish a built virtualenv, and fetch, verify and install one.

Objects, per version (Clusterman's layout; ``codename`` is the OS release the venv was built on)::

    s3://{bucket}/{codename}/clusterman_signals_{version}.tar.gz
    s3://{bucket}/{codename}/clusterman_signals_{version}.tar.gz.sha256   ("<hex>  <file name>", as sha256sum)

Installed, per version, under a signals directory::

    .{version}-{sha256[:16]}/   the unpacked tarball (venv/, BUILD_INFO.json); complete once it exists
    {version} -> .{version}-…   a symbolic link, swapped atomically to the newest install

A directory for the same checksum is reused without downloading, so restarting the tree is cheap
while a moved branch (new checksum) is fetched again. Credentials are never logged: messages
name the bucket, the key and the endpoint only.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from boto3.exceptions import Boto3Error
from botocore.exceptions import BotoCoreError
from botocore.exceptions import ClientError

from clusterman.errors import UserError
from clusterman.signals.safe_extract import DEFAULT_MAX_BYTES
from clusterman.signals.safe_extract import UnsafeArchive
from clusterman.signals.safe_extract import extract
from clusterman.signals.signal_venv import TOP_LEVEL
from clusterman.signals.signal_venv import BuildError
from clusterman.signals.signal_venv import BuildInfo
from clusterman.signals.signal_venv import build_venv
from clusterman.signals.signal_venv import check_runs
from clusterman.signals.signal_venv import check_sdk
from clusterman.signals.signal_venv import export_git_ref
from clusterman.signals.signal_venv import interpreter_version
from clusterman.signals.signal_venv import pack
from clusterman.signals.specs import check_version

log = logging.getLogger(__name__)

CHUNK = 1 << 20
MAX_TARBALL_BYTES = DEFAULT_MAX_BYTES + (DEFAULT_MAX_BYTES >> 4)  # what unpacks within the limit, and a margin
DIGEST_PREFIX = 16  # hex digits of the sha256 in an install directory's name
SHA256_LINE = re.compile(r"([0-9a-fA-F]{64})(?:\s+\*?(\S.*))?")


class ArtifactError(UserError):
    """A version could not be published or fetched; the message names the object or the step."""


def default_codename(os_release: Path = Path("/etc/os-release")) -> str:
    """The OS release a venv is tied to: $CMAN_SIGNALS_CODENAME, else VERSION_CODENAME from os-release."""
    from_env = os.environ.get("CMAN_SIGNALS_CODENAME")
    if from_env:
        return from_env
    try:
        for line in os_release.read_text().splitlines():
            key, _, value = line.partition("=")
            if key == "VERSION_CODENAME" and value.strip('"'):
                return value.strip('"')
    except OSError:
        pass
    return "linux"


@dataclass(frozen=True)
class ArtifactLocation:
    bucket: str
    codename: str
    version: str

    def __post_init__(self) -> None:
        check_version(self.version)

    @property
    def file_name(self) -> str:
        return f"clusterman_signals_{self.version}.tar.gz"

    @property
    def tarball_key(self) -> str:
        return f"{self.codename}/{self.file_name}"

    @property
    def checksum_key(self) -> str:
        return f"{self.tarball_key}.sha256"

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.tarball_key}"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def parse_checksum(text: str, source: str) -> str:
    match = SHA256_LINE.fullmatch(text.strip())
    if not match:
        raise ArtifactError(f"{source}: expected '<sha256 hex>  <file name>', got {text.strip()[:80]!r}")
    return match.group(1).lower()


def _describe(e: Exception) -> str:
    if isinstance(e, ClientError):
        error = e.response.get("Error", {})
        return f"{error.get('Code', 'error')}: {error.get('Message', '')}".rstrip(": ")
    return str(e)


# ---- publishing -------------------------------------------------------------------------------


def build_artifact(
    repo: Path, version: str, out_dir: Path, worktree: bool = False, wheelhouse: Path | None = None
) -> Path:
    """Build ``clusterman_signals_{version}.tar.gz`` in ``out_dir`` from the git tag or branch
    ``version`` of ``repo`` or, with ``worktree``, from the files on disk; return its path.
    The signals' pinned requirements come from ``wheelhouse`` alone when it is given."""
    check_version(version)
    with tempfile.TemporaryDirectory(prefix="clusterman-build-") as tmp:
        work = Path(tmp)
        if worktree:
            source, origin = Path(repo), "worktree"
        else:
            source = work / "source"
            source.mkdir()
            origin = export_git_ref(Path(repo), version, source)
        root = work / "root"
        root.mkdir()
        check_sdk(source, f"{repo} ({'the files on disk' if worktree else version})")
        build_venv(source, root, BuildInfo(version, origin, interpreter_version()), wheelhouse=wheelhouse)
        tarball = out_dir / f"clusterman_signals_{version}.tar.gz"
        pack(root, tarball)
    return tarball


def check_bucket(s3: Any, bucket: str) -> None:
    """Before a build: a bucket that is not there (or not ours) is said at once, not after it."""
    try:
        s3.head_bucket(Bucket=bucket)
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "")
        if code in ("404", "NoSuchBucket", "NotFound"):
            raise ArtifactError(f"bucket {bucket!r} does not exist: create it, or give --bucket") from e
        raise ArtifactError(f"bucket {bucket!r}: {_describe(e)}") from e
    except BotoCoreError as e:
        raise ArtifactError(f"bucket {bucket!r}: {e}") from e


def upload_artifact(s3: Any, location: ArtifactLocation, tarball: Path) -> str:
    """Upload the tarball, then its checksum (a reader that finds the checksum finds its tarball)."""
    digest = sha256_of(tarball)
    try:
        s3.upload_file(str(tarball), location.bucket, location.tarball_key)
        body = f"{digest}  {location.file_name}\n".encode()
        s3.put_object(Bucket=location.bucket, Key=location.checksum_key, Body=body)
    except (ClientError, BotoCoreError, Boto3Error, OSError) as e:  # boto3's upload_file raises S3UploadFailedError
        raise ArtifactError(f"uploading {location.url}: {_describe(e)}") from e
    return digest


# ---- fetching ---------------------------------------------------------------------------------


def _get(s3: Any, location: ArtifactLocation, key: str) -> Any:
    try:
        return s3.get_object(Bucket=location.bucket, Key=key)["Body"]
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "")
        if code in ("NoSuchKey", "404", "NotFound"):
            raise ArtifactError(f"s3://{location.bucket}/{key} not found (was this version published?)") from e
        if code == "NoSuchBucket":
            raise ArtifactError(f"bucket {location.bucket!r} does not exist") from e
        raise ArtifactError(f"s3://{location.bucket}/{key}: {_describe(e)}") from e
    except BotoCoreError as e:
        raise ArtifactError(f"s3://{location.bucket}/{key}: {e}") from e


def expected_checksum(s3: Any, location: ArtifactLocation) -> str:
    body = _get(s3, location, location.checksum_key)
    try:
        text = body.read(4096).decode("ascii", errors="replace")
    except (BotoCoreError, OSError) as e:
        raise ArtifactError(f"s3://{location.bucket}/{location.checksum_key}: {e}") from e
    return parse_checksum(text, f"s3://{location.bucket}/{location.checksum_key}")


def download_verified(
    s3: Any, location: ArtifactLocation, expected: str, path: Path, max_bytes: int = MAX_TARBALL_BYTES
) -> None:
    """Stream the tarball to ``path``, hashing as it comes; a mismatch is an error, never a warning,
    and so is a tarball larger than ``max_bytes`` (it could not unpack within the limit)."""
    body = _get(s3, location, location.tarball_key)
    digest = hashlib.sha256()
    size = 0
    try:
        with path.open("wb") as out:
            for chunk in body.iter_chunks(CHUNK):
                size += len(chunk)
                if size > max_bytes:
                    raise ArtifactError(f"{location.url}: refused: larger than {max_bytes} bytes")
                digest.update(chunk)
                out.write(chunk)
    except (BotoCoreError, OSError) as e:
        raise ArtifactError(f"downloading {location.url}: {e}") from e
    if digest.hexdigest() != expected:
        raise ArtifactError(
            f"{location.url}: checksum mismatch (expected {expected[:16]}…, got {digest.hexdigest()[:16]}…)"
        )


def install_dir_name(version: str, digest: str) -> str:
    return f".{version}-{digest[:DIGEST_PREFIX]}"


@dataclass(frozen=True)
class Fetched:
    """Where a version is installed; ``fallback`` says why S3's copy was not used (None when it was)."""

    path: Path
    digest: str
    fallback: str | None = None


def installed_copy(signals_dir: Path, version: str) -> tuple[Path, str] | None:
    """The verified install ``signals_dir/{version}`` points to, and its checksum prefix, if any.

    Install directories exist only once their tarball was verified and its interpreter ran, so a
    link to one is a copy that was good when it was fetched.
    """
    link = signals_dir / version
    try:
        target = os.readlink(link)
    except OSError:
        return None
    prefix = f".{version}-"
    installed = signals_dir / target
    if not target.startswith(prefix) or "/" in target or not (installed / "venv").is_dir():
        return None
    return installed, target[len(prefix) :]


def fetch_version(s3: Any, location: ArtifactLocation, signals_dir: Path) -> Fetched:
    """Make ``signals_dir/{version}`` the verified, unpacked, runnable tarball.

    When S3 cannot give a verified copy (unreachable, a checksum that does not match its tarball,
    a tarball that does not run) and a verified copy of the version is already installed, that
    copy is used and ``fallback`` says why: a start-up must not depend on S3 for a version we hold.
    """
    signals_dir.mkdir(parents=True, exist_ok=True)
    try:
        digest = expected_checksum(s3, location)
        installed = signals_dir / install_dir_name(location.version, digest)
        if installed.is_dir():
            log.info("%s: sha256 %s… already unpacked in %s", location.url, digest[:16], installed)
        else:
            _download_and_unpack(s3, location, digest, signals_dir, installed)
    except ArtifactError as e:
        held = installed_copy(signals_dir, location.version)
        if held is None:
            raise
        log.warning("%s; using the installed copy %s (sha256 %s…)", e, held[0], held[1])
        return Fetched(signals_dir / location.version, held[1], fallback=str(e))
    link = signals_dir / location.version
    staged = signals_dir / f".{location.version}.link-{os.getpid()}"
    staged.unlink(missing_ok=True)
    staged.symlink_to(installed.name)
    try:
        os.replace(staged, link)  # atomic: readers see the old install or the new one, never neither
    except OSError as e:
        staged.unlink(missing_ok=True)
        raise ArtifactError(f"cannot install {link}: {e.strerror}") from e
    return Fetched(link, digest)


def _download_and_unpack(s3: Any, location: ArtifactLocation, digest: str, signals_dir: Path, installed: Path) -> None:
    partial = Path(tempfile.mkdtemp(prefix=f".{location.version}.partial-", dir=signals_dir))
    try:
        tarball = partial / location.file_name
        download_verified(s3, location, digest, tarball)
        root = partial / "root"
        root.mkdir()
        try:
            extract(tarball, root, TOP_LEVEL)
        except UnsafeArchive as e:
            raise ArtifactError(f"{location.url}: refused: {e}") from e
        except OSError as e:  # a full disk: what was written goes with the partial directory
            raise ArtifactError(f"{location.url}: cannot unpack into {signals_dir}: {e.strerror or e}") from e
        tarball.unlink()
        try:
            info = BuildInfo.read(root)
            if info.version != location.version:
                raise BuildError(f"the tarball was built as version {info.version!r}")
            check_runs(root)
        except BuildError as e:
            raise ArtifactError(f"{location.url}: {e}") from e
        try:
            root.rename(installed)
        except OSError as e:
            if not installed.is_dir():  # else another fetcher installed the same checksum first
                raise ArtifactError(f"cannot install {installed}: {e.strerror}") from e
    finally:
        shutil.rmtree(partial, ignore_errors=True)
