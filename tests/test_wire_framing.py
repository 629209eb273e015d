"""Framing on both sides, over socketpairs (no processes needed)."""

import json
import socket
import struct
import threading

import pytest

from clusterman.signals.protocol import Connection
from clusterman.signals.protocol import Deadline
from clusterman.signals.protocol import ProtocolError
from clusterman.signals.protocol import check_ack
from clusterman.signals.protocol import encode_metrics
from clusterman.signals.protocol import parse_reply
from clusterman_signals.wire import BufferedSocket
from clusterman_signals.wire import Closed


def test_init_then_length_in_one_read_keeps_the_length():
    a, b = socket.socketpair()
    length = struct.pack(">I", 0xFF_FE_80_00)  # not valid UTF-8 on purpose
    a.sendall(json.dumps({"parameters": {"cluster": "ç"}}).encode() + length)
    stream = BufferedSocket(b)
    assert stream.read_json_value() == {"parameters": {"cluster": "ç"}}
    assert bytes(stream.read_exact(4)) == length


def test_init_split_inside_a_multibyte_character():
    a, b = socket.socketpair()
    data = json.dumps({"p": "€"}, ensure_ascii=False).encode()
    cut = data.index("€".encode()) + 1
    stream = BufferedSocket(b, chunk=cut)
    a.sendall(data)
    assert stream.read_json_value() == {"p": "€"}


def test_read_exact_across_chunks_and_eof():
    a, b = socket.socketpair()
    stream = BufferedSocket(b, chunk=3)
    a.sendall(b"0123456789")
    assert bytes(stream.read_exact(4)) == b"0123"
    assert bytes(stream.read_exact(6)) == b"456789"
    a.sendall(b"ab")
    a.close()
    with pytest.raises(Closed, match="after 2 of 5"):
        stream.read_exact(5)


def test_client_reads_reply_sharing_a_read_with_the_ack():
    a, b = socket.socketpair()
    conn = Connection(b)
    a.sendall(b'\x01{"Resources": {"cpus": 1}}')
    deadline = Deadline(2)
    check_ack(conn.read_byte(deadline), "data")
    assert parse_reply(conn.read_json(deadline)).opinions() == {"cpus": 1.0}


def test_client_reads_reply_dribbled_byte_by_byte():
    a, b = socket.socketpair()
    reply = b'{"Resources": {"cpus": 12.5}, "note": "}}"}'

    def dribble():
        for byte in reply:
            a.sendall(bytes([byte]))

    t = threading.Thread(target=dribble)
    t.start()
    value = Connection(b).read_json(Deadline(5))
    t.join()
    assert value["Resources"] == {"cpus": 12.5}


def test_client_read_deadline():
    _, b = socket.socketpair()
    with pytest.raises(TimeoutError):
        Connection(b).read_json(Deadline(0.2))


def test_eof_in_the_middle_of_a_reply():
    a, b = socket.socketpair()
    a.sendall(b'{"Resources": {')
    a.close()
    with pytest.raises(EOFError):
        Connection(b).read_json(Deadline(2))


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


def test_encode_metrics_rejects_nan():
    with pytest.raises(ValueError):
        encode_metrics({"x": [[1, float("nan")]]}, 1)
    assert json.loads(encode_metrics({"x": [[1, 2]]}, 5)) == {"metrics": {"x": [[1, 2]]}, "timestamp": 5}
