"""The extras' version ranges are the release series the tests run, and no wider.

An open range (``kubernetes>=29``) let pip install a release no test had run (37.0.1). Each
extra's requirement is a compatible-release range (``~=X.Y.Z``: that series' patch releases) that
holds the version pinned for the tests in constraints*.txt.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]


def pins() -> dict[str, Version]:
    found = {}
    for name in ("constraints.txt", "constraints-dev.txt"):
        for line in (REPO / name).read_text().splitlines():
            if "==" in line and not line.lstrip().startswith("#"):
                package, _, version = line.partition("==")
                found[canonicalize_name(package.split("[")[0])] = Version(version.split(";")[0].strip())
    return found


def extras() -> list[tuple[str, Requirement]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [(extra, Requirement(text)) for extra, texts in project["optional-dependencies"].items() for text in texts]


def test_every_extra_allows_the_tested_series_and_nothing_newer() -> None:
    pinned = pins()
    assert extras()
    for extra, requirement in extras():
        name = canonicalize_name(requirement.name)
        [spec] = list(requirement.specifier)
        assert spec.operator == "~=" and len(Version(spec.version).release) == 3, (extra, str(requirement))
        tested = pinned[name]
        assert requirement.specifier.contains(tested), f"[{extra}] {requirement}: the tests run {name} {tested}"
        major, minor, _ = tested.release
        assert Version(spec.version).release[:2] == (major, minor), f"[{extra}] {requirement}: tested {tested}"
        assert not requirement.specifier.contains(Version(f"{major}.{minor + 1}.0"))
        assert not requirement.specifier.contains(Version(f"{major + 1}.0.0"))
