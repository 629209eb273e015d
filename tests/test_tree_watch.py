import os

from clusterman.tree.watch import changed
from clusterman.tree.watch import fingerprint


def test_content_changes_count_and_rewrites_with_the_same_bytes_do_not(tmp_path):
    a, b, gone = tmp_path / "a.yaml", tmp_path / "b.json", tmp_path / "missing"
    a.write_text("x: 1\n")
    b.write_text("{}")
    before = fingerprint([a, b, gone])
    a.write_text("x: 1\n")
    os.utime(a, (0, 0))
    assert fingerprint([a, b, gone]) == before
    a.write_text("x: 2\n")
    gone.write_text("now here")
    after = fingerprint([a, b, gone])
    assert changed(before, after) == sorted([str(a), str(gone)])
    b.unlink()
    assert changed(after, fingerprint([a, b, gone])) == [str(b)]


def test_a_symlink_swap_is_a_change(tmp_path):
    """Kubernetes updates ConfigMaps by pointing a symbolic link at a new directory."""
    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    (tmp_path / "v1/pool.yaml").write_text("a")
    (tmp_path / "v2/pool.yaml").write_text("b")
    (tmp_path / "data").symlink_to("v1")
    path = tmp_path / "data/pool.yaml"
    before = fingerprint([path])
    (tmp_path / "data.new").symlink_to("v2")
    os.replace(tmp_path / "data.new", tmp_path / "data")
    assert changed(before, fingerprint([path])) == [str(path)]
