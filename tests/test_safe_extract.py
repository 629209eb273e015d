import gzip
import io
import tarfile

import pytest

from clusterman.signals.safe_extract import UnsafeArchive
from clusterman.signals.safe_extract import check_members
from clusterman.signals.safe_extract import extract

TOP = frozenset({"venv", "BUILD_INFO.json"})


def member(name, kind=tarfile.REGTYPE, linkname="", size=0):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.size = size
    return info


def write_tar(path, members):
    with tarfile.open(path, "w:gz") as tar:
        for m, data in members:
            tar.addfile(m, io.BytesIO(data) if data is not None else None)


def good_members():
    return [
        (member("venv", tarfile.DIRTYPE), None),
        (member("venv/lib", tarfile.DIRTYPE), None),
        (member("venv/lib/mod.py", size=5), b"x = 1"),
        (member("venv/lib64", tarfile.SYMTYPE, "lib"), None),
        (member("venv/lib/again.py", tarfile.LNKTYPE, "venv/lib/mod.py"), None),
        (member("./BUILD_INFO.json", size=2), b"{}"),
    ]


def test_a_plain_venv_extracts_with_its_inner_links(tmp_path):
    tarball = tmp_path / "good.tar.gz"
    write_tar(tarball, good_members())
    dest = tmp_path / "dest"
    dest.mkdir()
    extract(tarball, dest, TOP)
    assert (dest / "venv/lib64").is_symlink()
    assert (dest / "venv/lib64/mod.py").read_text() == "x = 1"
    assert (dest / "venv/lib/again.py").read_text() == "x = 1"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (member("/etc/cron.d/evil"), "absolute path"),
        (member("venv/../../escape"), "contains '..'"),
        (member("../escape"), "contains '..'"),
        (member("other/file"), "outside BUILD_INFO.json, venv"),
        (member("venv/sda", tarfile.BLKTYPE), "device file"),
        (member("venv/tty", tarfile.CHRTYPE), "device file"),
        (member("venv/pipe", tarfile.FIFOTYPE), "FIFO"),
        (member("venv/etc", tarfile.SYMTYPE, "/etc"), "absolute path '/etc'"),
        (member("venv/up", tarfile.SYMTYPE, "../.."), "leads out of its directory"),
        (member("venv/up2", tarfile.SYMTYPE, "lib/../../x"), "leads out of its directory"),
        (member("venv/hard", tarfile.LNKTYPE, "/etc/passwd"), "names no earlier file"),
        (member("venv/hard2", tarfile.LNKTYPE, "venv/later"), "names no earlier file"),
    ],
)
def test_unsafe_entries_refuse_the_whole_archive_before_writing(tmp_path, bad, message):
    tarball = tmp_path / "bad.tar.gz"
    write_tar(tarball, [*good_members(), (bad, None), (member("venv/later", size=1), b"z")])
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(UnsafeArchive) as err:
        extract(tarball, dest, TOP)
    assert message in str(err.value)
    assert repr(bad.name) in str(err.value)
    assert list(dest.iterdir()) == []  # nothing written, not even the good entries before it


def test_size_limit_counts_every_file():
    members = [member("venv/a", size=600), member("venv/b", size=600)]
    check_members(members, TOP, max_bytes=1200)
    with pytest.raises(UnsafeArchive, match="more than 1000 bytes"):
        check_members(members, TOP, max_bytes=1000)


def test_not_a_tarball(tmp_path):
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"<Error>AccessDenied</Error>")
    with pytest.raises(UnsafeArchive, match=r"not a readable tar\.gz"):
        extract(junk, tmp_path, TOP)


def test_too_many_entries_refuse_the_archive_before_the_rest_is_read(tmp_path):
    tarball = tmp_path / "many.tar.gz"
    write_tar(tarball, [(member(f"venv/f{n}"), b"") for n in range(50)])
    dest = tmp_path / "dest"
    dest.mkdir()
    extract(tarball, dest, TOP, max_members=50)
    with pytest.raises(UnsafeArchive, match="holds more than 49 entries"):
        extract(tarball, tmp_path, TOP, max_members=49)


def test_a_corrupt_gzip_stream_is_refused_though_its_entries_read(tmp_path):
    """tarfile stops reading at the archive's end marker: the gzip trailer's CRC was never checked."""
    tarball = tmp_path / "crc.tar.gz"
    write_tar(tarball, good_members())
    data = bytearray(tarball.read_bytes())
    data[-8] ^= 0xFF  # the CRC-32 of the trailer
    tarball.write_bytes(data)
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(UnsafeArchive, match=r"not a readable tar\.gz file: CRC check failed"):
        extract(tarball, dest, TOP)


def test_data_after_the_archives_end_is_refused(tmp_path):
    tarball = tmp_path / "trailing.tar.gz"
    plain = io.BytesIO()
    with tarfile.open(fileobj=plain, mode="w") as tar:
        tar.addfile(member("venv/a", size=1), io.BytesIO(b"a"))
    with gzip.open(tarball, "wb") as out:
        out.write(plain.getvalue() + bytes(2 << 20))  # 2 MiB of zeros after the end marker
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(UnsafeArchive, match="bytes after the archive's end"):
        extract(tarball, dest, TOP)
