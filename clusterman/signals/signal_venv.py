"""Build a signal version's virtualenv and pack it; check an unpacked one runs.

Layout of a tarball (and of a fetched version's directory)::

    venv/                 python -m venv --copies --without-pip, with clusterman_signals in site-packages
                          and the signals' own third-party packages, if they declare any
    BUILD_INFO.json       {"version": ..., "source": <git commit or "worktree">, "python": "3.11.7"}

Relocation: signals run as ``venv/bin/python -I -m clusterman_signals.run ...``, so no script
with a baked-in path is ever used (the ``activate`` scripts, which have one, are left out).
``--copies`` makes ``bin/python`` a copy of the interpreter rather than a symbolic link to the
build host's path, which a safe extraction refuses anyway; Python finds its standard library
from ``pyvenv.cfg``'s ``home``, so the host that unpacks the venv needs the same Python at the
same place (the same image), which the fetcher checks by running it before installing it.
``clusterman_signals`` itself needs nothing outside the standard library, so it is copied into
site-packages and byte-compiled by the venv's own interpreter.

Signals that need third-party packages list them in ``clusterman_signals/requirements.txt``, every
one pinned (``name==version``, hashes allowed) and the list complete: pip installs exactly those
wheels (``--no-deps --only-binary=:all:``) and ``pip check`` refuses a list that misses a
dependency, so a build never resolves anything on its own. With a wheelhouse (a directory of
wheels) the install is offline (``--no-index``). Without the file there is no pip step at all.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from clusterman.errors import UserError

VENV = "venv"
BUILD_INFO = "BUILD_INFO.json"
TOP_LEVEL = frozenset({VENV, BUILD_INFO})
PACKAGE = "clusterman_signals"
# What a signal repository's clusterman_signals/ must hold beside its namespaces: the runner and
# what the signals import (a missing one makes every fetch fail; refused at publish instead).
SDK_MODULES = ("base_signal.py", "run.py", "serving.py", "tracebacks.py", "wire.py")
PACKED_MTIME = 1_000_000_000  # every member's modification time in a tarball (2001-09-09): a fixed one
REQUIREMENTS = "requirements.txt"  # in clusterman_signals/: the signals' own third-party packages
# name[extras]==version [; marker] [--hash=...]: anything looser would let a build pick versions.
_PINNED = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._, -]+\])?\s*==\s*[A-Za-z0-9.!+_-]+"
    r"(\s*;[^#]*?)?(\s+--hash=[a-z0-9]+:[0-9a-f]+)*\s*$"
)


class BuildError(UserError):
    """The version could not be built: the message names the repository, ref or step."""


@dataclass(frozen=True)
class BuildInfo:
    version: str
    source: str  # the git commit the package came from, or "worktree"
    python: str  # the interpreter version the venv was made with, e.g. "3.11.7"

    def to_json(self) -> str:
        return json.dumps({"version": self.version, "source": self.source, "python": self.python}, indent=2) + "\n"

    @staticmethod
    def read(root: Path) -> BuildInfo:
        path = root / BUILD_INFO
        try:
            data = json.loads(path.read_text())
            return BuildInfo(str(data["version"]), str(data["source"]), str(data["python"]))
        except FileNotFoundError as e:
            raise BuildError(f"{BUILD_INFO} is missing") from e
        except (ValueError, KeyError, TypeError) as e:
            raise BuildError(f"{BUILD_INFO} is malformed: {e}") from e


def venv_python(root: Path) -> Path:
    return root / VENV / "bin" / "python"


def _run(cmd: list[str], what: str) -> str:
    """The command's stdout; a failure is a BuildError saying ``what`` failed and why."""
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"{what}: {proc.stderr.strip() or f'exit status {proc.returncode}'}")
    return proc.stdout


def export_git_ref(repo: Path, ref: str, destination: Path) -> str:
    """Write ``clusterman_signals/`` as of ``ref`` (a tag or branch) into ``destination``; return the commit."""
    try:
        top = _run(["git", "-C", str(repo), "rev-parse", "--show-toplevel"], f"{repo} is not a git repository").strip()
    except FileNotFoundError as e:
        raise BuildError("git is not installed") from e
    found = subprocess.run(
        ["git", "-C", top, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], capture_output=True, text=True
    )
    if found.returncode != 0:
        raise BuildError(f"{top}: no git tag or branch named {ref!r}")
    commit = found.stdout.strip()
    archive = destination / "source.tar"
    with archive.open("wb") as out:
        proc = subprocess.run(
            ["git", "-C", top, "archive", "--format=tar", commit, "--", PACKAGE],
            stdout=out,
            stderr=subprocess.PIPE,
            check=False,
        )
    if proc.returncode != 0:
        raise BuildError(f"{top}: {ref} has no {PACKAGE}/ directory ({proc.stderr.decode(errors='replace').strip()})")
    with tarfile.open(archive) as tar:
        tar.extractall(destination, filter="data")
    archive.unlink()
    return commit


def read_requirements(path: Path) -> list[str]:
    """The requirement lines of the signals' requirements file; a line that is not pinned is a BuildError."""
    requirements: list[str] = []
    pending, first = "", 0
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        text = "" if raw.lstrip().startswith("#") else raw.split(" #", 1)[0]
        first = first or number
        if text.rstrip().endswith("\\"):  # pip's line continuation, as pip-compile writes hashes
            pending += text.rstrip()[:-1] + " "
            continue
        line, pending, at, first = (pending + text).strip(), "", first, 0
        if not line:
            continue
        if not _PINNED.match(line):
            raise BuildError(
                f"{PACKAGE}/{REQUIREMENTS}:{at}: {line!r} is not pinned as name==version "
                "(options, URLs, -r/-e and version ranges are refused: the build must not choose versions)"
            )
        requirements.append(line)
    return requirements


def pip_command(python: str = sys.executable) -> list[str]:
    """A pip that installs into another venv (``--python``): clusterman's own, else its base Python's."""
    candidates = dict.fromkeys([python, getattr(sys, "_base_executable", python), sys.executable])
    for candidate in candidates:
        found = subprocess.run([candidate, "-m", "pip", "--version"], capture_output=True, text=True, check=False)
        if found.returncode == 0:
            return [candidate, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    raise BuildError(f"the signals' {REQUIREMENTS} needs pip, and none of {', '.join(candidates)} has it")


def install_requirements(py: str, requirements: Path, wheelhouse: Path | None, python: str = sys.executable) -> None:
    """Exactly the pinned wheels into the venv of ``py``, then ``pip check`` for missing dependencies."""
    pip = [*pip_command(python), "--python", py]
    where = ["--no-index", "--find-links", str(wheelhouse)] if wheelhouse is not None else []
    install = [
        *pip,
        "install",
        "--quiet",
        "--no-compile",  # byte-compiled after, hash-based: pip's byte-code carries the build time
        "--no-deps",
        "--only-binary=:all:",
        *where,
        "--requirement",
        str(requirements),
    ]
    source = f"the wheelhouse {wheelhouse}" if wheelhouse is not None else "the package index"
    _run(install, f"installing {PACKAGE}/{REQUIREMENTS} from {source}")
    checked = subprocess.run([*pip, "check"], capture_output=True, text=True, check=False)
    if checked.returncode != 0:
        problems = "; ".join(checked.stdout.strip().splitlines()) or checked.stderr.strip()
        raise BuildError(f"{PACKAGE}/{REQUIREMENTS} is incomplete (list every dependency, pinned): {problems}")


def check_sdk(source: Path, label: str) -> None:
    """A signal repository carries the SDK beside its namespaces: the signals import it, and the
    runner that serves them is part of it. Refused in one line naming ``label`` when it does not."""
    package = source / PACKAGE
    if not (package / "__init__.py").is_file():
        raise BuildError(f"{label}: no {PACKAGE}/__init__.py")
    missing = [name for name in SDK_MODULES if not (package / name).is_file()]
    if missing:
        raise BuildError(
            f"{label}: {PACKAGE}/ has no {', '.join(missing)}: a signal repository carries clusterman's signal "
            f"SDK (copy the *.py files of clusterman_signals/ from clusterman beside your namespaces; docs/signals.md)"
        )


def build_venv(
    source: Path, root: Path, info: BuildInfo, python: str = sys.executable, wheelhouse: Path | None = None
) -> None:
    """Make ``root/venv`` holding ``source/clusterman_signals`` (and the packages its requirements
    file pins, from ``wheelhouse`` alone when given) and write ``root/BUILD_INFO.json``. The same
    sources give the same files: the byte-code holds neither the build's time nor its directory,
    and neither does the venv's ``pyvenv.cfg``."""
    package = source / PACKAGE
    requirements_file = package / REQUIREMENTS
    requirements = read_requirements(requirements_file) if requirements_file.is_file() else []
    venv = root / VENV
    _run([python, "-m", "venv", "--copies", "--without-pip", str(venv)], f"python -m venv {venv}")
    for script in venv.glob("bin/[Aa]ctivate*"):
        script.unlink()  # they hard-code the build directory, and nothing here uses them
    _forget_build_directory(venv / "pyvenv.cfg")
    py = str(venv_python(root))
    site = Path(
        _run([py, "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], "find site-packages").strip()
    )
    shutil.copytree(package, site / PACKAGE, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if requirements:
        install_requirements(py, requirements_file, wheelhouse, python)
    # hash-based (no time), and without the build directory in the code's file names (Python sets
    # them from where the source is found at import)
    compile_hashed = [py, "-I", "-m", "compileall", "-q", "-f", "--invalidation-mode", "checked-hash",
                      "-s", str(root), str(site)]  # fmt: skip
    _run(compile_hashed, "byte-compile site-packages")
    (root / BUILD_INFO).write_text(info.to_json())


def _forget_build_directory(cfg: Path) -> None:
    """``command = python -m venv <build dir>`` (Python 3.11+) only records where it was built."""
    lines = cfg.read_text().splitlines(keepends=True)
    cfg.write_text("".join(line for line in lines if not line.startswith("command =")))


def interpreter_version(python: str = sys.executable) -> str:
    return _run([python, "-I", "-c", "import platform; print(platform.python_version())"], "python version").strip()


def pack(root: Path, tarball: Path) -> None:
    """``root``'s venv and build info as a tar.gz whose bytes depend on the files' contents alone:
    owners cleared (they mean nothing elsewhere), one fixed modification time, members in name
    order, and a gzip header without time or name. Publishing one tag twice gives one sha256, so
    the fetchers do not download and install it again."""

    def anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = PACKED_MTIME
        return info

    with (
        open(tarball, "wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        tar.add(root / BUILD_INFO, arcname=BUILD_INFO, filter=anonymous)
        tar.add(root / VENV, arcname=VENV, filter=anonymous)  # tarfile adds a directory's entries sorted


def check_runs(root: Path, timeout: float = 30.0) -> None:
    """Run the unpacked venv's interpreter once: a venv built for another Python or OS fails here."""
    python = venv_python(root)
    if python.is_symlink() or not python.is_file():
        raise BuildError(f"{VENV}/bin/python is missing or a symbolic link (build with --copies)")
    try:
        proc = subprocess.run(
            [str(python), "-I", "-c", "import clusterman_signals.run"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BuildError(f"{VENV}/bin/python does not run here: {e}") from e
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise BuildError(f"{VENV}/bin/python cannot import clusterman_signals.run: {last}")
