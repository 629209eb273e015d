"""Framing on both sides (one module, ``clusterman_signals.wire``), over socketpairs (no processes)."""

import json
import socket
import struct
import threading

import pytest

from clusterman.signals.protocol import parse_reply
from clusterman_signals import wire
from clusterman_signals.wire import Closed
from clusterman_signals.wire import Deadline
from clusterman_signals.wire import ProtocolError
from clusterman_signals.wire import Stream
from clusterman_signals.wire import check_ack
from clusterman_signals.wire import encode_payload


def test_init_then_length_in_one_read_keeps_the_length():
    a, b = socket.socketpair()
    length = struct.pack(">I", 0xFF_FE_80_00)  # not valid UTF-8 on purpose
    a.sendall(json.dumps({"parameters": {"cluster": "ç"}}).encode() + length)
    stream = Stream(b)
    assert stream.read_json_value(Deadline(2)) == {"parameters": {"cluster": "ç"}}
    assert bytes(stream.read_exact(4, Deadline(2))) == length


def test_init_split_inside_a_multibyte_character():
    a, b = socket.socketpair()
    data = json.dumps({"p": "€"}, ensure_ascii=False).encode()
    cut = data.index("€".encode()) + 1
    stream = Stream(b, chunk=cut)
    a.sendall(data)
    assert stream.read_json_value(Deadline(2)) == {"p": "€"}


def test_read_exact_across_chunks_and_eof():
    a, b = socket.socketpair()
    stream = Stream(b, chunk=3)
    a.sendall(b"0123456789")
    assert bytes(stream.read_exact(4, Deadline(2))) == b"0123"
    assert bytes(stream.read_exact(6, Deadline(2))) == b"456789"
    a.sendall(b"ab")
    a.close()
    with pytest.raises(Closed, match="after 2 of 5"):
        stream.read_exact(5, Deadline(2))


def test_client_reads_reply_sharing_a_read_with_the_ack():
    a, b = socket.socketpair()
    conn = Stream(b)
    a.sendall(b'\x01{"Resources": {"cpus": 1}}')
    deadline = Deadline(2)
    check_ack(conn.read_byte(deadline), "data")
    assert parse_reply(conn.read_json_value(deadline, whole=True)).opinions() == {"cpus": 1.0}


def test_client_reads_reply_dribbled_byte_by_byte():
    a, b = socket.socketpair()
    reply = b'{"Resources": {"cpus": 12.5}, "note": "}}"}'

    def dribble():
        for byte in reply:
            a.sendall(bytes([byte]))

    t = threading.Thread(target=dribble)
    t.start()
    value = Stream(b).read_json_value(Deadline(5), whole=True)
    t.join()
    assert value["Resources"] == {"cpus": 12.5}


def test_client_read_deadline():
    _, b = socket.socketpair()
    with pytest.raises(TimeoutError):
        Stream(b).read_json_value(Deadline(0.2), whole=True)


def test_eof_in_the_middle_of_a_reply():
    a, b = socket.socketpair()
    a.sendall(b'{"Resources": {')
    a.close()
    with pytest.raises(EOFError):
        Stream(b).read_json_value(Deadline(2), whole=True)


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ({"Error": "boom"}, "the signal failed: boom"),
        ({}, "no Resources"),
        ({"Resources": []}, "must be a JSON object"),
        ({"Resources": {"cpus": float("inf")}}, "finite"),
        ({"Resources": {"cpus": True}}, "number or null"),
        ({"Resources": {"tpus": 1}}, "unknown resource"),
        ("Resources", "must be a JSON object"),
    ],
)
def test_parse_reply_rejects(reply, message):
    with pytest.raises(Exception, match=message):
        parse_reply(reply)


def test_parse_reply_null_is_no_opinion():
    request = parse_reply({"Resources": {"cpus": None, "mem": 0}})
    assert request.opinions() == {"mem": 0.0}


def test_acks():
    check_ack(1, "x")
    with pytest.raises(ProtocolError, match="0x02"):
        check_ack(2, "x")
    with pytest.raises(ProtocolError, match="0x41"):
        check_ack(0x41, "x")


def test_encode_payload_rejects_nan():
    with pytest.raises(ProtocolError, match="cannot be sent"):
        encode_payload({"x": [[1, float("nan")]]}, 1)
    assert json.loads(encode_payload({"x": [[1, 2]]}, 5)) == {"metrics": {"x": [[1, 2]]}, "timestamp": 5}


def test_read_exact_grows_with_what_arrived():
    """A 1 GiB length costs nothing until the bytes come: the buffer is sized by what arrived."""
    a, b = socket.socketpair()
    stream = Stream(b)
    a.sendall(b"x" * 1000)
    a.close()
    with pytest.raises(Closed, match=f"after 1000 of {1 << 30}"):
        stream.read_exact(1 << 30, Deadline(2))
    assert len(stream.buffer) == 0


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"metrics": {"x": [[1, ' + b"9" * 5000 + b"]]}}", "digits"),
        (b'{"metrics": {"x": [[1, NaN]]}}', "NaN"),
        (b'{"metrics": {"x": [[1, -Infinity]]}}', "-Infinity"),
        (b"\xff\xfe", "utf-8"),
    ],
)
def test_strict_loads_refuses_with_value_error(data, message):
    with pytest.raises(ValueError, match=message):
        wire.loads(data)


def test_init_refusals_are_value_errors():
    a, b = socket.socketpair()
    a.sendall(b"[" * 100_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        Stream(b).read_json_value(Deadline(2), limit=1 << 20)


def test_socket_prefix(monkeypatch):
    monkeypatch.delenv(wire.SOCKET_PREFIX_ENV, raising=False)
    assert wire.socket_name("ns", "Sig", "app") == "\0ns-Sig-app-socket"
    monkeypatch.setenv(wire.SOCKET_PREFIX_ENV, "stack1-")
    assert wire.socket_name("ns", "Sig", "app") == "\0stack1-ns-Sig-app-socket"
    assert wire.socket_name("ns", "Sig", "app", prefix="") == "\0ns-Sig-app-socket"
    monkeypatch.setenv(wire.SOCKET_PREFIX_ENV, "a/b")
    with pytest.raises(wire.AddressError, match="CMAN_SIGNAL_SOCKET_PREFIX"):
        wire.socket_name("ns", "Sig", "app")
    with pytest.raises(wire.AddressError, match="longer than 107"):
        wire.socket_name("ns", "Sig", "x" * 120, prefix="")


def test_init_message_read_back_by_the_runner():
    """The message both clients send carries cluster and pool in both places deployed runners look."""
    message = json.loads(wire.dumps(wire.init_message("c1", "web", {"window": 60}, traceback=True)))
    assert message["parameters"] == {"window": 60, "cluster": "c1", "pool": "web"}
    assert wire.read_init(message) == ("c1", "web", {"window": 60, "cluster": "c1", "pool": "web"})
    assert wire.wants_traceback(message) and not wire.wants_traceback(wire.init_message("c1", "web"))
    # Yelp's clients send cluster and pool inside parameters only.
    assert wire.read_init({"parameters": {"cluster": "c2", "pool": "batch"}})[:2] == ("c2", "batch")


@pytest.mark.parametrize("init", [[], {"parameters": [1]}])
def test_read_init_refuses_what_is_not_an_init(init):
    with pytest.raises(ValueError, match="init message"):
        wire.read_init(init)
