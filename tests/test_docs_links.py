"""Every relative link in the docs and the README reaches a file that exists, and a heading in it
when it names one: pages get split and sections renamed, and a dead link is found here, not by a
reader."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"```.*?```", re.DOTALL)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation but hyphens dropped,
    spaces as hyphens; a repeated heading gets -1, -2."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#+ (.*)$", CODE.sub("", page.read_text()), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def links(page: Path) -> list[str]:
    return [link for link in LINK.findall(CODE.sub("", page.read_text())) if not re.match(r"[a-z]+:", link)]


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_relative_link_reaches_its_file_and_heading(page):
    dead = []
    for link in links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            dead.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            dead.append(f"{link}: no such heading in {target.name}")
    assert not dead, f"{page.name}: " + "; ".join(dead)


def test_the_checker_sees_a_dead_anchor(tmp_path):
    page = tmp_path / "a.md"
    page.write_text("# Title\n\n## The `slot` reserve: why\n\nSee [x](#the-slot-reserve-why), [y](#gone).\n")
    assert anchors(page) == {"title", "the-slot-reserve-why"}
    assert links(page) == ["#the-slot-reserve-why", "#gone"]
