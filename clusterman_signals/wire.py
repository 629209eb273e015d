"""The signal wire protocol, both sides (docs/protocol.md has it byte by byte).

One implementation for the runner (``clusterman_signals.run``) and the autoscaler's client
(``clusterman.signals.client``): socket names, peer credentials, framing, deadlines, the strict
JSON reader and the reply's checks. Standard library only: this module ships inside every signal
virtualenv, and imports nothing from ``clusterman``.
"""

from __future__ import annotations

import errno
import gc
import json
import math
import os
import select
import socket
import struct
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from contextlib import contextmanager
from typing import Any
from typing import Protocol

ACK = b"\x01"
NACK = b"\x02"
LENGTH = struct.Struct(">I")  # 4-byte big-endian unsigned length before each metrics payload
MAX_PAYLOAD_BYTES = 1 << 30  # the runner refuses longer payloads (0x02 after the length)
DEFAULT_MAX_PAYLOAD_BYTES = MAX_PAYLOAD_BYTES
MAX_INIT_BYTES = 1 << 20  # the unframed init object; anything larger is not an init message
MAX_REPLY_BYTES = 1 << 20
RESOURCE_NAMES = ("cpus", "mem", "disk", "gpus")

SOCKET_PREFIX_ENV = "CMAN_SIGNAL_SOCKET_PREFIX"
ALLOWED_UIDS_ENV = "CMAN_SIGNAL_ALLOWED_UIDS"
MAX_SOCKET_NAME_BYTES = 107  # sun_path is 108 bytes; the leading NUL takes one


# A client's init may ask for the traceback of a signal's failure (``"traceback": true``); the
# runner then adds it to its Error replies under "Traceback". Deployed clients ask for nothing.
TRACEBACK_INIT_KEY = "traceback"
TRACEBACK_REPLY_KEY = "Traceback"


class WireError(Exception):
    """The peer could not be reached or did not answer as the protocol says."""


class ProtocolError(WireError):
    """The peer broke the protocol (a bad ACK, a malformed message): reconnecting will not help."""


class Closed(WireError, EOFError):
    """The peer closed the connection (cleanly, between messages, or in the middle of one)."""


class PeerRefused(WireError):
    """The process at the other end runs as a uid we do not allow."""


class AddressError(WireError, ValueError):
    """A socket name that cannot be used (bad prefix, too long)."""


class SignalFailed(WireError):
    """The runner answered ``{"Error": ...}``: the signal's own failure, with its traceback when
    the runner sent one (``tracebacks.REPLY_KEY``, for a client that asked)."""

    def __init__(self, message: str, traceback: str = "") -> None:
        super().__init__(message)
        self.traceback = traceback


# --- addresses and peers --------------------------------------------------------------------


def socket_prefix(environ: Mapping[str, str] = os.environ) -> str:
    """$CMAN_SIGNAL_SOCKET_PREFIX: empty (Clusterman's exact names) unless a local stack sets one."""
    prefix = environ.get(SOCKET_PREFIX_ENV, "")
    if "\0" in prefix or "/" in prefix:
        raise AddressError(f"${SOCKET_PREFIX_ENV}={prefix!r}: must not contain NUL or '/'")
    return prefix


def socket_name(namespace: str, signal_name: str, app: str, prefix: str | None = None) -> str:
    """The abstract address ``\\0{prefix}{namespace}-{signal_name}-{app}-socket``.

    ``prefix=None`` reads $CMAN_SIGNAL_SOCKET_PREFIX now, so that the runner, the autoscaler and
    ``signal evaluate`` started in the same environment agree without passing it around.
    """
    if prefix is None:
        prefix = socket_prefix()
    name = f"\0{prefix}{namespace}-{signal_name}-{app}-socket"
    if len(name.encode()) > MAX_SOCKET_NAME_BYTES + 1:
        raise AddressError(f"socket name @{name[1:]} is longer than {MAX_SOCKET_NAME_BYTES} bytes")
    return name


def parse_uids(text: str, source: str = f"${ALLOWED_UIDS_ENV}") -> set[int]:
    """Uids written comma- or space-separated; a ValueError naming ``source`` for anything else."""
    uids = set()
    for part in text.replace(",", " ").split():
        if not part.isdigit():
            raise ValueError(f"{source}: {part!r} is not a uid (expected numbers separated by commas or spaces)")
        uids.add(int(part))
    return uids


def allowed_uids_from_env(environ: Mapping[str, str] = os.environ, extra: str | None = None) -> set[int]:
    """Our own uid, $CMAN_SIGNAL_ALLOWED_UIDS and ``extra`` (a runner's --allowed-uids)."""
    uids = {os.getuid(), *parse_uids(environ.get(ALLOWED_UIDS_ENV, ""))}
    if extra:
        uids |= parse_uids(extra, "--allowed-uids")
    return uids


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end, from the kernel."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", creds)
    return int(pid), int(uid), int(gid)


def peer_uid(sock: socket.socket) -> int:
    return peer_credentials(sock)[1]


def check_peer(sock: socket.socket, allowed_uids: Iterable[int], role: str = "peer") -> None:
    """Abstract sockets have no file permissions, so the kernel's peer credentials stand in."""
    uid = peer_uid(sock)
    if uid not in set(allowed_uids):
        raise PeerRefused(f"the {role} runs as uid {uid}, which is not allowed")


# --- deadlines --------------------------------------------------------------------------------


class Budget(Protocol):
    def remaining(self) -> float:
        """Seconds left for the next socket call; TimeoutError when none are."""
        ...


def seconds(value: float) -> str:
    """A wait as people read it: whole seconds from 10 s, else 2 digits (a deadline's share of a
    run was printed 7.49903 s)."""
    return f"{value:.0f} s" if value >= 10 else f"{value:.2g} s"


class Deadline:
    """A fixed point in time for a whole exchange (the client's evaluation, a runner's message)."""

    def __init__(self, seconds: float, what: str = "no answer") -> None:
        self.expires = time.monotonic() + seconds
        self.seconds = seconds
        self.what = what

    def remaining(self) -> float:
        left = self.expires - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{self.what} within {seconds(self.seconds)}")
        return left


class Stall:
    """At most ``seconds`` without progress per socket call (the runner reading a large payload)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def remaining(self) -> float:
        return self.seconds


# --- JSON ---------------------------------------------------------------------------------------


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


_STRICT = json.JSONDecoder(parse_constant=_refuse_constant)


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse one JSON document strictly: no NaN or Infinity; ValueError for anything refused.

    Too deep nesting (RecursionError) and integers over Python's digit limit become ValueError,
    so that a peer's bad payload is a protocol answer, never a dropped connection. The cyclic
    garbage collector is paused meanwhile: a million-point series allocates two million objects
    none of which can be garbage, and the collector's passes over them cost twice the parse.
    """
    text = data if isinstance(data, str) else (data if isinstance(data, (bytes, bytearray)) else bytes(data)).decode()
    with gc_paused():
        try:
            return _STRICT.decode(text)
        except RecursionError as e:
            raise ValueError("JSON nested too deeply") from e


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many objects that cannot be garbage
    (a metrics window): its passes over millions of young lists cost more than building them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def dumps(value: Any) -> bytes:
    """Compact JSON; NaN and Infinity refused (ValueError), as the reader refuses them."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


# --- the init message -----------------------------------------------------------------------


def init_message(
    cluster: str, pool: str, parameters: Mapping[str, Any] | None = None, traceback: bool = False
) -> dict[str, Any]:
    """The object a client sends first.

    Deployed runners read cluster and pool inside ``parameters``, so both places carry them.
    """
    message: dict[str, Any] = {
        "cluster": cluster,
        "pool": pool,
        "parameters": {**(parameters or {}), "cluster": cluster, "pool": pool},
    }
    if traceback:
        message[TRACEBACK_INIT_KEY] = True
    return message


def read_init(init: Any) -> tuple[str, str, dict[str, Any]]:
    """(cluster, pool, parameters) from an init message; ValueError when it is not one.

    Deployed clients send cluster and pool inside ``parameters``; the seed puts them on top.
    """
    if not isinstance(init, Mapping):
        raise ValueError(f"init message must be a JSON object, got {type(init).__name__}")
    parameters = init.get("parameters") or {}
    if not isinstance(parameters, Mapping):
        raise ValueError("init message: parameters must be a JSON object")
    cluster = init.get("cluster", parameters.get("cluster", ""))
    pool = init.get("pool", parameters.get("pool", ""))
    return str(cluster), str(pool), dict(parameters)


def wants_traceback(init: Any) -> bool:
    """Whether the client asked for the traceback of a signal's failure."""
    return isinstance(init, Mapping) and init.get(TRACEBACK_INIT_KEY) is True


# --- framing ----------------------------------------------------------------------------------


class Stream:
    """A connected stream socket with a read buffer; every read and write has a deadline."""

    def __init__(self, sock: socket.socket, chunk: int = 1 << 16) -> None:
        self.sock = sock
        self.chunk = chunk
        self.buffer = bytearray()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes | bytearray | memoryview, budget: Budget) -> None:
        view = memoryview(data)
        while view:
            self.sock.settimeout(budget.remaining())
            sent = self.sock.send(view[: 1 << 22])
            view = view[sent:]

    def _fill(self, budget: Budget) -> None:
        self.sock.settimeout(budget.remaining())
        data = self.sock.recv(self.chunk)
        if not data:
            raise Closed("the peer closed the connection")
        self.buffer += data

    def read_byte(self, budget: Budget) -> int:
        while not self.buffer:
            self._fill(budget)
        byte = self.buffer[0]
        del self.buffer[0]
        return byte

    def read_exact(self, n: int, budget: Budget) -> bytearray:
        """``n`` bytes, held in a buffer that grows with what has arrived (never ``n`` up front:
        a 4-byte length of 1 GiB must not cost 1 GiB before the data does)."""
        if len(self.buffer) >= n:
            out = self.buffer[:n]
            del self.buffer[:n]
            return out
        out = self.buffer
        self.buffer = bytearray()
        have = len(out)
        while have < n:
            if have == len(out):  # full: grow by what has arrived so far, at most to n
                out.extend(bytes(min(n, max(2 * have, 1 << 16)) - have))
            self.sock.settimeout(budget.remaining())
            got = self.sock.recv_into(memoryview(out)[have:], min(len(out) - have, 1 << 22))
            if not got:
                raise Closed(f"the peer closed the connection after {have} of {n} bytes")
            have += got
        return out

    def read_json_value(self, budget: Budget, limit: int = MAX_INIT_BYTES, whole: bool = False) -> Any:
        """One unframed JSON value; bytes after it stay buffered for the next read.

        ``whole``: the value must be all there is (the reply); otherwise what follows is kept (the
        init may share a read with the first length). ValueError for a value that can never
        parse (too deep, too long a number, bytes after a reply, no value within ``limit``).
        """
        while True:
            # Bytes after the value (the next length) need not be UTF-8: surrogateescape keeps
            # them decodable and lets us count exactly how many bytes the value used.
            text = self.buffer.decode("utf-8", "surrogateescape")
            stripped = text.rstrip()
            start = len(text) - len(text.lstrip())
            # An object or array is complete only when its last byte closes it: skip the parse
            # otherwise, so a value spread over many reads is not parsed again on each one.
            if start < len(stripped) and (not whole or stripped[-1] in "}]"):
                try:
                    value, end = _STRICT.raw_decode(text, start)
                except json.JSONDecodeError:
                    pass  # incomplete, or malformed: more bytes (or the limit) will tell
                except RecursionError as e:
                    raise ValueError("JSON nested too deeply") from e
                else:
                    if whole and text[end:].strip():
                        raise ValueError(f"unexpected bytes after the JSON value: {text[end : end + 40]!r}")
                    del self.buffer[: len(text[:end].encode("utf-8", "surrogateescape"))]
                    return value
            if len(self.buffer) > limit:
                raise ValueError(f"no complete JSON value in the first {limit} bytes")
            self._fill(budget)

    def peer_closed(self) -> bool:
        """True when the peer has closed (or reset) an idle connection: checked before reuse."""
        try:
            readable, _, _ = select.select([self.sock], [], [], 0)
            if not readable:
                return False
            return self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True


def check_ack(byte: int, stage: str) -> None:
    if byte == ACK[0]:
        return
    if byte == NACK[0]:
        raise ProtocolError(f"the signal refused the {stage} (0x02: malformed or unacceptable)")
    raise ProtocolError(f"expected ACK 0x01 after the {stage}, got 0x{byte:02x}")


def check_reply(reply: Any) -> dict[str, float | None]:
    """``{"Resources": {...}}`` -> {resource: amount or None}; anything else -> WireError.

    ``{"Error": ...}`` is the signal's own failure (SignalFailed); a reply of the wrong shape or with
    negative, NaN, infinite or non-numeric amounts is a ProtocolError.
    """
    if not isinstance(reply, dict):
        raise ProtocolError(f"the reply must be a JSON object, got {type(reply).__name__}")
    if "Error" in reply:
        sent = reply.get(TRACEBACK_REPLY_KEY)
        raise SignalFailed(f"the signal failed: {reply['Error']}", sent if isinstance(sent, str) else "")
    if "Resources" not in reply:
        raise ProtocolError(f"the reply has no Resources (keys: {', '.join(map(str, reply)) or 'none'})")
    resources = reply["Resources"]
    if not isinstance(resources, dict):
        raise ProtocolError(f"Resources must be a JSON object, got {type(resources).__name__}")
    unknown = set(resources) - set(RESOURCE_NAMES)
    if unknown:
        raise ProtocolError(f"unknown resource(s) in the reply: {', '.join(sorted(map(str, unknown)))}")
    amounts: dict[str, float | None] = {}
    for name, value in resources.items():
        if value is None:
            amounts[name] = None
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProtocolError(f"{name} must be a number or null, got {value!r}")
        elif not math.isfinite(value) or value < 0:
            raise ProtocolError(f"{name} must be a finite number >= 0, got {value!r}")
        else:
            amounts[name] = float(value)
    return amounts


def encode_payload(metrics: Mapping[str, Any], timestamp: float) -> bytes:
    """``{"metrics": ..., "timestamp": T}``; ProtocolError when it does not fit the runner's limit."""
    try:
        data = dumps({"metrics": metrics, "timestamp": timestamp})
    except ValueError as e:
        raise ProtocolError(f"the metrics cannot be sent: {e}") from e
    check_payload_size(len(data))
    return data


def check_payload_size(n: int) -> None:
    if n > MAX_PAYLOAD_BYTES:
        raise ProtocolError(f"a metrics payload of {n} bytes is over the protocol's limit of {MAX_PAYLOAD_BYTES}")


# --- the client side ------------------------------------------------------------------------

RETRY_CONNECT = (ConnectionRefusedError, FileNotFoundError, BlockingIOError, InterruptedError, TimeoutError)


def connect(name: str, timeout: float) -> socket.socket:
    """Connect to an abstract socket, retrying with backoff while nobody listens yet, or while the
    listener's queue is full (EAGAIN: a runner restarting, or busy accepting), for ``timeout`` s."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(max(0.05, min(deadline - time.monotonic(), 5.0)))
            sock.connect(name)
            return sock
        except RETRY_CONNECT as e:
            sock.close()
            if time.monotonic() + delay > deadline:
                reason = "nobody listens" if isinstance(e, (ConnectionRefusedError, FileNotFoundError)) else "busy"
                if isinstance(e, OSError) and e.errno == errno.EAGAIN:
                    reason = "its queue stayed full"
                raise WireError(f"cannot connect to @{name[1:]} within {seconds(timeout)}: {reason} ({e})") from e
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
        except BaseException:
            sock.close()
            raise


class Client:
    """One connection to a runner: connect (with retries), the init, then evaluations.

    ``evaluate`` reuses the connection; an idle connection the runner has closed is noticed before
    use and replaced quietly. Raises WireError (ProtocolError for violations, Closed/TimeoutError/
    OSError for the transport: the caller decides whether to reconnect).
    """

    def __init__(self, name: str, init: Mapping[str, Any], allowed_uids: Iterable[int]) -> None:
        self.name = name
        self.init = dumps(init)
        self.allowed_uids = set(allowed_uids)
        self.stream: Stream | None = None

    def connect(self, connect_timeout: float, budget: Budget) -> Stream:
        self.close()
        sock = connect(self.name, connect_timeout)
        try:
            check_peer(sock, self.allowed_uids, "process on the socket")
            stream = Stream(sock)
            stream.send(self.init, budget)
        except BaseException:
            sock.close()
            raise
        self.stream = stream
        return stream

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None

    def ready(self, connect_timeout: float, budget: Budget) -> Stream:
        if self.stream is not None and self.stream.peer_closed():
            self.close()
        if self.stream is None:
            return self.connect(connect_timeout, budget)
        return self.stream

    def round_trip(
        self,
        stream: Stream,
        payload: bytes | bytearray | memoryview,
        budget: Budget,
        meanwhile: Callable[[], None] | None = None,
    ) -> Any:
        """Send one payload and return the reply JSON (unchecked); ProtocolError on a 0x02.

        ``meanwhile`` runs once the payload is sent, while the runner parses and evaluates it (a
        check of the same bytes on our side costs no extra time then); if it raises, the
        connection is closed and the reply is never read.
        """
        check_payload_size(len(payload))
        stream.send(LENGTH.pack(len(payload)), budget)
        check_ack(stream.read_byte(budget), "payload length")
        stream.send(payload, budget)
        if meanwhile is not None:
            try:
                meanwhile()
            except BaseException:
                self.close()
                raise
        check_ack(stream.read_byte(budget), "metrics data")
        try:
            return stream.read_json_value(budget, MAX_REPLY_BYTES, whole=True)
        except ValueError as e:
            raise ProtocolError(f"malformed reply: {e}") from e
