"""Following the programs' log files: prefixes, lines written in pieces, rotation by rename, a file
rewritten from the start, and what a previous container left not repeated."""

from __future__ import annotations

import os

from clusterman.tree.log_follow import MAX_LINE
from clusterman.tree.log_follow import LogFollower
from clusterman.tree.log_follow import program_of
from clusterman.tree.log_follow import write_to


def follower(tmp_path):
    out: list[bytes] = []
    return LogFollower(tmp_path, out.append), out


def append(path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


def test_program_names():
    names = ("autoscaler.log", "run_signals_3.log", "fetch_signals_0.log", "supervisord.log")
    assert [program_of(n) for n in names] == ["autoscaler", "runner-3", "fetch-0", "supervisord"]
    assert program_of("autoscaler.log.1") is None and program_of("notes.txt") is None


def test_lines_are_copied_once_whole_and_prefixed(tmp_path):
    (tmp_path / "autoscaler.log").write_bytes(b"from the previous container\n")
    follow, out = follower(tmp_path)
    follow.poll()
    assert out == []  # what was there before is not repeated
    append(tmp_path / "autoscaler.log", b"run 1 | scale_up\nrun 2 hal")
    (tmp_path / "run_signals_0.log").write_bytes(b"listening\n")  # a new file: read from its start
    follow.poll()
    append(tmp_path / "autoscaler.log", b"f a line\n")
    follow.poll()
    assert out == [b"autoscaler | run 1 | scale_up\n", b"runner-0 | listening\n", b"autoscaler | run 2 half a line\n"]


def test_rotation_and_rewrite_lose_no_line(tmp_path):
    log = tmp_path / "autoscaler.log"
    follow, out = follower(tmp_path)
    follow.poll()
    log.write_bytes(b"a\n")
    follow.poll()
    append(log, b"b\n")  # written before supervisord rotates, read after
    log.rename(tmp_path / "autoscaler.log.1")
    log.write_bytes(b"c\n")
    follow.poll()
    fetch = tmp_path / "fetch_signals_0.log"
    fetch.write_bytes(b"first fetch, a long line\n")
    follow.poll()
    fetch.write_bytes(b"second\n")  # rewritten for the next fetch: shorter, same file
    follow.poll()
    assert out == [b"autoscaler | a\n", b"autoscaler | b\n", b"autoscaler | c\n",
                   b"fetch-0 | first fetch, a long line\n", b"fetch-0 | second\n"]  # fmt: skip


def test_a_line_without_end_is_cut_and_a_missing_directory_is_waited_for(tmp_path):
    follow, out = follower(tmp_path / "logs")
    follow.poll()
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "autoscaler.log").write_bytes(b"x" * (MAX_LINE + 10))
    follow.poll()
    assert out == [b"autoscaler | " + b"x" * MAX_LINE + b"\n"]


def test_a_closed_output_loses_lines_not_the_bootstrap():
    read, write = os.pipe()
    os.close(read)
    write_to(write)(b"autoscaler | lost\n")  # EPIPE: ignored
    os.close(write)
    write_to(write)(b"autoscaler | lost\n")  # EBADF: ignored
