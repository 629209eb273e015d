"""The autoscaler's words for the signal wire: its errors and its resource type.

The protocol itself (framing, deadlines, checks) is ``clusterman_signals.wire``, shared with the
runner; this module turns its answers into ``ResourceRequest`` and its failures into
``SignalError``, the one-line user error the autoscaler and the CLI report.
"""

from __future__ import annotations

from typing import Any

from clusterman.core.resources import NO_OPINION
from clusterman.core.resources import ResourceRequest
from clusterman.errors import UserError
from clusterman_signals import wire


class SignalError(UserError):
    """A signal could not be reached or gave no usable answer; the message names the signal.
    ``traceback``: the signal's own, when its runner sent it (only to a client that asked)."""

    def __init__(self, message: str, traceback: str = "") -> None:
        super().__init__(message)
        self.traceback = traceback


class SignalUnanswered(SignalError):
    """The runner gave no answer: it refused or dropped the connection, or nobody listened. The
    tree restarts a runner that stays so (``tree/liveness.py``), as one that is silent."""


class SignalTimeout(SignalUnanswered):
    """The runner did not answer in time (stopped, hung in the signal's code)."""


class ProtocolError(SignalError):
    """The runner broke the protocol (a bad ACK, a malformed reply): reconnecting will not help."""


class AnswerRefused(SignalError):
    """A well-formed answer asks for more than any demand of the pool could be
    (``decision/answer_bound.py``): garbage, refused as a NaN is."""


def to_request(amounts: dict[str, float | None]) -> ResourceRequest:
    return ResourceRequest(**{name: NO_OPINION if v is None else v for name, v in amounts.items()})


def parse_reply(reply: Any) -> ResourceRequest:
    """``{"Resources": {...}}`` -> ResourceRequest; ``{"Error": ...}`` or anything odd -> an error."""
    try:
        return to_request(wire.check_reply(reply))
    except wire.ProtocolError as e:
        raise ProtocolError(str(e)) from e
    except wire.SignalFailed as e:
        raise SignalError(str(e), e.traceback) from e
    except wire.WireError as e:
        raise SignalError(str(e)) from e
