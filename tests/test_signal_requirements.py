"""The signals' requirements file: only exact pins get through, so a build never chooses versions."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterman.signals.signal_venv import BuildError
from clusterman.signals.signal_venv import read_requirements


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "requirements.txt"
    path.write_text(text)
    return path


def test_pins_comments_markers_extras_and_hashes(tmp_path: Path) -> None:
    text = (
        "# the signals' packages\n"
        "python-dateutil==2.9.0.post0  # parsing\n"
        "\n"
        "six==1.17.0 \\\n"
        "    --hash=sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274\n"
        'requests[socks]==2.34.2 ; python_version >= "3.11"\n'
    )
    lines = read_requirements(write(tmp_path, text))
    assert lines[0] == "python-dateutil==2.9.0.post0"
    assert lines[1].startswith("six==1.17.0") and "--hash=sha256:4721" in lines[1]
    assert lines[2].startswith("requests[socks]==2.34.2")


def test_an_empty_file_asks_for_nothing(tmp_path: Path) -> None:
    assert read_requirements(write(tmp_path, "# nothing yet\n\n")) == []


@pytest.mark.parametrize(
    "line",
    ["six>=1.16", "six", "six==1.*", "-r other.txt", "-e .", "--index-url https://example.invalid/simple",
     "https://example.invalid/six-1.17.0-py2.py3-none-any.whl", "six @ file:///tmp/six.whl", "six===1.17.0"],
)  # fmt: skip
def test_anything_not_pinned_is_refused_naming_its_line(tmp_path: Path, line: str) -> None:
    with pytest.raises(BuildError, match=r"^clusterman_signals/requirements.txt:3: .* is not pinned as name==version"):
        read_requirements(write(tmp_path, f"# header\nsix==1.17.0\n{line}\n"))
