"""Pruning the signals directory: what no configuration runs goes, what one may run stays."""

import os

from clusterman.tree.signal_dir import disk_bytes
from clusterman.tree.signal_dir import prune

A, B, C = ".v1-" + "a" * 16, ".v1-" + "b" * 16, ".v2-" + "c" * 16


def test_prune_keeps_the_named_installs_and_what_their_versions_link_to(tmp_path):
    for install in (A, B, C, ".v3-" + "d" * 16):
        (tmp_path / install / "venv").mkdir(parents=True)
        (tmp_path / install / "venv" / "python").write_bytes(b"x" * 5000)
    os.symlink(B, tmp_path / "v1")  # moved since A was checked for the running tree: both stay
    os.symlink(C, tmp_path / "v2")
    os.symlink(".v3-" + "d" * 16, tmp_path / "v3")  # no configuration runs v3
    os.symlink(".v9-" + "e" * 16, tmp_path / "v9")  # dangling
    (tmp_path / ".v2.partial-abc123" / "root").mkdir(parents=True)  # a killed fetcher's
    os.symlink(C, tmp_path / ".v2.link-4242")
    (tmp_path / "notes.txt").write_text("not ours: left alone")
    removed = prune(tmp_path, {"v1", "v2"}, {A})
    assert sorted(removed) == sorted([".v3-" + "d" * 16, "v3", "v9", ".v2.partial-abc123", ".v2.link-4242"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([A, B, C, "v1", "v2", "notes.txt"])
    assert disk_bytes(tmp_path) >= 3 * 5000
