"""deploy/kubernetes, checked offline: every kustomization (the shared part, each pool, and each
optional component on top) renders with ``kubectl kustomize`` without a warning; every rendered
object is valid against the Kubernetes JSON schemas of each supported version (``kubernetes-validate``);
and what the schemas cannot see is checked here: selectors, env names, RBAC verbs against the
client calls in the code, the grace period, the probes, Secrets, and each pod's srv-configs passing
the bootstrap's own validation.

``kubectl apply --dry-run=client`` is not used: even in client mode it asks a server for the API's
resource list, and there is none offline.
"""

from __future__ import annotations

import configparser
import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes_validate
import pytest
import yaml

from clusterman.batch.autoscaler_bootstrap import BootstrapSettings
from clusterman.batch.autoscaler_bootstrap import build_parser
from clusterman.batch.autoscaler_bootstrap import load
from clusterman.config.loader import load_main_config
from clusterman.core.config import MetricsBackend
from clusterman.core.config import StateBackend
from clusterman.data import supervisor_config
from clusterman.decision.migration_condition import Operator
from clusterman.decision.migration_condition import Trait

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy" / "kubernetes"
POOLS = sorted(p.parent for p in (DEPLOY / "pools").glob("*/kustomization.yaml"))  # whatever the operator has
COMPONENTS = sorted(p.parent for p in (DEPLOY / "components").glob("*/kustomization.yaml"))
# Two pools ``new-pool`` writes in a copy of deploy/kubernetes: every check also runs on them, and the
# optional components are rendered on the first, so the checks hold whatever pools an operator has
# (none, only their own, the examples gone).
MADE = tuple(
    n for n in (f"check{i}" for i in range(len(POOLS) + 2)) if not any(p.name.endswith(f"-{n}") for p in POOLS)
)[:2]
# The Kubernetes versions the manifests are written for (docs/deployment.md says the same).
SUPPORTED_VERSIONS = [f"1.{minor}.0" for minor in range(30, 38)]
KUSTOMIZE_AT_LEAST = (5, 0)  # components, labels, replacements that append, no deprecated fields
# The modules whose environment reads make up the bootstrap's input (and what it passes on).
ENV_READERS = [
    *(REPO / "clusterman" / "batch").glob("*.py"),
    *(REPO / "clusterman" / "tree").glob("*.py"),
    REPO / "clusterman" / "config" / "loader.py",
    REPO / "clusterman" / "signals" / "artifacts.py",
    REPO / "clusterman" / "signals" / "client.py",
]
PLACEHOLDERS = re.compile(r"\b(CLUSTER|POOL|SCHEDULER|CPU|MEMORY|MEMORY_LIMIT|set-by-the-pool)\b")


# ---- rendering --------------------------------------------------------------------------------


@functools.cache
def kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        pytest.fail("kubectl is not installed (make test installs it from system-packages.txt)")
    out = subprocess.run([found, "version", "--client"], capture_output=True, text=True, check=False).stdout
    version = re.search(r"Kustomize Version: v(\d+)\.(\d+)", out)
    if version is None or tuple(map(int, version.groups())) < KUSTOMIZE_AT_LEAST:
        pytest.fail(
            f"{found} bundles kustomize {'v' + '.'.join(version.groups()) if version else 'of unknown version'}; "
            f"the manifests need v{'.'.join(map(str, KUSTOMIZE_AT_LEAST))} or later (kubectl 1.27+): upgrade it"
        )
    return found


@functools.cache
def rendered_shared() -> list[dict[str, Any]]:
    return render(DEPLOY / "shared")


def render(directory: Path) -> list[dict[str, Any]]:
    proc = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", f"{directory}: kustomize warns: {proc.stderr}"  # deprecations included
    return [d for d in yaml.safe_load_all(proc.stdout) if d is not None]


def with_component(tmp: Path, target: Path, component: Path) -> Path:
    """An overlay of ``target`` with ``component`` (before the pool's own, as the docs say)."""
    overlay = tmp / f"{target.name}+{component.name}"
    overlay.mkdir()
    kustomization = yaml.safe_load((target / "kustomization.yaml").read_text())
    if target.parent.name == "pools":  # a pool: its own file with the component in front of the rest
        for name in (target / "kustomization.yaml", *target.iterdir()):
            if name.name != "kustomization.yaml":
                shutil.copy(name, overlay / name.name)
        kustomization["resources"] = [relative(target / r, overlay) for r in kustomization["resources"]]
        own = [relative(target / c, overlay) for c in kustomization["components"]]
        kustomization["components"] = [relative(component, overlay), *own]
    else:
        kustomization = {"resources": [relative(target, overlay)], "components": [relative(component, overlay)]}
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return overlay


def relative(path: Path, start: Path) -> str:
    return os.path.relpath(path.resolve(), start)  # kustomize takes no absolute paths


def made_pools(tmp: Path) -> list[Path]:
    """A copy of deploy/kubernetes with the ``MADE`` pools added by ``new-pool`` (for the main file's
    first cluster); their overlays."""
    copy = tmp / "deploy" / "kubernetes"
    shutil.copytree(DEPLOY, copy, symlinks=True)
    cluster = next(iter(load_main_config(main_file()).clusters))
    tools = {**os.environ, "CLUSTERMAN": str(Path(sys.executable).parent / "clusterman")}  # new-pool's check
    for pool in MADE:
        subprocess.run([str(copy / "new-pool"), cluster, pool], env=tools, check=True, capture_output=True, timeout=60)
    return [copy / "pools" / f"{cluster}-{pool}" for pool in MADE]


def renderings(tmp: Path) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    yield "shared", rendered_shared()
    made = made_pools(tmp)
    for pool in [*POOLS, *made]:
        yield pool.name, render(pool)
    for component in COMPONENTS:
        if component.name == "pool":
            continue  # every pool has it
        target = DEPLOY / "shared" if component.name == "irsa" else made[0]
        yield f"{target.name}+{component.name}", render(with_component(tmp, target, component))


@pytest.fixture(scope="module")
def overlays(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("overlays")


@pytest.fixture(scope="module")
def rendered(overlays: Path) -> dict[str, list[dict[str, Any]]]:
    return dict(renderings(overlays))


def deploy_of(name: str, overlays: Path) -> Path:
    """The deploy/kubernetes a rendering's pool is in: the checkout's, or the copy with ``MADE``."""
    return DEPLOY if (DEPLOY / "pools" / name).is_dir() else overlays / "deploy" / "kubernetes"


def component_target() -> str:
    """The pool the optional components are rendered on (the first of ``MADE``)."""
    return f"{next(iter(load_main_config(main_file()).clusters))}-{MADE[0]}"


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind]


def pools(rendered: dict[str, list[dict[str, Any]]]) -> Iterator[tuple[str, list[dict[str, Any]], dict[str, Any]]]:
    for name, docs in rendered.items():
        for deployment in of_kind(docs, "Deployment"):
            yield name, docs, deployment


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


def main_file() -> Path:
    return DEPLOY / "shared" / "srv-configs" / "clusterman.yaml"


# ---- what kustomize and the schemas say -------------------------------------------------------


def test_every_kustomization_renders_without_a_warning(rendered: dict[str, list[dict[str, Any]]]) -> None:
    expected = {"shared", *(p.name for p in POOLS), f"{component_target()}+aws-key-file", "shared+irsa"}
    assert expected <= set(rendered) and len(MADE) == 2
    for path in DEPLOY.rglob("kustomization.yaml"):
        doc = yaml.safe_load(path.read_text())
        assert doc["apiVersion"].startswith("kustomize.config.k8s.io/"), path
        assert not {"bases", "commonLabels", "patchesStrategicMerge", "patchesJson6902", "vars"} & set(doc), path


def test_a_kustomize_too_old_is_one_line_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = tmp_path / "kubectl"  # what Debian's kubernetes-client 1.20 says
    old.write_text('#!/bin/sh\necho "Client Version: v1.20.9"; echo "Kustomize Version: v2.0.3"\n')
    old.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    kubectl.cache_clear()
    try:
        with pytest.raises(pytest.fail.Exception, match=r"bundles kustomize v2\.0; the manifests need v5\.0 or later"):
            kubectl()
    finally:
        kubectl.cache_clear()


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_every_object_is_valid_for_each_supported_kubernetes(
    rendered: dict[str, list[dict[str, Any]]], version: str
) -> None:
    for name, docs in rendered.items():
        for doc in docs:
            if doc["kind"] == "ServiceMonitor":
                continue  # a CRD: no schema ships offline; test_the_service_monitor_scrapes_the_pod checks it
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"{name}: {doc['kind']} {doc['metadata']['name']} on Kubernetes {version}: {e.message}")


def test_no_placeholder_is_left_and_no_secret_is_created(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for name, docs in rendered.items():
        for doc in docs:
            assert doc["kind"] != "Secret", f"{name}: manifests name existing Secrets, they never create one"
            text = yaml.safe_dump(doc)
            assert not PLACEHOLDERS.search(text), f"{name}: {doc['kind']} keeps {PLACEHOLDERS.search(text)}"


# ---- one pool ---------------------------------------------------------------------------------


def test_each_pool_is_one_replica_selecting_its_own_pods_only(rendered: dict[str, list[dict[str, Any]]]) -> None:
    every = [d for _, _, d in pools(rendered)]
    for name, docs, deployment in pools(rendered):
        spec, env = deployment["spec"], env_of(deployment)
        labels = spec["template"]["metadata"]["labels"]
        assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"  # never two autoscalers
        assert deployment["metadata"]["name"] == f"clusterman-{env['CMAN_CLUSTER']}-{env['CMAN_POOL']}"
        assert labels["clusterman.com/pool"] == env["CMAN_POOL"]
        others = [d["spec"]["template"]["metadata"]["labels"] for d in every if env_of(d) != env]
        assert others  # the shipped pools differ
        selectors = [spec["selector"]["matchLabels"]]
        selectors += [b["spec"]["selector"]["matchLabels"] for b in of_kind(docs, "PodDisruptionBudget")]
        selectors += [s["spec"]["selector"] for s in of_kind(docs, "Service")]
        assert len(selectors) == 2 + len(of_kind(docs, "Service")), name  # one budget per pool
        for selector in selectors:
            assert selects(selector, labels), (name, selector)
            assert not any(selects(selector, other) for other in others), (name, selector)
        (budget,) = of_kind(docs, "PodDisruptionBudget")
        assert budget["spec"]["maxUnavailable"] == 1  # 0 would block every drain of its node


def test_the_service_monitor_scrapes_the_pod(rendered: dict[str, list[dict[str, Any]]]) -> None:
    monitors = [(name, docs) for name, docs in rendered.items() if of_kind(docs, "ServiceMonitor")]
    assert monitors
    for name, docs in monitors:
        (monitor,), (service,), (deployment,) = (of_kind(docs, k) for k in ("ServiceMonitor", "Service", "Deployment"))
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"]), name
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["path"] == "/metrics" and endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
        (port,) = service["spec"]["ports"]
        assert port["targetPort"] in {p["name"] for p in container(deployment)["ports"]}
        assert (
            monitor["metadata"]["namespace"] == service["metadata"]["namespace"] == deployment["metadata"]["namespace"]
        )


def test_the_autoscaler_runs_off_the_pool_it_scales(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for _, docs, deployment in pools(rendered):
        pool_file = pool_file_text(docs, deployment)
        key = yaml.safe_load(pool_file).get("node_label_key", "clusterman.com/pool")
        affinity = pod_spec(deployment)["affinity"]["nodeAffinity"]
        (term,) = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert {"key": key, "operator": "NotIn", "values": [env_of(deployment)["CMAN_POOL"]]} in term[
            "matchExpressions"
        ]
        assert pod_spec(deployment)["priorityClassName"] in {
            p["metadata"]["name"] for p in of_kind(rendered["shared"], "PriorityClass")
        }
        assert pod_spec(deployment)["serviceAccountName"] in {
            a["metadata"]["name"] for a in of_kind(rendered["shared"], "ServiceAccount")
        }


def bootstrap_env_names() -> set[str]:
    names: set[str] = set()
    for path in ENV_READERS:
        names |= set(re.findall(r"\"(CMAN_[A-Z_]+)\"", path.read_text()))
    return names


def test_env_names_are_the_ones_the_bootstrap_reads(rendered: dict[str, list[dict[str, Any]]]) -> None:
    known = bootstrap_env_names()
    required = {"CMAN_CLUSTER", "CMAN_POOL", "CMAN_SCHEDULER", "CMAN_ENV_CONFIG_PATH"}
    assert required <= known
    for name, _, deployment in pools(rendered):
        env = env_of(deployment)
        assert set(env) <= known, f"{name}: unknown: {set(env) - known}"
        assert required <= set(env)


def test_grace_period_outlasts_the_tree_stop(rendered: dict[str, list[dict[str, Any]]]) -> None:
    stop_timeout = build_parser().parse_args([]).stop_timeout
    conf = configparser.RawConfigParser()
    conf.read(supervisor_config())
    # supervisord stops the programs one group after another; each may take its stopwaitsecs (default 10).
    waits = sum(int(conf[s].get("stopwaitsecs", "10")) for s in conf.sections() if s.startswith("program:"))
    for _, _, deployment in pools(rendered):
        grace = pod_spec(deployment)["terminationGracePeriodSeconds"]
        assert grace > stop_timeout and grace > waits, (grace, stop_timeout, waits)


def test_probes_reach_the_event_api_from_the_kubelet_and_wait_for_the_tree(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    events = load_main_config(main_file()).events
    assert events.host not in ("127.0.0.1", "localhost", "::1")  # the kubelet asks the pod's address
    defaults = build_parser().parse_args([])
    start_up = defaults.fetch_timeout + defaults.signal_timeout
    for _, _, deployment in pools(rendered):
        c = container(deployment)
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            get = c[probe]["httpGet"]
            assert get["path"] == "/healthz" and ports[get["port"]] == events.port
        for probe in ("startupProbe", "livenessProbe"):  # a start, and a restart after a config change
            window = c[probe]["periodSeconds"] * c[probe]["failureThreshold"]
            assert window >= start_up, (probe, window, start_up)
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert int(annotations["prometheus.io/port"]) == events.port
        assert {"cpu", "memory"} <= set(c["resources"]["requests"]) and "memory" in c["resources"]["limits"]
        assert c["image"].startswith("registry.example.com/clusterman:")


def test_the_default_state_is_durable() -> None:
    main = load_main_config(main_file())
    assert main.state.backend is StateBackend.DYNAMODB and main.metrics.backend is MetricsBackend.DYNAMODB
    assert not any(c.kubeconfig_path for c in main.clusters.values())  # in-cluster, with the ServiceAccount
    assert main.aws.access_key_file is None  # IRSA, Pod Identity or the node's role; aws-key-file adds one


def test_each_pool_file_is_where_operators_commands_look_for_it(
    rendered: dict[str, list[dict[str, Any]]], overlays: Path
) -> None:
    """Beside the main file, clusterman-clusters/<cluster>/<pool>.<scheduler> links to each overlay's
    pool file, so `clusterman disable|manage|status --env-config-path <that main file>` finds it."""
    clusters = Path(load_main_config(main_file()).cluster_config_directory).relative_to(main_file().parent)
    for name, docs, deployment in pools(rendered):
        if "+" in name:
            continue  # a pool with a component: its own rendering is checked
        deploy = deploy_of(name, overlays)
        env = env_of(deployment)
        pool_file = f"{env['CMAN_POOL']}.{env['CMAN_SCHEDULER']}"
        link = deploy / "shared" / "srv-configs" / clusters / env["CMAN_CLUSTER"] / pool_file
        target = os.path.relpath(deploy / "pools" / name, link.parent)
        assert link.is_file() and link.read_text() == pool_file_text(docs, deployment), (
            f"{link} should be a link to the pool's file: ln -s {target}/<its pool file> {link}"
        )


# ---- RBAC against the code --------------------------------------------------------------------

CLIENT_VERBS = {
    "list": "list",
    "read": "get",
    "patch": "patch",
    "create": "create",
    "delete": "delete",
    "replace": "update",
}


# The resources of the API groups the code reaches through ``CustomObjectsApi``, whose methods do
# not name them: clusterman's only custom resource is the NodeMigration.
CUSTOM_OBJECTS = {
    "cluster_custom_object": "nodemigrations",
    "cluster_custom_object_status": "nodemigrations/status",
}


def client_calls(api: type) -> set[tuple[str, str]]:
    """(resource, verb) of every method of ``api`` the code calls, e.g. ("nodes", "patch")."""
    methods = set(dir(api))
    used: set[tuple[str, str]] = set()
    for path in (REPO / "clusterman").rglob("*.py"):
        for method in set(re.findall(r"\.([a-z_]+)\b", path.read_text())) & methods:
            found = re.fullmatch(
                r"(list|read|patch|create|delete|replace)_(?:namespaced_)?([a-z_]+?)(?:_for_all_namespaces)?", method
            )
            if found is None:
                continue
            verb, kind = CLIENT_VERBS[found[1]], found[2]
            resource = {"pod_eviction": "pods/eviction", **CUSTOM_OBJECTS}.get(kind, kind + "s")
            used.add((resource, verb))
    return used


def grants(docs: list[dict[str, Any]], kind: str, group: str, name: str | None = None) -> set[tuple[str, str]]:
    """(resource, verb) the roles of ``kind`` (only the one called ``name``, if given) grant in API ``group``."""
    return {
        (r, v)
        for role in of_kind(docs, kind)
        if name is None or role["metadata"]["name"] == name
        for rule in role["rules"]
        if group in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


@pytest.mark.parametrize(
    ("api", "group", "rendering", "kind", "source"),
    [
        (kubernetes.client.CoreV1Api, "", "shared", "ClusterRole", "shared/rbac.yaml"),
        (
            kubernetes.client.CoordinationV1Api,
            "coordination.k8s.io",
            "+kubernetes-lease",  # on the components' pool
            "Role",
            "components/kubernetes-lease/role.yaml",
        ),
    ],
    ids=["cluster", "lease"],
)
def test_each_rbac_verb_is_one_the_code_uses_and_each_call_is_allowed(
    rendered: dict[str, list[dict[str, Any]]], api: type, group: str, rendering: str, kind: str, source: str
) -> None:
    used = client_calls(api)
    assert used, api
    granted = grants(rendered[component_target() + rendering if rendering.startswith("+") else rendering], kind, group)
    # watch keeps a list current: granted where the code lists (the connector's cache watches).
    allowed = used | {(r, "watch") for r, v in used if v == "list"}
    assert granted - allowed == set(), "verbs no client call uses"
    assert used - granted == set(), f"calls the {kind} forbids (403 in the cluster)"
    text = (DEPLOY / source).read_text()
    for verbs in re.findall(r"verbs: \[([^\]]*)\]", text):  # each verb's reason is written next to it
        for verb in verbs.split(", "):
            assert re.search(rf"# {verb}: ", text), f"no reason given for {verb}"
    # Leases are granted by the component only, in the namespace only.
    assert all(r != "leases" for r, _ in grants(rendered["shared"], "ClusterRole", "coordination.k8s.io"))


def test_node_migrations_are_read_and_marked_by_the_autoscaler_and_created_by_operators(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    """The autoscaler lists, watches and marks NodeMigrations; only operators (the unbound
    ``clusterman-migrate`` role, for ``clusterman migrate``) create them. Between them the two roles
    allow every call the code makes, and nothing else."""
    used = client_calls(kubernetes.client.CustomObjectsApi)
    group = "clusterman.yelp.com"
    autoscaler = grants(rendered["shared"], "ClusterRole", group, "clusterman")
    operators = grants(rendered["shared"], "ClusterRole", group, "clusterman-migrate")
    assert ("nodemigrations", "create") in used and ("nodemigrations/status", "patch") in used
    assert ("nodemigrations", "create") not in autoscaler and ("nodemigrations", "create") in operators
    allowed = used | {(r, "watch") for r, v in used if v == "list"}
    assert (autoscaler | operators) - allowed == set(), "verbs no client call uses"
    assert used - (autoscaler | operators) == set(), "calls no role allows"
    assert used - {("nodemigrations", "create")} <= autoscaler
    bindings = of_kind(rendered["shared"], "ClusterRoleBinding")
    assert all(b["roleRef"]["name"] != "clusterman-migrate" for b in bindings)  # operators bind it themselves
    (crd,) = of_kind(rendered["shared"], "CustomResourceDefinition")
    assert crd["metadata"]["name"] == "nodemigrations.clusterman.yelp.com" and crd["spec"]["scope"] == "Cluster"
    assert (crd["spec"]["group"], crd["spec"]["names"]["kind"]) == (group, "NodeMigration")
    (version,) = crd["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    condition = spec["properties"]["condition"]["properties"]
    assert version["name"] == "v1" and spec["required"] == ["cluster", "pool", "condition"]
    assert condition["trait"]["enum"] == [t.value for t in Trait]  # Clusterman's, in its order
    assert condition["operator"]["enum"] == [o.value for o in Operator]


# ---- each pod's files -------------------------------------------------------------------------


def pool_file_text(docs: list[dict[str, Any]], deployment: dict[str, Any]) -> str:
    (_, pool) = projected(docs, deployment)
    (text,) = pool.values()
    return text


def projected(docs: list[dict[str, Any]], deployment: dict[str, Any]) -> list[dict[str, str]]:
    """The srv-configs volume's files by path: the main file's ConfigMap (from the shared part) and the pool's."""
    maps = {d["metadata"]["name"]: d for d in of_kind(docs, "ConfigMap")}
    shared = {d["metadata"]["name"]: d for d in of_kind(rendered_shared(), "ConfigMap")}
    (volume,) = [v for v in pod_spec(deployment)["volumes"] if v["name"] == "srv-configs"]
    files = []
    for source in volume["projected"]["sources"]:
        config_map = source["configMap"]
        data = (maps.get(config_map["name"]) or shared[config_map["name"]])["data"]
        files.append({item["path"]: data[item["key"]] for item in config_map["items"]})
    return files


def test_each_pod_s_srv_configs_pass_the_bootstrap_validation(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    for name, docs, deployment in pools(rendered):
        (mount,) = [m for m in container(deployment)["volumeMounts"] if m["name"] == "srv-configs"]
        root = tmp_path / name / mount["mountPath"].lstrip("/")
        for files in projected(docs, deployment):
            for path, text in files.items():
                (root / path).parent.mkdir(parents=True, exist_ok=True)
                # The files name each other by their paths in the pod: point those paths into root.
                (root / path).write_text(text.replace(f"{mount['mountPath']}/", f"{root}/"))
        env = env_of(deployment)
        config = root / Path(env["CMAN_ENV_CONFIG_PATH"]).relative_to(mount["mountPath"])
        args = build_parser().parse_args(["--env-config-path", str(config), "--codename", "bookworm"])
        loaded = load(BootstrapSettings.from_args(args, env))  # raises a ConfigError naming file and key
        assert loaded.plan is not None  # it read the pool file at clusterman-clusters/<cluster>/<pool>.<scheduler>


# ---- the image --------------------------------------------------------------------------------


def test_the_dockerfile_installs_with_the_tested_script() -> None:
    text = (REPO / "Dockerfile").read_text()
    copied = re.findall(r"^COPY (?!--from)(\S+)", text, re.MULTILINE)
    assert copied and all((REPO / src).exists() for src in copied), copied
    assert "deploy/install-clusterman /opt/clusterman " in text  # the step itests/test_wheel_install.py runs
    assert re.search(r"^USER 10001", text, re.MULTILINE)
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    assert all(f"!{src.rstrip('/')}" in ignored for src in copied)  # everything it copies is in the context


# ---- least privilege and the Pod Security Standard ---------------------------------------------


def test_every_object_carries_the_app_label(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """So `kubectl get all,cm,role -l app.kubernetes.io/name=clusterman` finds everything (the pool's
    ConfigMap had no label)."""
    for name, docs in rendered.items():
        for doc in docs:
            labels = doc["metadata"].get("labels") or {}
            assert labels.get("app.kubernetes.io/name") == "clusterman", f"{name}: {doc['kind']} {doc['metadata']}"


RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}  # fmt: skip


def test_the_namespace_enforces_restricted_and_every_pod_meets_it(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """The Pod Security Standard ``restricted``, as the admission controller checks it."""
    (namespace,) = of_kind(rendered["shared"], "Namespace")
    labels = namespace["metadata"]["labels"]
    for mode in ("enforce", "warn", "audit"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
    for name, _, deployment in pools(rendered):
        spec = pod_spec(deployment)
        pod = spec.get("securityContext", {})
        assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), name
        assert pod.get("runAsNonRoot") is True and pod.get("runAsUser") != 0, name
        for volume in spec["volumes"]:
            assert set(volume) - {"name"} <= RESTRICTED_VOLUMES, (name, volume)
        for c in spec["containers"]:
            context = c["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["capabilities"]["drop"] == ["ALL"] and not context["capabilities"].get("add"), name
            seccomp = context.get("seccompProfile") or pod.get("seccompProfile")
            assert seccomp["type"] in ("RuntimeDefault", "Localhost"), name
            assert not any(p.get("hostPort") for p in c.get("ports", [])), name


def quantity(text: str) -> int:
    """Bytes of a Kubernetes binary quantity (``2Gi``, ``256Mi``)."""
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
    for suffix, size in units.items():
        if text.endswith(suffix):
            return int(text.removesuffix(suffix)) * size
    return int(text)


def test_the_ephemeral_storage_request_covers_the_empty_dirs(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """The emptyDirs may fill up to their size limits: the scheduler must find that much on the node."""
    for name, _, deployment in pools(rendered):
        limits = [quantity(v["emptyDir"]["sizeLimit"]) for v in pod_spec(deployment)["volumes"] if "emptyDir" in v]
        requested = quantity(container(deployment)["resources"]["requests"]["ephemeral-storage"])
        assert limits and requested >= sum(limits), (name, requested, limits)


def test_the_lease_role_names_only_the_pool_s_own_leases(rendered: dict[str, list[dict[str, Any]]]) -> None:
    from clusterman.state.kubernetes_lease import lease_name
    from clusterman.state.lease import AUTOSCALER_LEASE
    from clusterman.state.lease import LEASE_REQUEST

    docs = rendered[f"{component_target()}+kubernetes-lease"]
    (deployment,) = of_kind(docs, "Deployment")
    env = env_of(deployment)
    entity = f"{env['CMAN_CLUSTER']}.{env['CMAN_POOL']}.{env['CMAN_SCHEDULER']}"
    (role,) = of_kind(docs, "Role")
    named, unnamed = role["rules"]
    assert named["resourceNames"] == [lease_name(AUTOSCALER_LEASE, entity), lease_name(LEASE_REQUEST, entity)]
    assert set(unnamed["verbs"]) == {"create", "list"} and "resourceNames" not in unnamed  # they name no object


def test_an_overlay_s_labels_reach_the_service_monitor_and_no_selector(overlays: Path, tmp_path: Path) -> None:
    """A Prometheus operator selects ServiceMonitors by a label of its own (``release: ...`` for the
    kube-prometheus-stack chart): the pool's overlay gives it with ``labels``, as docs/deployment.md shows."""
    copy = overlays / "deploy" / "kubernetes"
    target = copy / "pools" / component_target()
    overlay = with_component(tmp_path, target, DEPLOY / "components" / "service-monitor")
    kustomization = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    kustomization["labels"] = [{"pairs": {"release": "kube-prometheus-stack"}}]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    docs = render(overlay)
    (monitor,), (deployment,) = of_kind(docs, "ServiceMonitor"), of_kind(docs, "Deployment")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert "release" not in monitor["spec"]["selector"]["matchLabels"]
    assert "release" not in deployment["spec"]["selector"]["matchLabels"]
    assert "release" not in deployment["spec"]["template"]["metadata"]["labels"]


def test_the_image_pins_by_digest_as_the_docs_show(tmp_path: Path) -> None:
    made = made_pools(tmp_path)
    base = tmp_path / "deploy" / "kubernetes" / "base" / "kustomization.yaml"
    digest = "sha256:" + "0123456789abcdef" * 4
    base.write_text(base.read_text().replace("    newTag: 0.1.0\n", f"    digest: {digest}\n"))
    (deployment,) = of_kind(render(made[0]), "Deployment")
    assert container(deployment)["image"] == f"registry.example.com/clusterman@{digest}"
    assert "    digest: sha256:" in (REPO / "docs" / "deployment.md").read_text()
