"""AWS calls for resource groups: errors that name the group, and writes that never apply twice.

botocore's own retry configuration (``clusterman.aws.session.client``) absorbs transient errors
and throttling. What it cannot know is whether a request that finally failed was applied anyway
(throttled *after* reaching the service, a timeout, a server error). Such a failure is
*ambiguous*: before trying again, the group is read back, and nothing is sent if the change is
already there. Every write of a resource group is an absolute value, so a retry can never add a
change twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from botocore.exceptions import BotoCoreError
from botocore.exceptions import ClientError
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.exceptions import HTTPClientError
from botocore.parsers import ResponseParserError

from clusterman.aws.session import CallBudgetExceeded
from clusterman.cloud.resource_group import ResourceGroupError

log = logging.getLogger(__name__)

THROTTLING_CODES: Final = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "SlowDown",
        "EC2ThrottledException",
        "PriorRequestNotComplete",
    }
)
SERVER_ERROR_CODES: Final = frozenset(
    {
        "InternalError",
        "InternalFailure",
        "ServiceUnavailable",
        "Unavailable",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)


def error_code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", "Unknown"))


def is_ambiguous(e: BaseException) -> bool:
    """Whether the service may have applied the request that raised ``e``."""
    if isinstance(e, ClientError):
        status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        code = error_code(e)
        return code in THROTTLING_CODES or code in SERVER_ERROR_CODES or status >= 500
    # a call past its budget sent at least one attempt (the budget stops the next one), which may
    # have landed while its answer was late
    return isinstance(e, (BotoConnectionError, HTTPClientError, ResponseParserError, CallBudgetExceeded))


def explain(e: BaseException) -> str:
    if isinstance(e, ClientError):
        message = e.response.get("Error", {}).get("Message", "")
        return f"{error_code(e)}: {message}" if message else error_code(e)
    return f"{type(e).__name__}: {e}"


@contextmanager
def cloud_call(label: str, what: str) -> Iterator[None]:
    """Turn botocore's errors into a ``ResourceGroupError`` that names the group and the call."""
    try:
        yield
    except (ClientError, BotoCoreError, ResponseParserError) as e:
        raise ResourceGroupError(label, f"{what} failed: {explain(e)}", ambiguous=is_ambiguous(e)) from e


def write_absolute(
    label: str,
    what: str,
    wanted: float,
    write: Callable[[], None],
    read_back: Callable[[], float],
    attempts: int = 3,
    sleep: Callable[[float], None] = time.sleep,
    backoff_seconds: float = 1.0,
) -> None:
    """Send an absolute value until the group holds it; after an ambiguous failure, read back first.

    ``write`` raises ``ResourceGroupError`` (via ``cloud_call``); a clear refusal is raised at once.
    """
    for attempt in range(1, attempts + 1):
        try:
            write()
            return
        except ResourceGroupError as e:
            if not e.ambiguous:
                raise
            failure = e
        current = read_back()
        if current == wanted:
            log.info("%s: %s was applied despite the error (%s)", label, what, failure.problem)
            return
        if attempt == attempts or isinstance(failure.__cause__, CallBudgetExceeded):  # no time for another
            raise ResourceGroupError(
                label,
                f"{what} to {wanted:g} did not take after {attempt} attempt{'s' * (attempt > 1)} (still {current:g}): "
                f"{failure.problem}",
                ambiguous=True,
            )
        log.warning("%s: %s failed (%s); still %g, trying again", label, what, failure.problem, current)
        sleep(backoff_seconds * attempt)
