"""A pool wired from srv-configs exactly as the batch wires it (``build_cycle``), over moto's server.

The resource groups are real Auto Scaling groups and Spot Fleets in moto (``aws_world``), reached
over HTTP (optionally through the fault-injecting proxy). The scheduler is simulated (its work a
fixed task list from the pool file), Kubernetes or Mesos: a stateful fake API server or master on
loopback driven by the real client, where the test decides which instances join as nodes (Mesos
agents, joined by their private IP) and which pods or tasks run where. Events go to a ring the
test reads; the state store is the pool's SQLite file, so a new cycle over the same harness is a
restart of the autoscaler.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from clusterman.config.loader import load_main_config
from clusterman.config.loader import load_pool_config
from clusterman.config.loader import parse_scheduler
from clusterman.core.config import EventsConfig
from clusterman.core.config import PoolIdentity
from clusterman.events.event import EventRecord
from clusterman.events.service import EventService
from clusterman.run.cycle import Cycle
from clusterman.wiring.build import build_cycle
from clusterman.wiring.setup import PoolSetup
from itests.aws_world import TAG_KEY
from itests.aws_world import ZONE
from itests.aws_world import World
from itests.recorded_api import kubeconfig
from itests.stateful_api import FakeKubernetes
from itests.stateful_api import FakeMesosMaster
from itests.stateful_api import serving

POOL = "web"
POOL_LABEL = "clusterman.com/pool"


class PoolHarness:
    def __init__(self, tmp_path: Path, world: World, scheduler: str = "simulated", aws_url: str = "") -> None:
        self.dir = tmp_path
        self.world = world
        self.scheduler = scheduler
        self.aws_url = aws_url or world.url
        self.kube: FakeKubernetes | None = None
        self.mesos: FakeMesosMaster | None = None
        self.kubeconfig = ""
        self.service = EventService(EventsConfig(port=0, ring_capacity=10_000), world.cluster, f"{POOL}.{scheduler}")
        self.service.publisher.start()
        self._serving = False
        self._stack = contextlib.ExitStack()
        self._cycles: list[Cycle] = []
        if scheduler == "kubernetes":
            self.kube = self._stack.enter_context(serving(FakeKubernetes([], [])))
            self.kubeconfig = kubeconfig(tmp_path / "kubeconfig", self.kube.url)
        if scheduler == "mesos":
            self.mesos = self._stack.enter_context(serving(FakeMesosMaster({"slaves": []}, {"frameworks": []})))

    # --- config ---------------------------------------------------------------------------------

    def configure(
        self,
        *,
        groups: tuple[str, ...] = ("asg",),
        tag_key: str = TAG_KEY,
        tasks: int = 0,
        task_cpus: float = 1.0,
        autoscaling: dict[str, Any] | None = None,
        draining: bool = False,
        node_migration: dict[str, Any] | None = None,
        main_extra: dict[str, Any] | None = None,
        cluster_extra: dict[str, Any] | None = None,
        pool_extra: dict[str, Any] | None = None,
        **limits: Any,
    ) -> str:
        """Write clusterman.yaml and the pool file (``draining``: draining_enabled, which consolidation
        needs; ``node_migration``: the pool's block); returns the main file's path."""
        cluster: dict[str, Any] = {"aws_region": "us-west-2"}
        if self.kubeconfig:
            cluster["kubeconfig_path"] = self.kubeconfig
        if self.mesos is not None:
            cluster["mesos_master_fqdn"] = self.mesos.url
        cluster.update(cluster_extra or {})
        main = {
            "clusters": {self.world.cluster: cluster},
            "aws": {"region": "us-west-2", "endpoint_url": self.aws_url},
            "cluster_config_directory": "pools",
            "state_directory": "state",
            "events": {"port": 0},
            "autoscale_signal": {"name": "MostRecentResources", "branch_or_tag": "v1", "period_minutes": 1},
            **(main_extra or {}),
        }
        pool: dict[str, Any] = {
            "resource_groups": [{kind: {"tag": tag_key}} for kind in groups],
            "scaling_limits": {
                "min_capacity": 1,
                "max_capacity": 10,
                "max_weight_to_add": 10,
                "max_weight_to_remove": 10,
                **limits,
            },
            "autoscale_signal": {"internal": True, "period_minutes": 1},
            "autoscaling": {"setpoint": 0.7, "target_capacity_margin": 0.05, **(autoscaling or {})},
        }
        if draining:
            pool["draining_enabled"] = True
        if node_migration is not None:
            pool["node_migration"] = node_migration
        pool.update(pool_extra or {})
        if self.scheduler == "simulated":
            work = [{"count": tasks, "cpus": task_cpus}] if tasks else []
            pool["simulation"] = {"node_resources": {"cpus": 2, "mem": 8000}, "join_delay_seconds": 0, "tasks": work}
        (self.dir / "clusterman.yaml").write_text(yaml.safe_dump(main))
        pools = self.dir / "pools" / self.world.cluster
        pools.mkdir(parents=True, exist_ok=True)
        (pools / f"{POOL}.{self.scheduler}").write_text(yaml.safe_dump(pool))
        return str(self.dir / "clusterman.yaml")

    def setup(self) -> PoolSetup:
        main = load_main_config(self.dir / "clusterman.yaml")
        identity = PoolIdentity(self.world.cluster, POOL, parse_scheduler(self.scheduler))
        return PoolSetup(main, identity, load_pool_config(main, identity))

    def cycle(self, dry_run: bool = False, budget_seconds: float | None = None) -> Cycle:
        """A new autoscaler over the pool (a restart, when there was one before)."""
        cycle = build_cycle(self.setup(), self.service.recorder, dry_run=dry_run, budget_seconds=budget_seconds)
        self._cycles.append(cycle)
        return cycle

    def serve_events(self) -> str:
        """Start the event API (and /metrics), as the batch does; returns its URL."""
        self.service.server.start()
        self._serving = True
        return self.service.server.url

    # --- what happened --------------------------------------------------------------------------

    def events(self, detail: str = "") -> list[EventRecord]:
        self.service.publisher.flush()
        records = list(self.service.ring.read(0, 100_000).records)
        return [r for r in records if not detail or r.event.detail.name == detail]

    # --- the Kubernetes side --------------------------------------------------------------------

    def join(
        self, instance_ids: list[str], cpus: float = 2, mem: str = "8000M", kernel: str = "", watched: bool = False
    ) -> list[str]:
        """Register instances as Ready nodes of the pool (``kernel``: their status.nodeInfo's;
        ``watched``: written as the kubelet writes them, so a running watch sees them join);
        returns the node names."""
        assert self.kube is not None
        names = []
        for instance_id in instance_ids:
            name = f"node-{instance_id}"
            node = {
                "metadata": {
                    "name": name,
                    "labels": {POOL_LABEL: POOL},
                    "resourceVersion": "1",
                    "creationTimestamp": _rfc3339(0),
                },
                "spec": {"providerID": f"aws:///{ZONE}/{instance_id}"},
                "status": {
                    "allocatable": {"cpu": str(cpus), "memory": mem},
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "nodeInfo": {"kernelVersion": kernel, "osImage": "Ubuntu 22.04.3 LTS"},
                },
            }
            if watched:
                self.kube.put("nodes", node)
            else:
                self.kube.nodes[name] = node
            names.append(name)
        return names

    def run_pods(self, node: str, count: int, cpus: float, prefix: str = "") -> list[str]:
        """Running pods of a Deployment on ``node`` ("" for pending pods that ask for the pool)."""
        assert self.kube is not None
        names = []
        for i in range(count):
            name = f"{prefix or node or 'pending'}-{i}"
            requests = {"cpu": str(cpus), "memory": "100M"}
            spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": requests}}]}
            status: dict[str, Any] = {"phase": "Running"}
            if node:
                spec["nodeName"] = node
            else:
                spec["nodeSelector"] = {POOL_LABEL: POOL}
                unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                status = {"phase": "Pending", "conditions": [unschedulable]}
            self.kube.pods[("default", name)] = {
                "metadata": {
                    "name": name,
                    "namespace": "default",
                    "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "controller": True}],
                },
                "spec": spec,
                "status": status,
            }
            names.append(name)
        return names

    def remove_nodes(self, names: list[str]) -> None:
        """Nodes leave the cluster (their instance is gone), and their pods with them."""
        assert self.kube is not None
        for name in names:
            self.kube.nodes.pop(name, None)
            for key, pod in list(self.kube.pods.items()):
                if pod["spec"].get("nodeName") == name:
                    del self.kube.pods[key]

    def forget_terminated(self, watched: bool = False) -> list[str]:
        """What the cloud controller does: drop the nodes whose instances were terminated
        (``watched``: as the API server deletes them, so a running watch sees them go)."""
        assert self.kube is not None
        gone = [name for name, obj in self.kube.nodes.items() if not self._running(obj)]
        if watched:
            for name in gone:
                self.kube.delete("nodes", name)
        else:
            self.remove_nodes(gone)
        return gone

    def _running(self, node: dict[str, Any]) -> bool:
        instance_id = node["spec"]["providerID"].rsplit("/", 1)[1]
        return self.world.ec2_state(instance_id) in ("pending", "running")

    def tainted(self) -> list[str]:
        assert self.kube is not None
        return sorted(n for n, obj in self.kube.nodes.items() if obj["spec"].get("taints"))

    # --- the Mesos side --------------------------------------------------------------------------

    def register(self, instance_ids: list[str], cpus: float = 2, mem: float = 8000) -> list[str]:
        """Register instances as active agents of the pool, by their private IP (the join Mesos
        pools use); returns the agent ids."""
        assert self.mesos is not None
        found = self.world.ec2.describe_instances(InstanceIds=instance_ids)["Reservations"]
        ips = {i["InstanceId"]: i["PrivateIpAddress"] for r in found for i in r["Instances"]}
        ids = []
        for n, instance_id in enumerate(instance_ids):
            ip = ips[instance_id]
            agent_id = f"a1b2c3d4-0000-4000-8000-{instance_id.removeprefix('i-')[-12:]:0>12}-S{n}"
            self.mesos.agents.append(
                {
                    "id": agent_id,
                    "hostname": f"ip-{ip.replace('.', '-')}.us-west-2.compute.internal",
                    "pid": f"slave(1)@{ip}:5051",
                    "attributes": {"pool": POOL},
                    "resources": {"cpus": float(cpus), "mem": float(mem), "disk": 100000.0, "gpus": 0.0},
                    "registered_time": 0.0,
                    "active": True,
                }
            )
            ids.append(agent_id)
        return ids

    def close(self) -> None:
        for cycle in self._cycles:
            cycle.close()
        if self._serving:
            self.service.server.stop()
        self.service.publisher.stop()
        self._stack.close()


def _rfc3339(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, tz=datetime.UTC).isoformat().replace("+00:00", "Z")


@contextlib.contextmanager
def harness(tmp_path: Path, world: World, scheduler: str = "simulated", aws_url: str = "") -> Iterator[PoolHarness]:
    h = PoolHarness(tmp_path, world, scheduler, aws_url)
    try:
        yield h
    finally:
        h.close()
