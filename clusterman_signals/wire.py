"""The runner's side of the signal wire protocol (docs/protocol.md has it byte by byte).

Kept free of ``clusterman`` imports: this module ships inside every signal virtualenv.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from collections.abc import Iterable
from typing import Any

ACK = b"\x01"
NACK = b"\x02"
LENGTH = struct.Struct(">I")  # 4-byte big-endian unsigned length before each metrics payload
MAX_INIT_BYTES = 1 << 20  # the unframed init object; anything larger is not an init message
DEFAULT_MAX_PAYLOAD_BYTES = 1 << 30


def socket_name(namespace: str, signal_name: str, app: str) -> str:
    """The abstract socket address: a leading NUL, then ``{namespace}-{signal_name}-{app}-socket``."""
    return f"\0{namespace}-{signal_name}-{app}-socket"


class PeerRefused(Exception):
    pass


def peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def check_peer(sock: socket.socket, allowed_uids: Iterable[int]) -> None:
    """Abstract sockets have no file permissions, so the kernel's peer credentials stand in."""
    uid = peer_uid(sock)
    if uid not in set(allowed_uids):
        raise PeerRefused(f"peer uid {uid} is not allowed")


def allowed_uids_from_env(extra: str | None = None) -> set[int]:
    """Our own uid, plus any in ``extra`` or $CMAN_SIGNAL_ALLOWED_UIDS (comma or space separated)."""
    uids = {os.getuid()}
    for text in (extra, os.environ.get("CMAN_SIGNAL_ALLOWED_UIDS")):
        for part in (text or "").replace(",", " ").split():
            uids.add(int(part))
    return uids


class Closed(Exception):
    """The peer closed the connection (cleanly, between messages, or in the middle of one)."""


class BufferedSocket:
    """Reads exact byte counts or one JSON value from a stream socket, keeping what is left over.

    The init message is not framed and may arrive in the same read as the length after it, so a
    JSON value is parsed from the buffer and whatever follows it is kept for the next read.
    """

    def __init__(self, sock: socket.socket, chunk: int = 1 << 16) -> None:
        self.sock = sock
        self.chunk = chunk
        self.buffer = bytearray()

    def _fill(self) -> None:
        data = self.sock.recv(self.chunk)
        if not data:
            raise Closed("connection closed by peer")
        self.buffer += data

    def read_exact(self, n: int) -> bytearray:
        if len(self.buffer) >= n:
            out = self.buffer[:n]
            del self.buffer[:n]
            return out
        out = bytearray(n)
        view = memoryview(out)
        have = len(self.buffer)
        view[:have] = self.buffer
        self.buffer.clear()
        while have < n:
            got = self.sock.recv_into(view[have:], min(n - have, 1 << 22))
            if not got:
                raise Closed(f"connection closed after {have} of {n} bytes")
            have += got
        return out

    def read_json_value(self, limit: int = MAX_INIT_BYTES) -> Any:
        decoder = json.JSONDecoder()
        while True:
            # Bytes after the value (the next length prefix) need not be UTF-8: surrogateescape
            # keeps them decodable and lets us count exactly how many bytes the value used.
            text = bytes(self.buffer).decode("utf-8", "surrogateescape")
            start = len(text) - len(text.lstrip())
            if start < len(text):
                try:
                    value, end = decoder.raw_decode(text, start)
                except json.JSONDecodeError:
                    pass
                else:
                    used = len(text[:end].encode("utf-8", "surrogateescape"))
                    del self.buffer[:used]
                    return value
            if len(self.buffer) > limit:
                raise ValueError(f"no complete JSON value in the first {limit} bytes")
            self._fill()
