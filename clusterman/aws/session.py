"""boto3 clients built from srv-configs' ``aws`` block, never from hidden globals.

Credentials come from ``aws.access_key_file`` when set (Clusterman's JSON file with
``accessKeyId`` and ``secretAccessKey``), else from boto3's usual chain (environment, profile,
instance role). ``aws.endpoint_url`` points every client at another endpoint, such as the embedded
moto server of the local stack. Credentials are never logged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from clusterman.core.config import AwsConfig
from clusterman.errors import UserError


class AwsCredentialsError(UserError, ValueError):
    pass


@dataclass(frozen=True)
class AwsSettings:
    region: str
    endpoint_url: str | None = None
    access_key_file: str | None = None

    @staticmethod
    def from_config(aws: AwsConfig, region: str | None = None) -> AwsSettings:
        return AwsSettings(region or aws.region, aws.endpoint_url, aws.access_key_file)


def read_access_key_file(path: str) -> tuple[str, str]:
    try:
        data = json.loads(Path(path).read_text())
        return str(data["accessKeyId"]), str(data["secretAccessKey"])
    except FileNotFoundError as e:
        raise AwsCredentialsError(f"{path}: AWS key file not found") from e
    except (ValueError, KeyError, TypeError) as e:
        raise AwsCredentialsError(f"{path}: expected JSON with accessKeyId and secretAccessKey") from e


def session(settings: AwsSettings) -> boto3.session.Session:
    if settings.access_key_file:
        key_id, secret = read_access_key_file(settings.access_key_file)
        return boto3.session.Session(
            aws_access_key_id=key_id, aws_secret_access_key=secret, region_name=settings.region
        )
    return boto3.session.Session(region_name=settings.region)


def client(settings: AwsSettings, service: str, **config: Any) -> Any:
    """A boto3 client; ``config`` goes to botocore's Config (e.g. retries, timeouts)."""
    retries = config.pop("retries", {"max_attempts": 5, "mode": "standard"})
    return session(settings).client(
        service, endpoint_url=settings.endpoint_url, config=Config(retries=retries, **config)
    )
