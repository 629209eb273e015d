"""The autoscaler's side of the signal wire protocol: framing, deadlines, reply validation.

Byte by byte (docs/protocol.md): after connecting, the client sends the init JSON object with no
length prefix. Each evaluation is then: ``>I`` length → the runner's 0x01 → the metrics JSON →
0x01 (or 0x02: malformed) → the reply JSON object, unframed, possibly split over several reads or
sharing a read with the ACK before it.
"""

from __future__ import annotations

import json
import math
import socket
import struct
import time
from collections.abc import Mapping
from typing import Any

from clusterman.errors import UserError
from clusterman.resources import NO_OPINION
from clusterman.resources import RESOURCE_NAMES
from clusterman.resources import Amount
from clusterman.resources import ResourceRequest

ACK = 0x01
NACK = 0x02
LENGTH = struct.Struct(">I")
MAX_PAYLOAD_BYTES = (1 << 32) - 1
MAX_REPLY_BYTES = 1 << 20


class SignalError(UserError):
    """A signal could not be reached or gave no usable answer; the message names the signal."""


class ProtocolError(SignalError):
    """The runner broke the protocol (a bad ACK, a malformed reply): reconnecting will not help."""


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.expires = time.monotonic() + seconds
        self.seconds = seconds

    def remaining(self) -> float:
        left = self.expires - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no answer within {self.seconds:g} s")
        return left


class Connection:
    """A connected stream socket with a read buffer, where every read has a deadline."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes, deadline: Deadline) -> None:
        self.sock.settimeout(deadline.remaining())
        self.sock.sendall(data)

    def _recv(self, deadline: Deadline) -> None:
        self.sock.settimeout(deadline.remaining())
        data = self.sock.recv(1 << 16)
        if not data:
            raise EOFError("the signal closed the connection")
        self.buffer += data

    def read_byte(self, deadline: Deadline) -> int:
        while not self.buffer:
            self._recv(deadline)
        byte = self.buffer[0]
        del self.buffer[0]
        return byte

    def read_json(self, deadline: Deadline, limit: int = MAX_REPLY_BYTES) -> Any:
        """Read until the buffer holds one complete JSON value; the reply has no length prefix."""
        decoder = json.JSONDecoder()
        while True:
            text = self.buffer.decode("utf-8", "surrogateescape").strip()
            # A JSON object or array is complete only when its last byte closes it: skip the
            # parse attempt otherwise, so a reply spread over many reads is not re-parsed each time.
            if text and text[-1] in "}]":
                try:
                    value, end = decoder.raw_decode(text)
                except json.JSONDecodeError:
                    pass
                else:
                    if text[end:].strip():
                        raise ProtocolError(f"unexpected bytes after the reply: {text[end : end + 40]!r}")
                    self.buffer.clear()
                    return value
            if len(self.buffer) > limit:
                raise ProtocolError(f"the reply is not complete JSON after {limit} bytes")
            self._recv(deadline)


def encode_metrics(metrics: Mapping[str, Any], timestamp: float) -> bytes:
    data = json.dumps({"metrics": metrics, "timestamp": timestamp}, separators=(",", ":"), allow_nan=False).encode()
    if len(data) > MAX_PAYLOAD_BYTES:
        raise SignalError(f"metrics payload of {len(data)} bytes does not fit the 4-byte length")
    return data


def check_ack(byte: int, stage: str) -> None:
    if byte == ACK:
        return
    if byte == NACK:
        raise ProtocolError(f"the signal refused the {stage} (0x02: malformed or unacceptable)")
    raise ProtocolError(f"expected ACK 0x01 after the {stage}, got 0x{byte:02x}")


def parse_reply(reply: Any) -> ResourceRequest:
    """``{"Resources": {...}}`` -> ResourceRequest; ``{"Error": ...}`` or anything odd -> an error."""
    if not isinstance(reply, dict):
        raise ProtocolError(f"the reply must be a JSON object, got {type(reply).__name__}")
    if "Error" in reply:
        raise SignalError(f"the signal failed: {reply['Error']}")
    if "Resources" not in reply:
        raise ProtocolError(f"the reply has no Resources (keys: {', '.join(map(str, reply)) or 'none'})")
    resources = reply["Resources"]
    if not isinstance(resources, dict):
        raise ProtocolError(f"Resources must be a JSON object, got {type(resources).__name__}")
    unknown = set(resources) - set(RESOURCE_NAMES)
    if unknown:
        raise ProtocolError(f"unknown resource(s) in the reply: {', '.join(sorted(map(str, unknown)))}")
    amounts: dict[str, Amount] = {}
    for name, value in resources.items():
        if value is None:
            amounts[name] = NO_OPINION
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProtocolError(f"{name} must be a number or null, got {value!r}")
        elif not math.isfinite(value) or value < 0:
            raise ProtocolError(f"{name} must be a finite number >= 0, got {value!r}")
        else:
            amounts[name] = float(value)
    return ResourceRequest(**amounts)
