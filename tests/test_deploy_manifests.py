"""deploy/kubernetes and the Dockerfile, checked offline: every manifest parses, each pool's
Deployment and PodDisruptionBudget select its own pods, the env names are the ones the bootstrap
reads, the grace period outlasts the tree's stop, and each pod's mounted srv-configs pass the
bootstrap's own validation.

``kubectl kustomize`` renders the overlays (no server needed; make test installs kubectl).
``kubectl apply --dry-run=client`` is not used: it asks a server for the API's resource list.
"""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterman.batch.autoscaler_bootstrap import BootstrapSettings
from clusterman.batch.autoscaler_bootstrap import build_parser
from clusterman.batch.autoscaler_bootstrap import load
from clusterman.core.config import EventsConfig
from clusterman.data import supervisor_config

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy" / "kubernetes"
# The modules whose environment reads make up the bootstrap's input (and what it passes on).
ENV_READERS = [
    REPO / "clusterman" / "batch" / "autoscaler_bootstrap.py",
    REPO / "clusterman" / "config" / "loader.py",
    REPO / "clusterman" / "signals" / "artifacts.py",
    REPO / "clusterman" / "signals" / "client.py",
]
HEALTH = re.compile(r"http://127\.0\.0\.1:(\d+)/healthz")


def manifests() -> list[Path]:
    """Kubernetes objects and kustomizations (srv-configs/ holds clusterman's files: validated below)."""
    return sorted(p for p in DEPLOY.rglob("*.yaml") if "srv-configs" not in p.parts)


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is not installed (make test installs it from system-packages.txt)")
    proc = subprocess.run([kubectl, "kustomize", str(DEPLOY)], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return documents(proc.stdout)


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind]


def pod_spec(deployment: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = pod_spec(deployment)["containers"]
    return dict(only)


def env_of(deployment: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(deployment)["env"]}


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


# ---- the files as written --------------------------------------------------------------------


@pytest.mark.parametrize("path", manifests(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_manifest_parses_and_names_its_kind(path: Path) -> None:
    for doc in documents(path.read_text()):
        if path.name == "kustomization.yaml":
            assert set(doc) <= {
                "resources", "bases", "namespace", "nameSuffix", "commonLabels", "patchesStrategicMerge",
                "images", "generatorOptions", "configMapGenerator",
            }  # fmt: skip
            for entry in doc.get("resources", []) + doc.get("bases", []) + doc.get("patchesStrategicMerge", []):
                assert (path.parent / entry).exists(), f"{path}: {entry} does not exist"
            for generator in doc.get("configMapGenerator", []):
                for file in generator["files"]:
                    assert (path.parent / file).is_file(), f"{path}: {file} does not exist"
        else:
            assert {"apiVersion", "kind", "metadata"} <= set(doc), path
            assert doc["metadata"].get("name"), path


def test_the_base_selects_its_own_template() -> None:
    (deployment,) = documents((DEPLOY / "base" / "deployment.yaml").read_text())
    (pdb,) = documents((DEPLOY / "base" / "pdb.yaml").read_text())
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selects(deployment["spec"]["selector"]["matchLabels"], labels)
    assert selects(pdb["spec"]["selector"]["matchLabels"], labels)


# ---- what kubectl apply -k would send ---------------------------------------------------------


def test_one_deployment_and_one_budget_per_pool(rendered: list[dict[str, Any]]) -> None:
    deployments = of_kind(rendered, "Deployment")
    budgets = of_kind(rendered, "PodDisruptionBudget")
    pools = {(env_of(d)["CMAN_CLUSTER"], env_of(d)["CMAN_POOL"]) for d in deployments}
    assert len(pools) == len(deployments) == len(budgets) >= 2
    for deployment in deployments:
        spec = deployment["spec"]
        labels = spec["template"]["metadata"]["labels"]
        assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"  # never two autoscalers
        assert selects(spec["selector"]["matchLabels"], labels)
        others = [d for d in deployments if d is not deployment]
        # Its selector and its budget's select its own pods and no other pool's.
        assert not any(
            selects(spec["selector"]["matchLabels"], d["spec"]["template"]["metadata"]["labels"]) for d in others
        )
        mine = [b for b in budgets if selects(b["spec"]["selector"]["matchLabels"], labels)]
        assert len(mine) == 1
        budget_selector = mine[0]["spec"]["selector"]["matchLabels"]
        assert not any(selects(budget_selector, d["spec"]["template"]["metadata"]["labels"]) for d in others)
        assert labels["clusterman.com/pool"] == env_of(deployment)["CMAN_POOL"]


def bootstrap_env_names() -> set[str]:
    names: set[str] = set()
    for path in ENV_READERS:
        names |= set(re.findall(r"\"(CMAN_[A-Z_]+)\"", path.read_text()))
    return names


def test_env_names_are_the_ones_the_bootstrap_reads(rendered: list[dict[str, Any]]) -> None:
    known = bootstrap_env_names()
    assert {"CMAN_CLUSTER", "CMAN_POOL", "CMAN_SCHEDULER", "CMAN_ENV_CONFIG_PATH"} <= known
    for deployment in of_kind(rendered, "Deployment"):
        env = env_of(deployment)
        assert set(env) <= known, f"unknown: {set(env) - known}"
        assert {"CMAN_CLUSTER", "CMAN_POOL", "CMAN_SCHEDULER", "CMAN_ENV_CONFIG_PATH"} <= set(env)


def test_grace_period_outlasts_the_tree_stop(rendered: list[dict[str, Any]]) -> None:
    stop_timeout = build_parser().parse_args([]).stop_timeout
    conf = configparser.RawConfigParser()
    conf.read(supervisor_config())
    # supervisord stops the programs one group after another; each may take its stopwaitsecs (default 10).
    waits = sum(int(conf[s].get("stopwaitsecs", "10")) for s in conf.sections() if s.startswith("program:"))
    for deployment in of_kind(rendered, "Deployment"):
        grace = pod_spec(deployment)["terminationGracePeriodSeconds"]
        assert grace > stop_timeout and grace > waits, (grace, stop_timeout, waits)


def test_probes_ask_the_event_api_and_wait_for_the_tree(rendered: list[dict[str, Any]]) -> None:
    defaults = build_parser().parse_args([])
    start_up = defaults.fetch_timeout + defaults.signal_timeout
    for deployment in of_kind(rendered, "Deployment"):
        c = container(deployment)
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            command = " ".join(c[probe]["exec"]["command"])
            found = HEALTH.search(command)
            assert found and int(found.group(1)) == EventsConfig().port, command
        for probe in ("startupProbe", "livenessProbe"):  # a start, and a restart after a config change
            window = c[probe]["periodSeconds"] * c[probe]["failureThreshold"]
            assert window >= start_up, (probe, window, start_up)
        assert {"cpu", "memory"} <= set(c["resources"]["requests"])
        assert c["image"].startswith("registry.example.com/clusterman:")


def test_every_mount_has_its_volume_and_every_volume_its_object(rendered: list[dict[str, Any]]) -> None:
    config_maps = {d["metadata"]["name"]: d for d in of_kind(rendered, "ConfigMap")}
    secrets = {d["metadata"]["name"]: d for d in of_kind(rendered, "Secret")}
    for deployment in of_kind(rendered, "Deployment"):
        volumes = {v["name"]: v for v in pod_spec(deployment)["volumes"]}
        assert {m["name"] for m in container(deployment)["volumeMounts"]} <= set(volumes)
        for volume in volumes.values():
            if "configMap" in volume:
                data = config_maps[volume["configMap"]["name"]]["data"]
                assert {i["key"] for i in volume["configMap"]["items"]} <= set(data)
            if "secret" in volume:
                assert volume["secret"]["secretName"] in secrets


def pod_files(deployment: dict[str, Any], docs: list[dict[str, Any]], root: Path) -> Iterator[tuple[str, Path]]:
    """Write the ConfigMap and Secret files where the pod would see them, under ``root``."""
    config_maps = {d["metadata"]["name"]: d for d in of_kind(docs, "ConfigMap")}
    secrets = {d["metadata"]["name"]: d for d in of_kind(docs, "Secret")}
    volumes = {v["name"]: v for v in pod_spec(deployment)["volumes"]}
    for mount in container(deployment)["volumeMounts"]:
        volume, target = volumes[mount["name"]], root / mount["mountPath"].lstrip("/")
        if "configMap" in volume:
            data = config_maps[volume["configMap"]["name"]]["data"]
            files = {i["path"]: data[i["key"]] for i in volume["configMap"]["items"]}
        elif "secret" in volume:
            files = secrets[volume["secret"]["secretName"]]["stringData"]
        else:
            continue  # an emptyDir: nothing to read
        for name, text in files.items():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            (target / name).write_text(text)
        yield mount["mountPath"], target


def test_each_pod_s_srv_configs_pass_the_bootstrap_validation(rendered: list[dict[str, Any]], tmp_path: Path) -> None:
    for deployment in of_kind(rendered, "Deployment"):
        root = tmp_path / deployment["metadata"]["name"]
        mounts = dict(pod_files(deployment, rendered, root))
        env = env_of(deployment)
        # The files name each other by their paths in the pod: point those paths into root.
        for path in (root / "nail/srv/configs").rglob("*"):
            if path.is_file():
                text = path.read_text()
                for mount_path, target in mounts.items():
                    text = text.replace(f"{mount_path}/", f"{target}/")
                path.write_text(text)
        config = mounts["/nail/srv/configs"] / Path(env["CMAN_ENV_CONFIG_PATH"]).relative_to("/nail/srv/configs")
        args = build_parser().parse_args(["--env-config-path", str(config), "--codename", "bookworm"])
        loaded = load(BootstrapSettings.from_args(args, env))  # raises a ConfigError naming file and key
        assert loaded.plan is not None


# ---- the image --------------------------------------------------------------------------------


def test_the_dockerfile_installs_with_the_tested_script() -> None:
    text = (REPO / "Dockerfile").read_text()
    copied = re.findall(r"^COPY (?!--from)(\S+)", text, re.MULTILINE)
    assert copied and all((REPO / src).exists() for src in copied), copied
    assert "deploy/install-clusterman /opt/clusterman " in text  # the step itests/test_wheel_install.py runs
    assert re.search(r"^USER 10001", text, re.MULTILINE)
    assert 'ENTRYPOINT ["python", "-m", "clusterman.batch.autoscaler_bootstrap"]' in text
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    assert all(f"!{src.rstrip('/')}" in ignored for src in copied)  # everything it copies is in the context
