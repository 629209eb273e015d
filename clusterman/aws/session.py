"""boto3 clients built from srv-configs' ``aws`` block, never from hidden globals.

Credentials come from ``aws.access_key_file`` when set (Clusterman's JSON file with
``accessKeyId`` and ``secretAccessKey``), else from boto3's usual chain (environment, profile,
instance role). ``aws.endpoint_url`` points every client at another endpoint, such as the embedded
moto server of the local stack. Credentials are never logged.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError

from clusterman.config.files import read_regular_file
from clusterman.core.config import AwsConfig
from clusterman.errors import UserError

MAX_KEY_FILE_BYTES = 64 << 10  # two short strings in JSON


class AwsCredentialsError(UserError, ValueError):
    pass


class CallBudgetExceeded(BotoCoreError):
    """A call's attempts and retries together ran past its budget: botocore would go on retrying.

    A ``BotoCoreError``, so every caller handles it as it handles a timeout; botocore does not retry it.
    """

    fmt = "{url}: {why} within the call budget of {budget:g} s"


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
        data = json.loads(read_regular_file(path, MAX_KEY_FILE_BYTES))
        return str(data["accessKeyId"]), str(data["secretAccessKey"])
    except FileNotFoundError as e:
        raise AwsCredentialsError(f"{path}: AWS key file not found") from e
    except OSError as e:  # a directory or a FIFO in its place, unreadable: the caller keeps what runs
        raise AwsCredentialsError(f"{path}: cannot read the AWS key file: {e.strerror or e}") from e
    except (ValueError, KeyError, TypeError) as e:
        raise AwsCredentialsError(f"{path}: expected JSON with accessKeyId and secretAccessKey") from e


def session(settings: AwsSettings) -> boto3.session.Session:
    if settings.access_key_file:
        key_id, secret = read_access_key_file(settings.access_key_file)
        return boto3.session.Session(
            aws_access_key_id=key_id, aws_secret_access_key=secret, region_name=settings.region
        )
    return boto3.session.Session(region_name=settings.region)


def budget_config(timeout_seconds: float | None) -> dict[str, float]:
    """``client`` keywords for a call that may take ``timeout_seconds`` with all its retries: each
    attempt gets a third as botocore's connect and read timeouts (its default is 60 s each), so a call
    can still retry once or twice within the budget. None: botocore's defaults."""
    if timeout_seconds is None:
        return {}
    attempt = min(60.0, max(1.0, timeout_seconds / 3))
    return {"connect_timeout": attempt, "read_timeout": attempt, "call_budget_seconds": timeout_seconds}


def client(settings: AwsSettings, service: str, call_budget_seconds: float | None = None, **config: Any) -> Any:
    """A boto3 client; ``config`` goes to botocore's Config (e.g. retries, timeouts).

    ``call_budget_seconds`` bounds one call with all its retries. Botocore bounds each attempt
    (``read_timeout``), not their sum. Past the budget no further attempt is sent, and the call
    raises ``CallBudgetExceeded``, which botocore does not retry.
    """
    retries = config.pop("retries", {"max_attempts": 5, "mode": "standard"})
    # Clusterman's files may write one endpoint per service as http://moto-{svc}:5000
    endpoint = settings.endpoint_url.replace("{svc}", service) if settings.endpoint_url else None
    made = session(settings).client(service, endpoint_url=endpoint, config=Config(retries=retries, **config))
    if call_budget_seconds is not None:
        limit_calls(made, call_budget_seconds)
    return made


THROTTLED = frozenset(
    {"Throttling", "ThrottlingException", "ThrottledException", "RequestThrottled", "RequestThrottledException",
     "RequestLimitExceeded", "TooManyRequestsException", "SlowDown", "ProvisionedThroughputExceededException",
     "EC2ThrottledException", "LimitExceededException", "BandwidthLimitExceeded"}
)  # fmt: skip


def limit_calls(made: Any, budget_seconds: float, clock: Any = time.monotonic) -> None:
    """Start each call's clock before its first attempt and refuse to send an attempt past the budget.
    The error says what the attempts got: AWS throttling them is not AWS not answering."""
    started_key, answered_key = "clusterman_call_started", "clusterman_call_answered"

    def start(context: dict[str, Any], **_: Any) -> None:
        context[started_key] = clock()
        context.pop(answered_key, None)

    def note(request_dict: dict[str, Any], response: Any = None, **_: Any) -> None:
        code = response[1].get("Error", {}).get("Code") if response is not None else None
        if code:
            request_dict.setdefault("context", {})[answered_key] = str(code)

    def check(request: Any, **_: Any) -> None:
        context = request.context or {}
        started = context.get(started_key)
        if started is not None and clock() - started > budget_seconds:
            code = context.get(answered_key)
            if code is None:
                why = "no answer"
            elif code in THROTTLED:
                why = f"throttled ({code}) on every attempt"
            else:
                why = f"AWS answered {code} to every attempt"
            raise CallBudgetExceeded(url=request.url, why=why, budget=budget_seconds)

    made.meta.events.register("before-call", start)
    made.meta.events.register("needs-retry", note)
    made.meta.events.register("before-send", check)
