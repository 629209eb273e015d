"""The local stack keeps the bootstrap's output in bootstrap.log, dropping what cannot be written."""

import os
import threading
from pathlib import Path

from clusterman.local.stack import keep_output


def test_lines_a_full_disk_refuses_are_dropped_and_counted_and_reading_goes_on(tmp_path):
    read, write = os.pipe()
    with os.fdopen(read, "rb") as pipe:
        keeper = threading.Thread(target=keep_output, args=(pipe, Path("/dev/full")))  # every write: ENOSPC
        keeper.start()
        os.write(write, b"one\ntwo\n" * 10_000)  # more than a pipe holds: read on though nothing is written
        os.close(write)
        keeper.join(10)
    assert not keeper.is_alive()

    read, write = os.pipe()
    os.write(write, b"three\n")
    os.close(write)
    log = tmp_path / "bootstrap.log"
    with os.fdopen(read, "rb") as pipe:
        keep_output(pipe, log)
    assert log.read_bytes() == b"three\n"
