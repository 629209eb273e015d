import pytest

from clusterman.signals.artifacts import ArtifactError
from clusterman.signals.artifacts import ArtifactLocation
from clusterman.signals.artifacts import default_codename
from clusterman.signals.artifacts import install_dir_name
from clusterman.signals.artifacts import installed_copy
from clusterman.signals.artifacts import parse_checksum
from clusterman.signals.client import allowed_uids_from_env
from clusterman.signals.client import parse_uids

DIGEST = "ab" * 32


def test_keys_follow_clusterman_layout():
    location = ArtifactLocation("bucket", "jammy", "v1.2")
    assert location.tarball_key == "jammy/clusterman_signals_v1.2.tar.gz"
    assert location.checksum_key == "jammy/clusterman_signals_v1.2.tar.gz.sha256"
    assert location.url == "s3://bucket/jammy/clusterman_signals_v1.2.tar.gz"
    with pytest.raises(ValueError, match="not usable"):
        ArtifactLocation("bucket", "jammy", "../v1")


def test_checksum_files_in_sha256sum_formats():
    assert parse_checksum(f"{DIGEST}  clusterman_signals_v1.tar.gz\n", "s3://x") == DIGEST
    assert parse_checksum(f"{DIGEST.upper()} *clusterman_signals_v1.tar.gz", "s3://x") == DIGEST
    assert parse_checksum(DIGEST, "s3://x") == DIGEST
    with pytest.raises(ArtifactError, match="s3://x: expected"):
        parse_checksum("<Error>NoSuchKey</Error>", "s3://x")


def test_install_dirs_are_hidden_and_named_by_content():
    assert install_dir_name("v1", DIGEST) == ".v1-abababababababab"


def test_codename_from_env_then_os_release(tmp_path, monkeypatch):
    release = tmp_path / "os-release"
    release.write_text('NAME="Debian GNU/Linux"\nVERSION_CODENAME=bookworm\n')
    monkeypatch.delenv("CMAN_SIGNALS_CODENAME", raising=False)
    assert default_codename(release) == "bookworm"
    assert default_codename(tmp_path / "absent") == "linux"
    monkeypatch.setenv("CMAN_SIGNALS_CODENAME", "jammy")
    assert default_codename(release) == "jammy"


def test_allowed_uids():
    assert parse_uids("1000, 1001 1002") == {1000, 1001, 1002}
    with pytest.raises(ValueError, match="'root' is not a uid"):
        parse_uids("root")
    assert allowed_uids_from_env({"CMAN_SIGNAL_ALLOWED_UIDS": "4242"}) == {4242, __import__("os").getuid()}


def test_only_a_verified_install_counts_as_the_installed_copy(tmp_path):
    assert installed_copy(tmp_path, "v1") is None
    (tmp_path / ".v1-0123456789abcdef" / "venv").mkdir(parents=True)
    (tmp_path / "v1").symlink_to(".v1-0123456789abcdef")
    assert installed_copy(tmp_path, "v1") == (tmp_path / ".v1-0123456789abcdef", "0123456789abcdef")
    (tmp_path / "v2").symlink_to("/etc")  # not an install directory of ours
    assert installed_copy(tmp_path, "v2") is None
