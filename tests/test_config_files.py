"""Files someone else manages are read without trusting their type: one line, never a hang."""

from __future__ import annotations

import os

import pytest

from clusterman.aws.session import AwsCredentialsError
from clusterman.aws.session import read_access_key_file
from clusterman.config.files import read_regular_file
from clusterman.config.loader import read_yaml
from clusterman.core.config_schema import ConfigError


def test_a_regular_file_is_read_and_anything_else_refused_without_blocking(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"12345")
    assert read_regular_file(path, 5) == b"12345"
    with pytest.raises(OSError, match="larger than 4 bytes"):
        read_regular_file(path, 4)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: a plain open would block here for good
    with pytest.raises(OSError, match="not a regular file"):
        read_regular_file(fifo, 100)
    with pytest.raises(OSError, match="not a regular file"):
        read_regular_file("/dev/zero", 100)  # never ends
    with pytest.raises(IsADirectoryError):
        read_regular_file(tmp_path, 100)


def test_a_key_file_or_config_that_cannot_be_read_is_one_error_naming_it(tmp_path):
    key = tmp_path / "key.json"
    key.mkdir()
    with pytest.raises(AwsCredentialsError, match=f"{key}: cannot read the AWS key file: Is a directory"):
        read_access_key_file(str(key))
    pool = tmp_path / "pool.kubernetes"
    os.mkfifo(pool)
    with pytest.raises(ConfigError, match="cannot read: not a regular file"):
        read_yaml(pool)
