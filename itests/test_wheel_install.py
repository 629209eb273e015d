"""The wheel installs anywhere: built from this checkout, installed into a fresh virtualenv outside
it by the image's own install step (deploy/install-clusterman), offline from a local wheelhouse.

Everything below runs the installed ``clusterman`` from a directory outside the checkout, with no
PYTHONPATH, so the package data (config/, supervisord/) must come from the wheel.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from itests.wheelhouse import REPO
from itests.wheelhouse import build_wheel
from itests.wheelhouse import clean_env
from itests.wheelhouse import fill_wheelhouse

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("wheelhouse")]  # one worker builds it once

EXAMPLE = re.compile(
    r"### Escalator's example.*?```json\n(.*?)\n```\s*\nExplanation:\s*\n\s*```\n(.*?)\n```", re.DOTALL
)
# What the production install (clusterman[kubernetes]) may pull in: constraints.txt, nothing more.
PINNED = {
    re.sub(r"[-_.]+", "-", line.split("==")[0]).lower()
    for line in (REPO / "constraints.txt").read_text().splitlines()
    if "==" in line and not line.startswith("#")
}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def installed(wheel: Path) -> Path:
    """The venv ``deploy/install-clusterman`` made from a freshly built wheel; its bin directory."""
    house = fill_wheelhouse(f"{wheel}[kubernetes]", constraints=REPO / "constraints.txt")
    venv = wheel.parent.parent / "venv"
    # PIP_NO_COMPILE: the image byte-compiles; here it would only cost time (kubernetes has ~1000 modules).
    env = clean_env(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(house), PIP_NO_COMPILE="1", PYTHON=_base_python())
    proc = subprocess.run(
        [str(REPO / "deploy" / "install-clusterman"), str(venv), str(wheel)],
        capture_output=True,
        text=True,
        env=env,
        cwd=wheel.parent,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return venv / "bin"


@pytest.fixture(scope="module")
def installed_local(installed: Path) -> Path:
    """The wheel's venv with the ``local`` extra's packages (moto's server) as well. Installing moto's
    closure takes minutes, so the venv borrows the test venv's copies, the same pinned versions
    (constraints-dev.txt), through a path file: clusterman itself is still the wheel's, in the
    venv's own site-packages, and no checkout is on the path."""
    venv = installed.parent
    local = venv.parent / "venv-local"
    shutil.copytree(venv, local, symlinks=True)
    (site,) = local.glob("lib/python*/site-packages")
    borrowed = [p for p in sys.path if p.endswith("site-packages") and Path(p, "moto").is_dir()]
    (site / "zz-local-extra.pth").write_text("\n".join(borrowed) + "\n")  # after the venv's own packages
    for script in (local / "bin").iterdir():  # console scripts name their venv's interpreter
        if script.is_file() and not script.is_symlink() and script.read_bytes().startswith(b"#!" + bytes(venv)):
            script.write_bytes(script.read_bytes().replace(bytes(venv), bytes(local), 1))
    return local / "bin"


def _base_python() -> str:
    """The interpreter the test venv was made from (a venv made from a venv would chain to it)."""
    import sys

    return str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}")


def run(bin_dir: Path, cwd: Path, *args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / args[0]), *args[1:]],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=clean_env(**env),
        timeout=120,
        check=False,
    )


def test_help_lists_the_commands(installed: Path, tmp_path: Path) -> None:
    proc = run(installed, tmp_path, "clusterman", "--help")
    assert proc.returncode == 0, proc.stderr
    for command in ("plan", "simulate", "signal", "status", "manage"):
        assert command in proc.stdout


def test_plan_on_the_docs_example(installed: Path, tmp_path: Path) -> None:
    (document, explanation) = EXAMPLE.search((REPO / "docs" / "scaling.md").read_text()).groups()  # type: ignore[union-attr]
    proc = run(installed, tmp_path, "clusterman", "plan", "--snapshot", "-", stdin=document)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["explanation"] == explanation


def test_the_package_data_is_in_the_venv(installed: Path, tmp_path: Path) -> None:
    code = (
        "import os, clusterman.data as d; c = d.supervisor_config(); "
        "print(d.default_main_config()); print(c); print(os.access(c.parent / 'fetch_clusterman_signal', os.X_OK))"
    )
    proc = run(installed, tmp_path, "python", "-c", code)
    assert proc.returncode == 0, proc.stderr
    main, conf, executable = proc.stdout.split()
    venv = installed.parent
    assert Path(main).is_relative_to(venv) and Path(main).is_file()
    assert Path(conf).is_relative_to(venv) and Path(conf).is_file()
    assert executable == "True"


def test_constraints_txt_is_exactly_the_production_closure(installed: Path, tmp_path: Path) -> None:
    code = "import importlib.metadata as m, json; print(json.dumps([d.metadata['Name'] for d in m.distributions()]))"
    proc = run(installed, tmp_path, "python", "-c", code)
    names = {re.sub(r"[-_.]+", "-", name).lower() for name in json.loads(proc.stdout)}
    extra = names - PINNED - {"clusterman"}
    assert not extra, f"installed but not pinned in constraints.txt: {sorted(extra)}"
    stale = PINNED - names
    assert not stale, f"pinned in constraints.txt but not needed by clusterman[kubernetes]: {sorted(stale)}"
    assert "moto" not in names and "matplotlib" not in names
    # docs/deployment.md's counts of what clusterman and the image install, and the names it lists
    docs = (REPO / "docs" / "deployment.md").read_text()
    image = re.search(r"^\| `clusterman\[kubernetes\]` \(the image\) \| (\d+) \(\+ ([^)]*)\) \|$", docs, re.M)
    plain = re.search(r"^\| `clusterman` \| (\d+) \(([^)]*)\) \|$", docs, re.M)
    assert image is not None and plain is not None, "docs/deployment.md lists no distributions installed"
    assert int(image[1]) == len(names), f"docs/deployment.md says {image[1]}; it installs {len(names)}: {sorted(names)}"
    added = {re.sub(r"[-_.]+", "-", n.strip()).lower() for n in image[2].split(",")}
    assert {re.sub(r"[-_.]+", "-", n.strip()).lower() for n in plain[2].split(",")} == names - added
    assert int(plain[1]) == len(names - added)


def test_the_extras_are_optional(installed: Path, tmp_path: Path) -> None:
    """Without the kubernetes package the CLI still loads; a Kubernetes pool is one line naming the extra."""
    code = (
        "import sys; sys.modules['kubernetes'] = None\n"
        "from clusterman.cli.main import build_parser; build_parser()\n"
        "from clusterman.cluster.kubernetes import api_client\n"
        "try:\n    api_client('/nonexistent')\nexcept Exception as e:\n    print(e)\n"
    )
    proc = run(installed, tmp_path, "python", "-c", code)
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'clusterman[kubernetes]'" in proc.stdout


def test_bootstrap_validates_the_packaged_config(installed: Path, tmp_path: Path) -> None:
    """No CMAN_ENV_CONFIG_PATH: the config shipped in the wheel is read, and a missing pool is named."""
    proc = run(
        installed, tmp_path, "python", "-m", "clusterman.batch.autoscaler_bootstrap",
        CMAN_CLUSTER="local-dev", CMAN_POOL="nosuch", CMAN_SCHEDULER="simulated",
    )  # fmt: skip
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()
    assert "site-packages/clusterman/data/config/clusterman-clusters/local-dev/nosuch.simulated: file not found" in line


def test_bootstrap_starts_the_packaged_tree(installed: Path, tmp_path: Path) -> None:
    """A valid config: the bootstrap runs the wheel's fetcher script (found beside supervisord.conf,
    its executable bit kept); the fetch then fails on an endpoint that refuses, naming the version."""
    venv_config = Path(
        run(
            installed, tmp_path, "python", "-c", "import clusterman.data as d; print(d.config_directory())"
        ).stdout.strip()
    )
    main = yaml.safe_load((venv_config / "clusterman.yaml").read_text())
    main["aws"]["endpoint_url"] = "http://127.0.0.1:9"  # the discard port: nothing listens
    main["cluster_config_directory"] = str(venv_config / "clusterman-clusters")
    main["state_directory"] = str(tmp_path / "state")
    config = tmp_path / "clusterman.yaml"
    config.write_text(yaml.safe_dump(main))
    proc = run(
        installed, tmp_path, "python", "-m", "clusterman.batch.autoscaler_bootstrap", "--fetch-timeout", "90",
        CMAN_ENV_CONFIG_PATH=str(config), CMAN_CLUSTER="local-dev", CMAN_POOL="default", CMAN_SCHEDULER="simulated",
        CMAN_SIGNALS_CODENAME="wheeltest", AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
    )  # fmt: skip
    assert proc.returncode == 1
    output = proc.stdout + proc.stderr  # supervisord logs to stdout, the bootstrap to stderr
    assert "site-packages/supervisord/" not in output  # the helper scripts come from clusterman/data
    assert "signal version local could not be fetched" in output
    assert "127.0.0.1:9" in output


def test_simulate_without_matplotlib_prints_its_summary(installed: Path, tmp_path: Path) -> None:
    """The plain wheel has no matplotlib: the summary and the JSON are the answer, the plot is said missing.
    The files are named as docs/simulator.md names them: ``config/...``, read from the wheel's copy."""
    pool, sample = "config/simulator/default.mesos", "config/simulator/clusterman-sample-metrics.json.gz"
    proc = run(installed, tmp_path, "clusterman", "simulate", "--pool-config", pool, "--metrics-data-files",
               sample, "--end", "2017-12-01T16:10:00Z")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "clusterman/data/config/simulator/default.mesos" in proc.stderr  # said where it was read
    assert proc.stdout.startswith("simulated local-dev/default.mesos from 2017-12-01T16:00:00Z")
    assert "wrote simulation.json (no simulation.png: matplotlib is not installed" in proc.stdout
    assert (tmp_path / "simulation.json").is_file() and not (tmp_path / "simulation.png").exists()


def test_the_local_stack_without_its_extra_is_one_line(installed: Path, tmp_path: Path) -> None:
    proc = run(installed, tmp_path, "python", "-m", "clusterman.local.stack", "--duration", "5")
    assert proc.returncode == 1
    assert (
        proc.stderr == "clusterman.local.stack: the local stack runs moto's server: pip install 'clusterman[local]'\n"
    )


def test_the_local_stack_runs_from_the_local_extra(installed_local: Path, tmp_path: Path) -> None:
    """From the wheel, outside any checkout: the packaged config, the packaged signals, and its run
    directory under the working directory (it looked for a checkout's config/ in site-packages)."""
    proc = subprocess.Popen(
        [str(installed_local / "python"), "-m", "clusterman.local.stack", "--duration", "2m"],
        cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: list[str] = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ demand ", line):
                proc.send_signal(signal.SIGINT)  # one decision is enough: stop it as Ctrl-C does
                break
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = "\n".join(lines) + rest
    assert proc.returncode == 0, output
    assert "published the installed clusterman's clusterman_signals as s3://" in output  # no checkout here
    assert "stopped: no process of the stack is left" in output
    assert (tmp_path / ".local-stack" / "latest" / "env.sh").is_file()
    assert not list(installed_local.parent.glob("lib/python*/site-packages/.local-stack"))
