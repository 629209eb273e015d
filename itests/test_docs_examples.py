"""Every command the docs show with its output is run, and prints what the page shows.

An example is a fenced command whose output the page shows: a ``sh`` block whose ``# `` lines
after the command are its output, a ``sh`` block (or a plain block of ``clusterman ...`` lines)
followed at once by a plain block of output, or a plain block of ``$ command`` lines and their
output. Each one is either run here (``RUNS``, keyed by page and first command) or marked
``<!-- not run: <why> -->`` on the line before it. In the shown output ``…`` stands for any text
within a line, and times (``2026-11-22T16:22:11Z``) and durations in seconds (``(1.7 s)``) stand
for any. A new example with neither fails, and so does a run that no longer matches its page.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PAGES = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]
FENCE = re.compile(r"^```(?P<lang>[\w-]*)\n(?P<body>.*?)^```[ \t]*$", re.S | re.M)
NOT_RUN = re.compile(r"<!-- not run: (?P<why>.+?) -->")
COMMAND_START = ("clusterman ", ".venv/bin/clusterman ", "python -m ")


@dataclass(frozen=True)
class Example:
    page: str  # relative to the repository
    line: int
    commands: tuple[str, ...]
    shown: tuple[str, ...]
    not_run: str  # why, when the page marks it so

    @property
    def key(self) -> tuple[str, str]:
        return self.page, self.commands[0]


def joined(lines: list[str]) -> list[str]:
    """Lines with their backslash continuations joined."""
    out: list[str] = []
    pending = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1].strip() + " "
            continue
        out.append((pending + line.strip()).strip())
        pending = ""
    return [line for line in out if line]


def examples_of(page: Path) -> list[Example]:
    text = page.read_text()
    blocks = list(FENCE.finditer(text))
    found = []
    for i, block in enumerate(blocks):
        lang, lines = block["lang"], block["body"].splitlines()
        following = blocks[i + 1] if i + 1 < len(blocks) else None
        output_next = (
            following is not None and not following["lang"] and not text[block.end() + 1 : following.start()].strip()
        )
        commands: list[str] = []
        shown: list[str] = []
        if not lang and lines and lines[0].startswith("$ "):
            commands = [line[2:] for line in joined(lines) if line.startswith("$ ")]
            shown = [line for line in lines if not line.startswith("$ ")]
        elif lang in ("sh", "bash") or (not lang and lines and lines[0].startswith(COMMAND_START)):
            outputs = [line[2:] for line in lines if line.startswith("# ")]
            commands = joined([line for line in lines if not line.startswith("#")])
            if outputs:
                shown = outputs
            elif output_next and following is not None:
                shown = following["body"].splitlines()
        if commands and shown:
            before = text[: block.start()].rstrip("\n").rsplit("\n", 1)[-1]
            marked = NOT_RUN.search(before)
            number = text[: block.start()].count("\n") + 1
            found.append(
                Example(
                    str(page.relative_to(REPO)), number, tuple(commands), tuple(shown), marked["why"] if marked else ""
                )
            )
    return found


EXAMPLES = [example for page in PAGES for example in examples_of(page)]


def pattern(shown: str) -> re.Pattern[str]:
    """A shown line as a pattern: ``…`` any text, a time any time, a number of seconds any number."""
    parts = re.split(r"(…|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z|\d+(?:\.\d+)? s\b)", shown)
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 0:
            out.append(re.escape(part))
        elif part == "…":
            out.append(".*?")
        elif part.endswith("Z"):
            out.append(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")
        else:
            out.append(r"\d+(?:\.\d+)? s")
    return re.compile("".join(out))


def assert_shows(example: Example, printed: str) -> None:
    lines = printed.rstrip("\n").splitlines()
    where = f"{example.page}:{example.line}"
    assert len(lines) == len(example.shown), f"{where} shows\n{chr(10).join(example.shown)}\nbut it printed\n{printed}"
    for shown, line in zip(example.shown, lines, strict=True):
        assert pattern(shown).fullmatch(line), f"{where}: shows\n  {shown}\nbut it printed\n  {line}"


# --- how each example that runs is run -------------------------------------------------------------


def clusterman(command: str, cwd: Path, **env: str) -> str:
    argv = shlex.split(command)
    program = argv[0].rsplit("/", 1)[-1]
    assert program == "clusterman", command
    done = subprocess.run(
        [sys.executable, "-m", "clusterman", *argv[1:]],
        cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, f"{command}: {done.stderr}"
    return done.stdout


def in_the_checkout(example: Example, tmp: Path) -> str:
    """From the checkout's top, with a signal socket of its own."""
    prefix = f"docs-{uuid.uuid4().hex[:8]}-"
    return "".join(clusterman(c, REPO, CMAN_SIGNAL_SOCKET_PREFIX=prefix) for c in example.commands)


def outside_the_checkout(example: Example, tmp: Path) -> str:
    """In an empty directory of its own (the command writes files there), as after installing the
    wheel: the page's ``config/...`` paths are read from the config clusterman ships."""
    return "".join(clusterman(c, tmp) for c in example.commands)


NORCAL_POOL = {
    "resource_groups": [{"asg": {"tag": "clusterman:pool"}}],
    "scaling_limits": {"min_capacity": 1, "max_capacity": 10, "max_weight_to_add": 5, "max_weight_to_remove": 5},
}


def in_norcal(example: Example, tmp: Path) -> str:
    """The pages' cluster: norcal, with Kubernetes pools web and batch; the state store is a file."""
    main = {
        "clusters": {"norcal": {"aws_region": "us-west-2", "kubeconfig_path": str(tmp / "kubeconfig")}},
        "cluster_config_directory": "pools",
        "state_directory": "state",
        "autoscale_signal": {"name": "MostRecentResources", "branch_or_tag": "v1", "period_minutes": 1},
    }
    (tmp / "clusterman.yaml").write_text(yaml.safe_dump(main))
    (tmp / "pools" / "norcal").mkdir(parents=True)
    for pool in ("web", "batch"):
        (tmp / "pools" / "norcal" / f"{pool}.kubernetes").write_text(yaml.safe_dump(NORCAL_POOL))
    return "".join(clusterman(c, tmp, CMAN_ENV_CONFIG_PATH=str(tmp / "clusterman.yaml")) for c in example.commands)


RUNS: dict[tuple[str, str], Callable[[Example, Path], str]] = {
    ("docs/signals.md", ".venv/bin/clusterman signal evaluate --start --namespace clusterman --name "
     "MostRecentResources --app __default__ --metrics config/sample-metrics.json --param lookahead_minutes=5"):
        in_the_checkout,
    ("docs/simulator.md", "clusterman simulate --pool-config config/simulator/default.mesos "
     "--metrics-data-files config/simulator/clusterman-sample-metrics.json.gz"): outside_the_checkout,
    ("docs/operations.md", 'clusterman disable --cluster norcal --pool web --until 2h --reason "kernel upgrade"'):
        in_norcal,
    ("docs/operations.md", "clusterman list-pools --cluster norcal"): in_norcal,
    ("docs/operations.md", "clusterman config check"): in_norcal,
}  # fmt: skip


def test_every_example_is_run_or_says_why_not() -> None:
    unaccounted = [f"{e.page}:{e.line}: {e.commands[0]}" for e in EXAMPLES if e.key not in RUNS and not e.not_run]
    assert not unaccounted, "run these here, or mark them <!-- not run: why --> on the line before:\n" + "\n".join(
        unaccounted
    )
    stale = set(RUNS) - {e.key for e in EXAMPLES}
    assert not stale, f"no longer on their pages: {sorted(stale)}"
    assert not [e for e in EXAMPLES if e.key in RUNS and e.not_run], "an example both run and marked not run"


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.key in RUNS], ids=lambda e: f"{e.page}:{e.line}")
def test_the_example_prints_what_its_page_shows(example: Example, tmp_path: Path) -> None:
    assert_shows(example, RUNS[example.key](example, tmp_path))


def test_the_matcher_is_strict_but_for_times_durations_and_ellipses() -> None:
    assert pattern("paused until 2026-11-22T16:22:11Z (x)").fullmatch("paused until 2030-01-02T03:04:05Z (x)")
    assert pattern("wrote a and b (1.7 s)").fullmatch("wrote a and b (12.25 s)")
    assert pattern("cost $6.50 (…)").fullmatch("cost $6.50 (oracle $4.85: 1.34x)")
    assert not pattern("cost $6.50 (…)").fullmatch("cost $5.43 (oracle $4.85: 1.12x)")
    assert not pattern("scaling actions 38").fullmatch("scaling actions 40")
