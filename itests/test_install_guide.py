"""docs/deployment.md's install guide, command by command, as far as it runs without a cluster.

On a copy of ``deploy/``: ``clusterman`` commands run for real against moto's server (the shipped
main file, its endpoint from ``AWS_ENDPOINT_URL``) and, for ``status``, the recorded Kubernetes API
through ``$KUBECONFIG``; ``sed`` and ``new-pool`` run as written; ``kubectl apply|delete -k DIR``
renders DIR with ``kubectl kustomize`` (what apply would send); ``kubectl logs|rollout`` must name a
Deployment the manifests create. A command with none of these checks fails the test, so every step
of the guide is covered.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from clusterman.local.moto_server import FAKE_CREDENTIALS
from clusterman.tree.log_follow import program_of
from itests.recorded_api import kubeconfig
from itests.recorded_api import load
from itests.recorded_api import recorded_api

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "deployment.md"


def guide_commands() -> list[str]:
    text = GUIDE.read_text()
    section = text[text.index("### Install, step by step") :]
    section = section[: section.index("\n### ", 1)]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def render(directory: Path) -> list[dict[str, Any]]:
    proc = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def deployments(root: Path) -> dict[tuple[str, str], dict[str, Any]]:
    found = {}
    for pool in (root / "deploy" / "kubernetes" / "pools").iterdir():
        for doc in render(pool):
            if doc["kind"] == "Deployment":
                found[(doc["metadata"]["namespace"], doc["metadata"]["name"])] = doc
    return found


def as_the_guide_starts(deploy: Path, commands: list[str]) -> None:
    """The copy of deploy/ as the guide finds it, whatever pools the operator has: the pools the
    guide adds (``new-pool``) not there yet, the ones it applies before adding any there (made by
    ``new-pool`` when the operator removed them)."""
    kubernetes = deploy / "kubernetes"
    links = kubernetes / "shared" / "srv-configs" / "clusterman-clusters"
    added = {}
    for words in map(shlex.split, commands):
        if words[0] == "deploy/kubernetes/new-pool":
            added[f"{words[1]}-{words[2]}"] = words[1:3]
            shutil.rmtree(kubernetes / "pools" / f"{words[1]}-{words[2]}", ignore_errors=True)
            for link in links.glob(f"{words[1]}/{words[2]}.*"):
                link.unlink()
    for words in map(shlex.split, commands):
        pool = Path(words[3]).name if words[:3] == ["kubectl", "apply", "-k"] and "/pools/" in words[3] else ""
        if pool and pool not in added and not (kubernetes / "pools" / pool).exists():
            cluster, _, name = pool.partition("-")
            subprocess.run([kubernetes / "new-pool", cluster, name], check=True, capture_output=True, timeout=30)


def test_every_step_of_the_install_guide(tmp_path, moto_server):
    shutil.copytree(REPO / "deploy", tmp_path / "deploy", symlinks=True)
    env = {**os.environ, **FAKE_CREDENTIALS, "AWS_ENDPOINT_URL": moto_server.url}
    commands = guide_commands()
    as_the_guide_starts(tmp_path / "deploy", commands)
    done = []
    with recorded_api() as api:
        api.serve("/api/v1/nodes", load("kubernetes/nodes.json"), kubernetes_list=True)
        api.serve("/api/v1/pods", load("kubernetes/pods.json"), kubernetes_list=True)
        env["KUBECONFIG"] = kubeconfig(tmp_path / "kubeconfig", api.url)
        for line in commands:
            words = shlex.split(line)
            if words[0] == "export":
                name, _, value = words[1].partition("=")
                env[name] = value
            elif words[0] == "clusterman":
                proc = subprocess.run([sys.executable, "-m", "clusterman", *words[1:]], cwd=tmp_path, env=env,
                                      capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
                unknown = words[1] == "status" and proc.returncode == 5  # no autoscaler's event API here
                assert proc.returncode == 0 or unknown, f"{line}\n{proc.stdout}{proc.stderr}"
                check_output(words, proc.stdout)
            elif words[0] in ("sed", "deploy/kubernetes/new-pool"):
                tools = {**env, "CLUSTERMAN": str(Path(sys.executable).parent / "clusterman")}  # new-pool's check
                subprocess.run(words, cwd=tmp_path, env=tools, check=True, capture_output=True, timeout=60)
            elif words[:2] == ["kubectl", "apply"] or words[:2] == ["kubectl", "delete"]:
                assert words[2] == "-k", line
                docs = render(tmp_path / words[3])
                if "/pools/" in words[3] and any("newTag" in d for d in done):  # after the upgrade's sed
                    (image,) = {c["image"] for d in docs if d["kind"] == "Deployment"
                                for c in d["spec"]["template"]["spec"]["containers"]}  # fmt: skip
                    assert image.endswith(":0.2.0"), image
            elif words[0] == "kubectl":
                check_kubectl(words, deployments(tmp_path))
            else:
                raise AssertionError(f"the install guide's command has no check here: {line}")
            done.append(line)
    assert len(done) == len(commands) >= 15
    steps = " ".join(done)
    for needed in ("clusterman setup", "kubectl apply -k", "logs", "clusterman disable", "rollout undo", "delete -k"):
        assert needed in steps, needed


def check_output(words: list[str], out: str) -> None:
    if words[1] == "setup":
        assert out.startswith("state: DynamoDB state table clusterman_cluster_state"), out
        assert "metrics: DynamoDBStore" in out, out
    elif words[1] == "disable":
        assert out.startswith("prod/batch.kubernetes: paused until ") and "(node image upgrade)" in out, out
    elif words[1] == "enable":
        assert out == "prod/batch.kubernetes: enabled\n", out
    elif words[1] == "status":
        assert out.startswith("prod/batch.kubernetes: enabled"), out
    elif words[1:3] == ["config", "check"]:
        assert re.fullmatch(r"\S+clusterman\.yaml and \d+ pool files: ok\n", out), out  # whatever pools there are


def check_kubectl(words: list[str], created: dict[tuple[str, str], dict[str, Any]]) -> None:
    namespace = words[words.index("-n") + 1]
    target = next(w for w in words if w.startswith("deploy/"))
    deployment = created.get((namespace, target.removeprefix("deploy/")))
    assert deployment is not None, f"{' '.join(words)}: no such Deployment in {sorted(created)}"
    if "logs" in words:
        pattern = words[words.index("grep") + 1]
        assert pattern == f"^{program_of('autoscaler.log')} | ", pattern  # the follower's prefix
        env = {e["name"]: e["value"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env.get("CMAN_LOG_STDOUT") == "1"
    elif words[words.index(target) - 1] == "undo":
        assert deployment["spec"]["revisionHistoryLimit"] > 0
    else:
        assert words[words.index(target) - 1] == "status", words
