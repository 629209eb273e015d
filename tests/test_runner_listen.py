"""A runner whose socket name is taken says by whom it probably is (two trees of one pool on a host)."""

import os
import uuid

import pytest

from clusterman_signals.run import Runner


def test_a_taken_socket_name_is_one_line_with_its_likely_cause():
    namespace = f"ns{uuid.uuid4().hex[:10]}"  # a name no other test or stack uses
    first = Runner(namespace, "Steady", "__default__", {os.getuid()}).listen()
    try:
        with pytest.raises(SystemExit) as caught:
            Runner(namespace, "Steady", "__default__", {os.getuid()}).listen()
        message = str(caught.value)
        assert message.startswith(f"cannot listen on @{namespace}-Steady-__default__")
        assert "Address already in use (another runner of this signal and app serves it" in message
    finally:
        first.close()
