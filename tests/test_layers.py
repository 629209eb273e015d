"""The layer contract of docs/architecture.md, checked by reading every module's imports with ``ast``.

Arrows point down only: programs -> adapters -> core; ``clusterman_signals`` (the signal SDK,
installed into signal virtualenvs) imports nothing from ``clusterman``. Every import counts, also
those inside functions and under ``if TYPE_CHECKING:`` (a type-only arrow is still an arrow), except
for one question: what *runs* when the core is imported. That closure skips ``TYPE_CHECKING`` blocks,
because they never execute, and it follows parent packages, because importing ``a.b.c`` runs
``a/__init__.py`` and ``a/b/__init__.py`` first.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("clusterman", "clusterman_signals")

CORE = "core"
ADAPTER = "adapter"
RUN = "run"
WIRING = "wiring"
PROGRAM = "program"
SDK = "sdk"
# Above the core, each layer imports only the layers before it here: the run never imports its
# wiring, and neither imports a program.
ABOVE_CORE = (ADAPTER, RUN, WIRING, PROGRAM)

# Longest prefix wins. Anything of clusterman not named here is an adapter.
LAYER_OF_PREFIX: dict[str, str] = {
    "clusterman_signals": SDK,
    # The core: value types and pure decision.
    "clusterman.core": CORE,
    "clusterman.decision": CORE,
    "clusterman.errors": CORE,
    # One autoscaling run, from adapters it is handed.
    "clusterman.run": RUN,
    # Adapters and runs built from srv-configs.
    "clusterman.wiring": WIRING,
    # Programs: their mains, and what they share.
    "clusterman.__main__": PROGRAM,
    "clusterman.cli": PROGRAM,  # the ``clusterman`` command
    "clusterman.batch": PROGRAM,  # every other program's main, and the setup they share
    "clusterman.simulator": PROGRAM,
    "clusterman.local": PROGRAM,
}

# Where a program starts. A module with a main is a program in one of these packages, and the
# setup every program shares has one module each.
MAIN_HOMES = ("clusterman.__main__", "clusterman.batch", "clusterman.cli", "clusterman.local")
SETUP_HOME = {
    "logging.basicConfig": "clusterman.batch.arguments",
    "signal.signal": "clusterman.batch.stopping",
}

# Paths that supervisord configs written by earlier versions run: each runs its program by name
# (``runpy``), so the adapter package it sits in imports no program. tests/test_program_paths.py
# starts each.
ALIASES: dict[str, str] = {
    "clusterman.tree.fetch_signal": "clusterman.batch.fetch_signal",
    "clusterman.tree.run_signal": "clusterman.batch.run_signal",
    "clusterman.tree.parent_death": "clusterman.batch.parent_death",
}

# The core may import the standard library only, and none of its I/O modules.
CORE_FORBIDDEN_STDLIB = frozenset(
    {
        "asyncio",
        "ftplib",
        "http",
        "multiprocessing",
        "selectors",
        "shutil",
        "signal",
        "smtplib",
        "socket",
        "socketserver",
        "sqlite3",
        "ssl",
        "subprocess",
        "tempfile",
        "threading",
        "urllib",
    }
)

# The one process-wide cache (chunked sums over a snapshot's nodes): only the core defines folds.
MEMO = "clusterman.core.fold"

# Violations of today, each to be removed by the change that fixes it; the test fails when one is
# fixed and still listed, so the list cannot go stale.
KNOWN: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Import:
    target: str
    line: int
    type_only: bool


def _module_files() -> dict[str, Path]:
    files = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            files[".".join(parts)] = path
    return files


MODULES = _module_files()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, type_only: bool) -> Iterator[tuple[ast.AST, bool]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for part in child.body:
                yield part, True
                yield from _walk(part, True)
            for part in child.orelse:
                yield part, type_only
                yield from _walk(part, type_only)
            continue
        yield child, type_only
        yield from _walk(child, type_only)


def imports_of(name: str) -> list[Import]:
    """Every module a module names, resolved to the longest known module (``from a import b`` -> ``a.b``)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node, type_only in _walk(ast.parse(path.read_text(), str(path)), False):
        if isinstance(node, ast.Import):
            found += [Import(alias.name, node.lineno, type_only) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                whole = f"{source}.{alias.name}"
                found.append(Import(whole if whole in MODULES else source, node.lineno, type_only))
    return found


IMPORTS = {name: imports_of(name) for name in MODULES}


def layer_of(name: str) -> str:
    best = ""
    for prefix in LAYER_OF_PREFIX:
        if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > len(best):
            best = prefix
    return LAYER_OF_PREFIX[best] if best else ADAPTER


def ours(target: str) -> bool:
    return target.split(".")[0] in PACKAGES


def top(target: str) -> str:
    return target.split(".")[0]


def package_of(name: str) -> str:
    """The package a module counts in for cycles: ``clusterman.<sub>`` (a top-level module is its own)."""
    parts = name.split(".")
    if parts[0] != "clusterman" or len(parts) == 1:
        return parts[0] if parts[0] != "clusterman" else name
    return ".".join(parts[:2])


def _violation(name: str, imp: Import, why: str) -> str:
    return f"{name} imports {imp.target} ({why})"


def layer_violations() -> set[str]:
    found = set()
    for name, imports in IMPORTS.items():
        mine = layer_of(name)
        for imp in imports:
            if mine == SDK and top(imp.target) == "clusterman":
                found.add(_violation(name, imp, "the SDK imports nothing from clusterman"))
            elif mine == CORE and ours(imp.target) and layer_of(imp.target) != CORE:
                found.add(_violation(name, imp, f"the core imports no {layer_of(imp.target)}"))
            elif mine == CORE and not ours(imp.target):
                if top(imp.target) not in sys.stdlib_module_names:
                    found.add(_violation(name, imp, "the core imports the standard library only"))
                elif top(imp.target) in CORE_FORBIDDEN_STDLIB:
                    found.add(_violation(name, imp, "the core does no I/O"))
            elif mine in ABOVE_CORE and ours(imp.target) and layer_of(imp.target) in ABOVE_CORE:
                theirs = layer_of(imp.target)
                if ABOVE_CORE.index(theirs) > ABOVE_CORE.index(mine):
                    found.add(_violation(name, imp, f"the {mine} layer imports no {theirs}"))
            if mine != CORE and imp.target == MEMO:
                found.add(_violation(name, imp, "the chunk memo stays in the core; read per-snapshot values"))
    return found


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:n]) for n in range(1, len(parts))]


def executed_on_import(name: str) -> set[str]:
    """Every module of ours that runs when ``name`` is imported (``TYPE_CHECKING`` blocks do not run)."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current in seen or current not in MODULES:
            continue
        seen.add(current)
        todo += _parents(current)
        todo += [imp.target for imp in IMPORTS[current] if not imp.type_only and ours(imp.target)]
        todo += [p for imp in IMPORTS[current] if not imp.type_only for p in _parents(imp.target)]
    return seen


def core_closure_violations() -> set[str]:
    """Importing any core module runs only core modules (and package ``__init__``s that import only the core)."""
    found = set()
    for name in MODULES:
        if layer_of(name) != CORE:
            continue
        for ran in executed_on_import(name):
            is_package = MODULES[ran].name == "__init__.py"
            if layer_of(ran) != CORE and not is_package:
                found.add(f"importing {name} runs {ran} (a {layer_of(ran)})")
            for imp in IMPORTS[ran]:
                if not imp.type_only and not ours(imp.target) and top(imp.target) not in sys.stdlib_module_names:
                    found.add(f"importing {name} runs {ran}, which imports {imp.target}")
    return found


def package_cycles() -> dict[str, str]:
    """Strongly connected groups of clusterman's subpackages, each with one import per arrow as evidence."""
    edges: dict[str, dict[str, str]] = {}
    for name, imports in IMPORTS.items():
        for imp in imports:
            if not ours(imp.target):
                continue
            a, b = package_of(name), package_of(imp.target)
            if a != b:
                edges.setdefault(a, {}).setdefault(b, f"{name}:{imp.line}")
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    found = {}
    for group in groups:
        arrows = [f"{a} -> {b} ({edges[a][b]})" for a in group for b in group if b in edges.get(a, {})]
        found["cycle " + " ⇄ ".join(group)] = "; ".join(sorted(arrows))
    return found


def _has_main(module: ast.Module) -> bool:
    """A top-level ``def main`` or an ``if __name__ == "__main__":`` block."""
    for node in module.body:
        if isinstance(node, ast.FunctionDef) and node.name == "main":
            return True
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            return True
    return False


def _calls(module: ast.Module) -> set[str]:
    """Dotted names called anywhere in a module (``logging.basicConfig``, ``signal.signal``)."""
    return {ast.unparse(n.func) for n in ast.walk(module) if isinstance(n, ast.Call)}


def placement_violations() -> set[str]:
    """Modules placed against their layer: a main outside the programs' homes, shared program setup
    outside its one module, an alias that does more than run its program."""
    found = set()
    for name, path in MODULES.items():
        if layer_of(name) == SDK:
            continue
        module = ast.parse(path.read_text(), str(path))
        if name in ALIASES:
            if f'run_module("{ALIASES[name]}"' not in path.read_text() or any(ours(i.target) for i in IMPORTS[name]):
                found.add(f"{name} is an alias: it runs {ALIASES[name]} by name and imports nothing of ours")
        elif _has_main(module) and not any(name == h or name.startswith(h + ".") for h in MAIN_HOMES):
            found.add(f"{name} has a main outside the programs' homes ({', '.join(MAIN_HOMES)})")
        for call in _calls(module) & SETUP_HOME.keys():
            if name != SETUP_HOME[call]:
                found.add(f"{name} calls {call}: program setup is {SETUP_HOME[call]}")
    return found


def all_violations() -> dict[str, str]:
    """Each violation's stable key (no line numbers, so KNOWN survives edits) and its evidence."""
    found = {v: v for v in layer_violations() | core_closure_violations() | placement_violations()}
    return found | package_cycles()


def test_the_layers_hold() -> None:
    found = all_violations()
    new = sorted(f"{key}: {found[key]}" if found[key] != key else key for key in found.keys() - KNOWN)
    assert not new, "layer contract broken (docs/architecture.md):\n" + "\n".join(new)


def test_the_known_violations_are_still_there() -> None:
    fixed = sorted(KNOWN - all_violations().keys())
    assert not fixed, "fixed; remove from KNOWN in tests/test_layers.py:\n" + "\n".join(fixed)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import socket\n", ["socket"]),
        ("def f():\n    from clusterman.cli import main\n", ["clusterman.cli.main"]),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import boto3\n", ["typing", "boto3"]),
    ],
)
def test_the_reader_sees_every_kind_of_import(source: str, expected: list[str], tmp_path: Path) -> None:
    path = tmp_path / "probe.py"
    path.write_text(source)
    MODULES["clusterman.probe"] = path
    try:
        assert [imp.target for imp in imports_of("clusterman.probe")] == expected
    finally:
        del MODULES["clusterman.probe"]


def test_the_checker_catches_a_broken_rule(tmp_path: Path) -> None:
    """A core module that imports a program and a socket is reported twice."""
    path = tmp_path / "probe.py"
    path.write_text("import socket\nfrom clusterman.cli import main\n")
    MODULES["clusterman.decision.probe"] = path
    IMPORTS["clusterman.decision.probe"] = imports_of("clusterman.decision.probe")
    try:
        broken = {v for v in layer_violations() if v.startswith("clusterman.decision.probe")}
    finally:
        del MODULES["clusterman.decision.probe"]
        del IMPORTS["clusterman.decision.probe"]
    assert broken == {
        "clusterman.decision.probe imports socket (the core does no I/O)",
        "clusterman.decision.probe imports clusterman.cli.main (the core imports no program)",
    }


def test_a_fold_outside_the_core_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "probe.py"
    path.write_text("from clusterman.core.fold import NodeFold\n")
    MODULES["clusterman.run.probe"] = path
    IMPORTS["clusterman.run.probe"] = imports_of("clusterman.run.probe")
    try:
        broken = {v for v in layer_violations() if v.startswith("clusterman.run.probe")}
    finally:
        del MODULES["clusterman.run.probe"]
        del IMPORTS["clusterman.run.probe"]
    assert broken == {
        "clusterman.run.probe imports clusterman.core.fold (the chunk memo stays in the core; read per-snapshot values)"
    }


@pytest.mark.parametrize(
    ("name", "source", "expected"),
    [
        ("clusterman.tree.probe", "import sys\ndef main():\n    return 0\n", "has a main outside"),
        ("clusterman.cloud.probe", "import logging\nlogging.basicConfig()\n", "calls logging.basicConfig"),
        ("clusterman.run.probe", "import signal\nsignal.signal(signal.SIGTERM, print)\n", "calls signal.signal"),
    ],
)
def test_a_module_placed_against_its_layer_is_reported(name: str, source: str, expected: str, tmp_path: Path) -> None:
    path = tmp_path / "probe.py"
    path.write_text(source)
    MODULES[name] = path
    IMPORTS[name] = imports_of(name)
    try:
        broken = {v for v in placement_violations() if v.startswith(name)}
    finally:
        del MODULES[name]
        del IMPORTS[name]
    assert len(broken) == 1 and expected in broken.pop()


def test_every_package_of_clusterman_has_a_layer_on_purpose() -> None:
    """A new package is an adapter unless the table says otherwise: the table names every layer above."""
    packages = {package_of(name) for name in MODULES if name.startswith("clusterman.")}
    above = {p: layer_of(p) for p in packages if layer_of(p) in (RUN, WIRING, PROGRAM)}
    assert above == {
        "clusterman.__main__": PROGRAM, "clusterman.batch": PROGRAM, "clusterman.cli": PROGRAM,
        "clusterman.local": PROGRAM, "clusterman.simulator": PROGRAM,
        "clusterman.run": RUN, "clusterman.wiring": WIRING,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("name", "source", "why"),
    [
        (
            "clusterman.run.probe",
            "from clusterman.wiring.build import build_cycle\n",
            "the run layer imports no wiring",
        ),
        ("clusterman.run.probe", "from clusterman.cli import main\n", "the run layer imports no program"),
        ("clusterman.wiring.probe", "from clusterman.batch import autoscaler\n", "the wiring layer imports no program"),
        ("clusterman.cloud.probe", "from clusterman.run import cycle\n", "the adapter layer imports no run"),
    ],
)
def test_an_import_up_the_layers_is_reported(name: str, source: str, why: str, tmp_path: Path) -> None:
    path = tmp_path / "probe.py"
    path.write_text(source)
    MODULES[name] = path
    IMPORTS[name] = imports_of(name)
    try:
        broken = {v for v in layer_violations() if v.startswith(name)}
    finally:
        del MODULES[name]
        del IMPORTS[name]
    assert len(broken) == 1 and why in broken.pop()
